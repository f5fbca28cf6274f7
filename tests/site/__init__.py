"""The site builder (site_builder/): aggregates, pages, charts, caches."""
