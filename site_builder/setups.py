"""What makes runs one setup, and their order in time (pure).

A setup is the same model (display name and variant, i.e. quantization),
the same hardware (GPU name × count) and the same engine (name), whatever
the engine version and the date. Its runs are ordered by when they were
measured, then engine version (numbers compared as numbers), then run id.
The history pages (site_builder/series.py) group by it, and the compare
page's pickers list a setup's runs together in that order.
"""

from __future__ import annotations

import re
from typing import Any

from site_builder.views import RunView


def setup_key(run: RunView) -> tuple[str, str, str, int, str]:
    """What a series shares: model, variant, GPU (or hardware) name, GPU count, engine."""
    h, e = run.info.hardware, run.info.engine
    return (run.model.lower(), run.variant.lower(), (h.gpu_name or run.hardware).lower(),
            h.gpu_count or 1, (e.name or "").lower())


def _version_key(version: str | None) -> list[tuple[int, Any]]:
    """Natural order of versions: 0.29.0 < 0.30.1 < 0.31.0rc1 (numbers compared as numbers)."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", version or "") if p]


def time_order(run: RunView) -> tuple[Any, ...]:
    """A run's place among its setup's runs: measured, engine version, run id."""
    return (run.info.measured_at or "", _version_key(run.info.engine.version), run.run_id)
