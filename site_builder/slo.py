"""Service-level objectives: latency limits, whether a cell meets them, goodput,
and the best cell of a run under them (issue 20, item 3).

Readers choose hardware under a latency target ("the most tok/s per GPU with
p99 TTFT ≤ 2 s and p99 time between tokens ≤ 50 ms"). An SLO is a few limits,
each a metric (TTFT or time between tokens, in ms) at a level of
rundir.tails.LEVELS, written as `build-site --slo` takes it:
``ttft_p99=2000,tbt_p99=50``. Without the flag the site uses DEFAULT (the
issue's example), and readers change the limits on the page (slo.js).

Two judgements, both documented in docs/site.md:

* **A cell meets the SLO** when every limit's percentile
  (`CellResult.tail(key, level)`) exists and is at most the limit (equal
  meets). A percentile that is "—" (too few requests for that rank) cannot
  show the limit is kept, so the cell does not meet it; nor is that a miss: the
  run page says "too few requests (n of 10 needed)" and what would fill it (a
  longer --duration, or --repeats k: the tails pool a cell's windows).
* **A request meets the SLO** when its own TTFT is at most every TTFT limit
  and its own time between tokens at most every TBT limit (the level does not
  apply to one request). A request without a time between tokens (a single
  token in the window) is judged on its TTFT alone; one that never produced a
  token misses. The *share* is over the cell's requests (those of its TTFT
  distribution plus the ones without a first token), *goodput* = the window
  tokens of the requests meeting it ÷ the window.

Pure: limits and cells in, figures out. The limits are a build input applied
after aggregation, never part of the aggregate cache key.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rundir import contract, tails, words
from rundir.io import atomic_write_text
from site_builder import formats

# The metrics an SLO limits: its name in the flag -> the per-request figure.
METRICS: dict[str, tails.TailMetric] = {"ttft": tails.TTFT, "tbt": tails.TBT}
NAMES = {"ttft": "TTFT", "tbt": "Time between tokens"}
DEFAULT_SPEC = "ttft_p90=2000,tbt_p90=50"
TOO_FEW = "too few requests"


class SloError(ValueError):
    """A limit that cannot be read; its message is one line naming what was expected."""


@dataclass(frozen=True)
class Limit:
    """One limit: metric ("ttft"/"tbt") at level (a rundir.tails level) ≤ ms."""

    metric: str
    level: str
    ms: float

    @property
    def key(self) -> str:
        """The CellResult attribute / per-request figure it judges: ttft_ms, tbt_ms."""
        return METRICS[self.metric].key

    @property
    def name(self) -> str:
        """As the flag writes it: ttft_p99, tbt_p99_9."""
        return f"{self.metric}_{self.level.replace('.', '_')}"

    def value_text(self, value: float | None) -> str:
        return words.ttft(value) if self.metric == "ttft" else formats.tbt(value)

    @property
    def text(self) -> str:
        """TTFT p99 ≤ 2,000 ms"""
        return f"{NAMES[self.metric]} {self.level} ≤ {self.value_text(self.ms)}"


@dataclass(frozen=True)
class Slo:
    """The limits, in the order given (at most one per metric)."""

    limits: tuple[Limit, ...]

    @property
    def spec(self) -> str:
        """The flag's syntax, which `parse` reads back: ttft_p99=2000,tbt_p99=50."""
        return ",".join(f"{lim.name}={_number(lim.ms)}" for lim in self.limits)

    @property
    def text(self) -> str:
        return " and ".join(lim.text for lim in self.limits)

    def limit(self, metric: str) -> Limit | None:
        return next((lim for lim in self.limits if lim.metric == metric), None)


def _number(ms: float) -> str:
    return str(int(ms)) if float(ms).is_integer() else repr(float(ms))


def _level(text: str) -> str | None:
    """p99, p99.9 or p99_9 -> the rundir.tails level; None when it is not one."""
    wanted = text.lower().replace("_", ".")
    return wanted if wanted in tails.LEVELS else None


# The grammar of one limit, which slo.js uses too (site_builder/pagerules.py hands it
# over): METRIC_LEVEL=MS, ASCII spaces or tabs around the parts, the level checked
# against rundir.tails.LEVELS after, the number plain decimal (no 1_000, no 0x10: the
# two languages read those differently). Matched whole, ignoring case.
NUMBER = r"[+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
LIMIT = rf"[ \t]*({'|'.join(METRICS)})_(p[0-9._]+)[ \t]*=[ \t]*({NUMBER})[ \t]*"
_LIMIT = re.compile(LIMIT, re.IGNORECASE)


def _why(part: str, levels: str) -> str:
    """Why a part does not match LIMIT, as one line."""
    name, eq, number = part.partition("=")
    metric, _, level_text = name.strip().partition("_")
    if not eq or metric.lower() not in METRICS or not level_text:
        return (f"{part!r}: expected METRIC_LEVEL=MS with METRIC ttft or tbt "
                f"and LEVEL one of {levels}, e.g. {DEFAULT_SPEC}")
    if _level(level_text) is None:
        return f"{part!r}: unknown level {level_text!r}; expected one of {levels}"
    try:
        ms = float(number)
    except ValueError:
        ms = None
    if ms is not None and (not math.isfinite(ms) or ms <= 0):
        return f"{part!r}: the limit must be a positive number of milliseconds"
    return f"{part!r}: {number.strip()!r} is not a number of milliseconds"


def parse(text: str) -> Slo:
    """`ttft_p99=2000,tbt_p99=50` -> Slo; SloError (one line) when it cannot be read.
    slo.js `parse` is its twin (tests/site/test_page_rules.py runs both)."""
    limits: list[Limit] = []
    levels = ", ".join(tails.LEVELS)
    parts = str(text).split(",")
    if not any(p.strip() for p in parts):
        raise SloError(f"expected limits like {DEFAULT_SPEC}, got nothing")
    for part in parts:
        found = _LIMIT.fullmatch(part)
        level = _level(found[2]) if found else None
        if found is None or level is None:
            raise SloError(_why(part.strip(), levels))
        metric, ms = found[1].lower(), float(found[3])
        if not math.isfinite(ms) or ms <= 0:
            raise SloError(f"{part.strip()!r}: the limit must be a positive number of milliseconds")
        if any(lim.metric == metric for lim in limits):
            raise SloError(f"{part.strip()!r}: {metric} is limited twice; give one limit per metric")
        limits.append(Limit(metric, level, ms))
    return Slo(tuple(limits))


DEFAULT = parse(DEFAULT_SPEC)


# ---- per cell ---------------------------------------------------------------
@dataclass(frozen=True)
class Shortfall:
    """A limited percentile a cell has too few requests for: `have` of `need`."""

    limit: Limit
    have: int | None  # the requests behind it (None: not recorded)
    need: int

    @property
    def text(self) -> str:
        """3 of 10 needed"""
        if self.have is None:
            return f"{self.limit.level} needs {formats.count(self.need)}"
        return f"{formats.count(self.have)} of {formats.count(self.need)} needed"


@dataclass(frozen=True)
class Verdict:
    """Whether a cell meets the SLO: one reason per limit it does not keep
    (`reasons`), and the limits it has too few requests to be judged by
    (`too_few`). It meets only with neither; it misses only with a reason."""

    meets: bool
    reasons: tuple[str, ...] = ()
    too_few: tuple[Shortfall, ...] = ()

    @property
    def too_few_text(self) -> str:
        """too few requests (3 of 10 needed), naming each limit when they differ."""
        if not self.too_few:
            return ""
        if len({(s.have, s.need) for s in self.too_few}) == 1:
            return f"{TOO_FEW} ({self.too_few[0].text})"
        each = "; ".join(f"{NAMES[s.limit.metric]} {s.limit.level}: {s.text}" for s in self.too_few)
        return f"{TOO_FEW} ({each})"


def _samples(cell: Any, limit: Limit) -> int | None:
    return (cell.tails or {}).get(METRICS[limit.metric].count_column())


def levels_meet(lv: dict[str, list[float | None]] | None, slo: Slo) -> bool:
    """`judge`'s rule on a cell's figures at every level (lv[metric][i]: its value at
    tails.LEVELS[i], None where too few requests), as the page data carries them; slo.js
    `meets` is its twin."""
    if not lv:
        return False
    for lim in slo.limits:
        values = lv.get(lim.metric) or []
        i = tails.LEVELS.index(lim.level)
        value = values[i] if i < len(values) else None
        if value is None or value > lim.ms:
            return False
    return True


def judge(cell: Any, slo: Slo) -> Verdict:
    """A cell with numbers against the SLO: every limit's percentile exists and is ≤ it."""
    if not cell.has_numbers:
        return Verdict(False, (words.status_label(cell.status),))
    reasons = []
    short = []
    for lim in slo.limits:
        value = cell.tail(lim.key, lim.level)
        if value is None:
            short.append(Shortfall(lim, _samples(cell, lim), tails.MIN_SAMPLES[lim.level]))
        elif value > lim.ms:
            reasons.append(f"{NAMES[lim.metric]} {lim.level} {lim.value_text(value)} > "
                           f"{lim.value_text(lim.ms)}")
    return Verdict(not reasons and not short, tuple(reasons), tuple(short))


def more_requests(cells: Iterable[Any], slo: Slo) -> str | None:
    """What would give every cell that has too few requests for a limited percentile
    enough of them, as the run page says it: None when none lacks any. The factor is
    the worst cell's need ÷ have; a cell's requests grow about in step with its window
    (--duration) or its windows (--repeats, whose tails pool every window)."""
    factor, window_s, windows, lacking = 1.0, 0.0, 1, 0
    for x in cells:
        if x.phase != contract.DECODE or not x.has_numbers or not x.tails:
            continue
        short = judge(x, slo).too_few
        if not short:
            continue
        lacking += 1
        for s in short:
            if s.have:
                factor = max(factor, s.need / s.have)
        n = max(getattr(x, "windows", 1) or 1, 1)
        windows = max(windows, n)
        window_s = max(window_s, (x.measured_s or 0.0) / n)
    if not lacking:
        return None
    cells_text = "1 cell has" if lacking == 1 else f"{lacking} cells have"
    head = f"{cells_text} too few requests for a limited percentile"
    if factor <= 1.0 or window_s <= 0:
        return f"{head}: a longer --duration or --repeats k gives each cell more."
    k = math.ceil(factor)
    duration = math.ceil(window_s * factor)
    repeats = math.ceil(windows * factor)
    return (f"{head}: about {k}× the requests would fill them, e.g. bench run --duration "
            f"{duration} or --repeats {repeats} (the percentiles pool a cell's windows).")


@dataclass(frozen=True)
class Goodput:
    """The requests of a cell meeting the SLO: their share and their tokens per second."""

    share: float | None  # 0..1; None without requests
    tok_s: float | None  # None without a window
    met: int = 0
    requests: int = 0


def request_meets(ttft_ms: float | None, tbt_ms: float | None, slo: Slo) -> bool:
    """One request against the limits (the module docstring's rule)."""
    if ttft_ms is None or (isinstance(ttft_ms, float) and math.isnan(ttft_ms)):
        return False  # never produced a token
    for lim in slo.limits:
        value = ttft_ms if lim.metric == "ttft" else tbt_ms
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue  # no time between tokens: judged on TTFT alone
        if value > lim.ms:
            return False
    return True


def goodput(per_request: dict[str, Sequence[float | None]], window_s: float | None,
            slo: Slo) -> Goodput:
    """Share and goodput of one cell from its per-request figures (aligned lists:
    ttft_ms, tbt_ms, window_tokens; drilldown.per_request)."""
    ttft = per_request.get("ttft_ms") or []
    tbt = per_request.get("tbt_ms") or [None] * len(ttft)
    tokens = per_request.get("window_tokens") or [0] * len(ttft)
    met = [request_meets(a, b, slo) for a, b in zip(ttft, tbt, strict=True)]
    good = sum(t for t, ok in zip(tokens, met, strict=True) if ok)
    share = sum(met) / len(met) if met else None
    rate = good / window_s if window_s and window_s > 0 else None
    return Goodput(share, rate, sum(met), len(met))


# ---- per run ------------------------------------------------------------------
def best_cell(cells: Iterable[Any], slo: Slo, value: Callable[[Any], float | None],
              higher: bool = True) -> Any | None:
    """The cell meeting the SLO with the best value (ties: the smaller context, then
    the fewer requests: less work for the same figure); None when none meets it."""
    sign = -1 if higher else 1
    meeting = [(v, x) for x in cells if judge(x, slo).meets and (v := value(x)) is not None]
    if not meeting:
        return None
    return min(meeting, key=lambda p: (sign * p[0], p[1].context, p[1].concurrency))[1]


NONE_MEET = "no cell meets the limits"


def medians_only(cells: Iterable[Any]) -> bool:
    """Whether a run's decode cells with numbers carry medians only (an imported run:
    its published figures), so no percentile past p50 exists to judge a limit by."""
    measured = [x for x in cells if x.phase == contract.DECODE and x.has_numbers]
    return bool(measured) and not any(x.tails for x in measured)


def none_meets(cells: Iterable[Any], slo: Slo) -> str:
    """Why no cell of a run meets the limits, as its ranking row says it (slo.js
    says the same from the ranking data): every imported run read "no cell meets
    the limits", though it was never judged: it has medians only, no p90."""
    cells = [x for x in cells if x.phase == contract.DECODE and x.has_numbers]
    past = sorted({lim.level for lim in slo.limits if lim.level != tails.LEVELS[0]},
                  key=tails.LEVELS.index)
    levels = " / ".join(past)
    if past and medians_only(cells):
        return (f"no {levels} published (medians only): set the limits at "
                f"{tails.LEVELS[0]} to rank it")
    if past and cells and all(any(x.tail(lim.key, lim.level) is None for lim in slo.limits)
                              for x in cells):
        return (f"too few requests for {levels} in every cell: a lower level ranks it "
                f"(a longer --duration or --repeats fills it)")
    return NONE_MEET


@dataclass
class RunSlo:
    """The build's SLO as one run's pages use it: per decode cell its verdict and,
    where the per-request figures exist, its goodput (filled by `measure`)."""

    slo: Slo
    given: bool = False  # build-site --slo was given (else the site default)
    figures: dict[str, Goodput] = field(default_factory=dict)

    def record(self, cell: Any) -> dict[str, float | None]:
        """The downloads' columns of one cell (None where there is no figure)."""
        g = self.figures.get(cell.key)
        return {"slo_met_share": g.share if g else None, "goodput_tok_s": g.tok_s if g else None}

    def more_requests(self, cells: Iterable[Any]) -> str | None:
        """What would fill the cells too few requests leave unjudged (None: none)."""
        return more_requests(cells, self.slo)

    def rows(self, cells: Iterable[Any]) -> list[dict[str, Any]]:
        """The run page's SLO table: per decode cell with numbers, as printed. Only
        cells with raw data (their tails): an imported run's published medians
        cannot show a tail limit is kept, so its page shows no table."""
        out = []
        for x in cells:
            if x.phase != contract.DECODE or not x.has_numbers or not x.tails:
                continue
            v = judge(x, self.slo)
            g = self.figures.get(x.key)
            # A verdict that cannot be reached is not a miss; a real miss names the
            # limits it could not judge too. The share then says how many requests.
            unjudged = [f"{NAMES[f.limit.metric]} {f.limit.level}: {TOO_FEW} ({f.text})"
                        for f in v.too_few] if v.reasons else [v.too_few_text] * bool(v.too_few)
            why = "; ".join([*v.reasons, *unjudged])
            share = percent(g.share) if g else words.MISSING
            if g and v.too_few and not v.reasons and g.requests:
                share = f"{share} ({formats.count(g.met)} of {formats.count(g.requests)})"
            out.append({"cell": x, "meets": v.meets,
                        "state": "meets" if v.meets else "misses" if v.reasons else "too-few",
                        "why": why, "share": share,
                        "goodput": words.tok_s(g.tok_s) if g else words.MISSING,
                        "levels": {lim.name: lim.value_text(x.tail(lim.key, lim.level))
                                   for lim in self.slo.limits}})
        return out


def percent(share: float | None) -> str:
    """0.953 -> 95.3%"""
    return words.MISSING if share is None else f"{formats.round_half_up(share * 100, 1):.1f}%"


def measure(run_slo: RunSlo, cells: Iterable[Any], details: dict[str, dict[str, Any]]) -> None:
    """Fill the goodput of every decode cell with per-request figures in details."""
    for x in cells:
        per_request = (details.get(x.key) or {}).get("per_request")
        if x.phase == contract.DECODE and x.has_numbers and per_request:
            run_slo.figures[x.key] = goodput(per_request, x.measured_s, run_slo.slo)


def figures_json(run_slo: RunSlo) -> dict[str, list[float | int | None]]:
    """The figures as the build cache keeps them (key -> [share, tok_s, met, requests])."""
    return {k: [g.share, g.tok_s, g.met, g.requests] for k, g in run_slo.figures.items()}


def figures_from_json(data: dict[str, list[Any]]) -> dict[str, Goodput]:
    return {k: Goodput(v[0], v[1], int(v[2]), int(v[3])) for k, v in data.items()}


# ---- the one edge: a run's figures, cached beside its aggregate ------------------
def attach(run: Any, folder: Path | None, load_details: Callable[[], dict[str, Any]]) -> None:
    """Fill run.slo's goodput figures: from the build cache when this run (its digest)
    was measured against these limits before, else from its drill-down details (read
    only then), cached for the next build. A run without run.slo is left alone."""
    run_slo = getattr(run, "slo", None)
    if run_slo is None or run_slo.figures:
        return
    spec = hashlib.sha256(run_slo.slo.spec.encode()).hexdigest()[:12]
    path = folder / f"{run.agg.digest}.slo-{spec}.json" if folder is not None else None
    try:
        if path is not None:
            run_slo.figures = figures_from_json(json.loads(path.read_text(encoding="utf-8")))
            return
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        pass
    if not any(x.phase == contract.DECODE and x.has_detail for x in run.agg.cells):
        return
    measure(run_slo, run.agg.cells, load_details())
    if path is not None:
        atomic_write_text(path, json.dumps(figures_json(run_slo), allow_nan=False))
