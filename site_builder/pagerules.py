"""The rules the pages' scripts recompute, handed to them as data (issue 31, item 3).

The build decides the rankings, the frontiers and the limits' judgement in Python;
the page redoes some of that when the reader changes the limits, the percentile or
the measure (templates/static/rules.js). So that the two cannot drift, what those
rules are made of comes from here, inlined in the page as `#page-rules` (the way
`metrictable.js_rules` serves the compare page): the percentile levels
(rundir/tails.py), the SLO grammar (site_builder/slo.py: the metrics, their names,
the pattern of one limit, the site default) and the ranking measures (which way is
better, from the metric table through oppoint.METRICS). tests/site/test_page_rules.py
runs each rule in both languages on the same inputs.
"""

from __future__ import annotations

from rundir import tails
from site_builder import oppoint, slo


def js_rules() -> dict[str, object]:
    """The page's rules as JSON-ready data."""
    measures = [*oppoint.METRICS, oppoint.COST_METRIC]
    return {
        "levels": list(tails.LEVELS),
        "slo": {"metrics": list(slo.METRICS), "names": dict(slo.NAMES), "limit": slo.LIMIT,
                "default": slo.DEFAULT_SPEC},
        "higher": {key: higher for key, _, higher in measures},
    }
