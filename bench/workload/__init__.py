"""What the collector sends: the prompts of a cell.

The traffic-shape axes (shared prefixes, conversations, arrival schedules,
prompt sources) live here, beside the filler prompts; measure/ runs them."""
