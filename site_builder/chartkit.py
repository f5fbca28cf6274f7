"""The common ground of the page charts: the vendored Vega versions, the shared
config, and the `Chart` record (spec, caption and no-JS fallback) of each one.

Kept apart from `charts` (which builds the specs) so that module stays small.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import vl_convert as vlc

from rundir import contract as c
from site_builder import fallback as fb


def _newest_vega_lite() -> str:
    """The newest Vega-Lite vl-convert ships (the one the specs target)."""
    return max(vlc.get_vegalite_versions(), key=lambda v: tuple(int(x) for x in v.split(".")))


VL_VERSION = _newest_vega_lite()
# Live charts are drawn to their container's width (vega-embed refits them on a
# window resize), so their text stays at its size (>= 10 px) on a phone.
WIDTH, HEIGHT = "container", 240
FIXED_WIDTH = 440  # parts of a concatenated chart (site.js fits them to the container)
AUTOSIZE = {"type": "fit", "contains": "padding", "resize": True}
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
CONFIG = {
    "font": FONT,
    "view": {"continuousWidth": 300, "continuousHeight": 300},
    "axis": {"labelFontSize": 11, "titleFontSize": 12, "gridColor": "#e6e8eb"},
    "legend": {"labelFontSize": 11, "titleFontSize": 12, "orient": "right"},
    "title": {"fontSize": 13}, "text": {"fontSize": 11},
    "background": "white",
}
# A missing cell (null y) breaks its line instead of joining its neighbours.
INVALID = "break-paths-filter-domains"
# Room for text: the fallback is laid out with estimated font metrics, a
# reader's browser may draw wider glyphs.
PADDING = {"left": 5, "top": 5, "right": 30, "bottom": 5}


@dataclass
class Chart:
    """One chart of a page: its element id, caption, spec, and no-JS fallback."""

    id: str
    title: str
    caption: str
    spec: dict[str, Any]
    svg: str = ""
    draw: Callable[[], str] | None = field(default=None, repr=False, compare=False)

    @property
    def spec_json(self) -> str:
        return json.dumps(self.spec, separators=(",", ":"), sort_keys=True, allow_nan=False)


def vega_versions() -> dict[str, str]:
    """Versions of the libraries in the vendored bundle (they name its file)."""
    return {
        "vega": vlc.get_vega_version(),
        "vega-lite": VL_VERSION,
        "vega-embed": vlc.get_vega_embed_version(),
    }


def bundle_name() -> str:
    """File name of the vendored bundle (changes with its versions)."""
    v = vega_versions()
    return f"vega-{v['vega']}_vega-lite-{v['vega-lite']}_vega-embed-{v['vega-embed']}.js"


@functools.lru_cache(maxsize=1)
def bundle_js() -> str:
    """Vega, Vega-Lite and vega-embed in one script that sets window globals (built once)."""
    return vlc.javascript_bundle(vl_version=VL_VERSION)


def make(chart_id: str, title: str, caption: str, spec: dict[str, Any],
         draw: Callable[[], str]) -> Chart:
    """A chart with the shared config; a container-wide one is fitted to its box."""
    full = {**spec, "description": f"{title}. {caption}", "config": CONFIG, "padding": PADDING}
    if spec.get("width") == "container":
        full.setdefault("autosize", AUTOSIZE)
    return Chart(chart_id, title, caption, full, draw=draw)


def nominal(name: str, title: str | None = None) -> dict[str, Any]:
    """A nominal field (tooltips, categories)."""
    return {"field": name, "type": "nominal", **({"title": title} if title else {})}


def quantitative(name: str, title: str | None = None, **kw: Any) -> dict[str, Any]:
    """A quantitative field, with any extra encoding properties."""
    return {"field": name, "type": "quantitative", **({"title": title} if title else {}), **kw}


# Heatmap cell text in narrow cells (a phone): whole numbers, shorter words.
NARROW_CELL = 58
TINY_STATUS = {c.OVER_CAPACITY: "cap.", c.LOOPED: "loop", c.ERROR: "err.", c.PENDING: "—"}
SHORT_STATUS = {c.OVER_CAPACITY: "over cap.", c.LOOPED: "looped", c.ERROR: "error",
                c.PENDING: "not run"}


def color(name: str, title: str, domain: list[str], **kw: Any) -> dict[str, Any]:
    """A nominal colour encoding over the line palette, shared with the fallback."""
    scale = {"domain": domain, "range": fb.line_colors(len(domain))}
    return {**nominal(name, title), "scale": scale, **kw}
