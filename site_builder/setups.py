"""What makes runs one setup, and their order (pure).

A setup is the same model (display name and variant, i.e. quantization),
the same hardware (GPU name × count) and the same engine (name), whatever
the engine version and the date. Its runs are ordered by engine version when
every run's version can be read and they differ (a re-measure of an older
version after a newer one is not "the latest run", and its figures are no
regression of the newer version), then by when they were measured, then run
id; otherwise by when they were measured, then engine version, then run id.
The history pages (site_builder/series.py) group by it, and the compare
page's pickers list a setup's runs together in that order.
"""

from __future__ import annotations

import re
from typing import Any

from site_builder.views import RunView

# PEP 440 versions (vLLM, SGLang: 0.30.1rc1.dev452+g73a583112, 0.1.dev1+g9fedd24fa)
# and llama.cpp build numbers (b4567, b1-0c1e57098), with any local or commit suffix.
_VERSION = re.compile(
    r"^[vb]?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|alpha|b|beta|c|rc|pre|preview)[-_.]?(?P<pre_n>\d*))?"
    r"(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post>\d+))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>\d*))?"
    r"(?:[+ ].*|-g?[0-9a-f]{6,40})?$", re.IGNORECASE)
_PRE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}


def setup_key(run: RunView) -> tuple[str, str, str, int, str]:
    """What a series shares: model, variant, GPU (or hardware) name, GPU count, engine."""
    h, e = run.info.hardware, run.info.engine
    return (run.model.lower(), run.variant.lower(), (h.gpu_name or run.hardware).lower(),
            h.gpu_count or 1, (e.name or "").lower())


def version_key(version: str | None) -> tuple[Any, ...] | None:
    """A comparable key of an engine version by PEP 440's order (0.30.1.dev1 <
    0.30.1rc1 < 0.30.1 < 0.30.1.post1; 1.0 == 1.0.0; a local or commit suffix
    ignored), or None when the text is not such a version."""
    m = _VERSION.match((version or "").strip())
    if not m:
        return None
    release = [int(p) for p in m["release"].split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    pre, post, dev = m["pre"], m["post"], m["dev"]
    # a dev release of a final version sorts before its pre-releases
    pre_key = (1, _PRE[pre.lower()], int(m["pre_n"] or 0)) if pre else \
        ((0,) if dev is not None and post is None else (2,))
    post_key = -1 if post is None else int(post)
    dev_key = (1,) if dev is None else (0, int(dev or 0))
    return (tuple(release), pre_key, post_key, dev_key)


def _natural(version: str | None) -> list[tuple[int, Any]]:
    """Natural order of any text: numbers compared as numbers."""
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", version or "") if p]


def time_order(run: RunView) -> tuple[Any, ...]:
    """A run's place by time: measured, engine version, run id."""
    return (run.info.measured_at or "", _natural(run.info.engine.version), run.run_id)


def by_version(runs: list[RunView]) -> bool:
    """Whether a setup's runs are ordered by engine version: every version read, not all equal."""
    keys = [version_key(r.info.engine.version) for r in runs]
    return all(k is not None for k in keys) and len(set(keys)) > 1


def order_runs(runs: list[RunView]) -> list[RunView]:
    """A setup's runs in order: by engine version where versions differ (then date,
    then run id), else by date (time_order)."""
    if by_version(runs):
        return sorted(runs, key=lambda r: (version_key(r.info.engine.version),
                                           r.info.measured_at or "", r.run_id))
    return sorted(runs, key=time_order)
