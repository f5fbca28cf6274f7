"""How often a repeated cell's 95% interval holds the truth, how wide it is, and
the smallest change the A/B page can call with it: a seeded simulation, pure
(no server, no network), of windows like the collector's.

    python benchmarks/interval_coverage.py                 # 400 trials, k = 2, 3, 5, 8
    python benchmarks/interval_coverage.py --trials 1000 --ks 3,5 --only quiet,stalls

Why a simulation: the truth of a real cell is unknown, so coverage cannot be
measured on real runs; nine runs of one schedule (issue 30) say little about a
rate of misses near 5%. Each scenario draws k back-to-back windows of one
steady state whose true figure is known, asks each interval method for its
95% interval, and counts (docs/methodology.md, "Repeats and intervals"):

- **coverage**: the share of trials whose interval holds the true figure,
  with its binomial standard error (about 1.1 points at 400 trials);
- **width**: the median interval width over the true figure;
- **calls 80%**: the smallest relative change that the A/B rule (significant
  only when the two intervals do not overlap) calls in at least 80% of pairs.
  Trials are paired (A, B), both drawn from the same steady state; a run
  slower by d is B scaled by (1 − d), and every method is scale-equivariant
  (a scaled sample gives the scaled interval, seed for seed), so the pair is
  called at d exactly when d > 1 − lo(A) / hi(B). The 80th percentile of that
  threshold over the pairs is the change called with 80% power;
- **false calls**: the share of identical pairs (d = 0) called different.

The true figure is the one the published median over windows tends to as k
grows: the median of the window-value distribution of the steady state,
from many simulated windows (for a symmetric distribution, its mean).

Scenarios, each anchored to a measurement (see SCENARIOS): total tok/s from
ten time slices a window, with slices independent, bunched (a quiet host: the
methodology's example), stalled (a loaded host), or under window-to-window
drift larger than the slices show (the llama.cpp sample), and drift correlated
from window to window (a stress test no window-based method passes); and
per-request tok/s from streams whose every third request runs at half speed
(the methodology's two-group case), at 1 and 8 streams.

Methods: the two-stage bootstrap (rundir.intervals, what the builder
publishes at every k); and three candidates (benchmarks/_interval_candidates.py,
not published): Student's t interval over the k window values (the textbook
interval; the slices and requests inside are not used); t ∪ rank, the t
interval joined with the window values' distribution-free rank interval
(narrower from k = 5, but worse than the bootstrap when consecutive windows
drift together, so not adopted); and a circular block bootstrap of the slices
across windows (total tok/s only; blocks of half a window miss the drift
between windows). `--methods
published` is what the builder publishes at each k.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks import _interval_candidates as candidates  # noqa: E402
from rundir import intervals  # noqa: E402

SLICES = intervals.SLICES
Windows = list[np.ndarray]
Generator = Callable[[np.random.Generator, int], Windows]
Interval = tuple[float, float]

# ---- scenarios -----------------------------------------------------------------


def iid_slices(rng: np.random.Generator, k: int) -> Windows:
    """Slices independent, 16% apart (a slice's spread in the reference-server
    runs: 16–18%), no drift: the slices tell the whole truth of a window."""
    return list(1.0 + 0.16 * rng.standard_normal((k, SLICES)))


def quiet_host(rng: np.random.Generator, k: int) -> Windows:
    """Bunched slices: a chunk read late moves its tokens into the next slice,
    so neighbouring slices err in opposite directions and a window's total is
    steadier than its slices say (slices 13% apart, lag-1 correlation −0.45;
    window totals 2.1% apart with 1% drift: the methodology's example, k = 3
    totals 1,068–1,108 around 1,090, and its two-stage interval 983–1,144)."""
    drift = 1.0 + 0.01 * rng.standard_normal((k, 1))
    late = rng.standard_normal((k, SLICES + 1))
    own = rng.standard_normal((k, SLICES))
    return list(drift * (1.0 + 0.085 * (late[:, 1:] - late[:, :-1]) + 0.0443 * own))


def loaded_host(rng: np.random.Generator, k: int) -> Windows:
    """Host stalls: each window's host load varies; a slice stalls with a chance
    that grows with it, losing 20–70% of its time, and half of the stalls run
    on into the next slice (measured against the reference server on a loaded
    2-core host, 8 streams, 8 windows of 4 s: totals 898–1,183 (10.8% apart),
    slices 18.5% apart: the windows differ about twice as much as their slices
    say)."""
    load = rng.lognormal(0.0, 0.8, (k, 1))
    stall = rng.random((k, SLICES)) < np.minimum(0.9, 0.1 * load)
    runs_on = stall & (rng.random((k, SLICES)) < 0.5)
    rate = 1.0 - stall * rng.uniform(0.2, 0.7, (k, SLICES))
    rate[:, 1:] *= 1.0 - runs_on[:, :-1] * rng.uniform(0.2, 0.7, (k, SLICES - 1))
    return list(rate * (1.0 + 0.02 * rng.standard_normal((k, SLICES))))


def _drifting(rng: np.random.Generator, k: int, rho: float) -> Windows:
    z = rng.standard_normal(k)
    state = np.empty(k)
    state[0] = z[0]
    for i in range(1, k):
        state[i] = rho * state[i - 1] + math.sqrt(1.0 - rho * rho) * z[i]
    drift = (1.0 + 0.04 * state)[:, None]
    return list(drift * (1.0 + 0.06 * rng.standard_normal((k, SLICES))))


def drift(rng: np.random.Generator, k: int) -> Windows:
    """Window-to-window drift (4%) beyond the slices' own noise (6%, so 1.9% on a
    window): the windows differ 2.3× more than the slices say (in the bundled
    llama.cpp sample, 2-s sub-windows of each cell differ 1.5–3.2× more)."""
    return _drifting(rng, k, 0.0)


def correlated_drift(rng: np.random.Generator, k: int) -> Windows:
    """As `drift`, with consecutive windows' drift correlated 0.5 (a slow
    wander): k windows hold fewer than k measurements. A stress test."""
    return _drifting(rng, k, 0.5)


@dataclass(frozen=True)
class Streams:
    """Per-request tok/s from C streams that restart at once, every third request
    (global arrival order) at half speed: 200 and 100 tok/s, 256 tokens, 4-s
    windows, TTFT 26 ± 3 ms, 4% per-request and 2% per-window spread (the
    methodology's two-group example). A request spanning two windows gives a
    rate to both; a slow request holds its stream twice as long, so about half
    the streams run slow ones at a time and a window's median can fall in
    either group."""

    streams: int
    window_s: float = 4.0
    tokens: int = 256

    def __call__(self, rng: np.random.Generator, k: int) -> Windows:
        windows: list[list[float]] = [[] for _ in range(k)]
        drift = (1.0 + 0.02 * rng.standard_normal(k)).tolist()
        end, span = k * self.window_s, self.window_s
        most = int(self.streams * (end + 6.0) * 200.0 / self.tokens) + 8  # requests at most
        noise = (1.0 + 0.04 * rng.standard_normal(most)).tolist()
        ttft = np.maximum(0.0, 0.026 + 0.003 * rng.standard_normal(most)).tolist()
        free = [-float(rng.uniform(3.0, 6.0))] * self.streams  # warm-up: all start together
        for number in range(1, most + 1):
            start = min(free)
            if start >= end:
                break
            speed = (100.0 if number % 3 == 0 else 200.0) * noise[number - 1]
            first = start + ttft[number - 1]
            last = first + self.tokens / speed
            free[free.index(start)] = last
            for w in range(max(0, int(first // span)), min(k, int(last // span) + 1)):
                if min(last, (w + 1) * span) - max(first, w * span) >= 2.0 / speed:
                    windows[w].append(speed * drift[w])  # two tokens after its first in the window
        return [np.asarray(v) for v in windows]


@dataclass(frozen=True)
class Scenario:
    """A steady state to draw windows from, and the statistic of a window's samples."""

    name: str
    draw: Generator
    statistic: str  # "mean" of slices (total tok/s) or "median" of requests
    stress: bool = False  # reported, not a criterion: no window-based method holds it


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("iid", iid_slices, "mean"),
    Scenario("quiet", quiet_host, "mean"),
    Scenario("stalls", loaded_host, "mean"),
    Scenario("drift", drift, "mean"),
    Scenario("two-groups-c1", Streams(1), "median"),
    Scenario("two-groups-c8", Streams(8), "median"),
    Scenario("correlated", correlated_drift, "mean", stress=True),
)


def window_values(windows: Windows, statistic: str) -> np.ndarray:
    """Each window's figure: the mean of its slices or the median of its requests."""
    return np.array([w.mean() if statistic == "mean" else np.median(w) for w in windows])


def truth(scenario: Scenario, seed: int = 1, windows: int = 16_000) -> float:
    """The figure the published median tends to: the median of many windows'
    values (drawn 8 at a time: the stream scenarios start each draw afresh)."""
    rng = np.random.default_rng(seed)
    values = [window_values(scenario.draw(rng, 8), scenario.statistic)
              for _ in range(windows // 8)]
    return float(np.median(np.concatenate(values)))


# ---- interval methods ------------------------------------------------------------

def two_stage(windows: Windows, statistic: str, seed: int) -> Interval | None:
    """The two-stage bootstrap (rundir.intervals.two_stage_interval): what the builder
    publishes at every k."""
    return intervals.two_stage_interval(windows, statistic, seed)


def student_t(windows: Windows, statistic: str, seed: int) -> Interval | None:
    """Student's t interval over the k window values (a candidate, not published),
    stretched to hold their median: exact for independent normal windows,
    blind to the slices and requests inside them."""
    del seed  # nothing random
    return candidates.t_interval(window_values(windows, statistic)) if len(windows) > 1 else None


def t_or_rank(windows: Windows, statistic: str, seed: int) -> Interval | None:
    """The t interval joined with the window values' distribution-free rank
    interval (a candidate, not published: benchmarks/_interval_candidates.py)."""
    del seed
    return candidates.windows_interval(window_values(windows, statistic)) if len(windows) > 1 else None


def published(windows: Windows, statistic: str, seed: int) -> Interval | None:
    """What the builder publishes (rundir.intervals.two_stage_interval) at every k."""
    return intervals.two_stage_interval(windows, statistic, seed)


def block_bootstrap(windows: Windows, statistic: str, seed: int, block: int = 5,
                    replicates: int = 2000) -> Interval | None:
    """The slices of all k windows as one series, redrawn in circular blocks of
    `block` slices (keeping a stall or a bunching whole), cut back into k
    windows; the median of their totals; its 2.5–97.5% points. Total tok/s only."""
    if statistic != "mean":
        return None
    series = np.concatenate(windows)
    n, k = len(series), len(windows)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n, size=(replicates, -(-n // block)))
    index = (starts[:, :, None] + np.arange(block)).reshape(replicates, -1)[:, :n] % n
    totals = series[index].reshape(replicates, k, -1).mean(axis=2)
    lo, hi = np.percentile(np.median(totals, axis=1), [2.5, 97.5])
    return float(lo), float(hi)


METHODS: dict[str, Callable[[Windows, str, int], Interval | None]] = {
    "two-stage": two_stage, "t": student_t, "t+rank": t_or_rank, "block": block_bootstrap,
    "published": published}
DEFAULT_METHODS = ("two-stage", "t", "t+rank", "block")

# ---- measuring -------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """One method on one scenario at one k."""

    trials: int
    coverage: float
    width: float  # median width / truth
    calls_80: float  # smallest relative change called in 80% of pairs (inf: never)
    false_calls: float  # identical pairs called different

    @property
    def se(self) -> float:
        """The binomial standard error of the coverage."""
        return math.sqrt(self.coverage * (1.0 - self.coverage) / self.trials)


def measure(scenario: Scenario, k: int, trials: int, seed: int, true: float,
            methods: Sequence[str] = DEFAULT_METHODS) -> dict[str, Result]:
    """`trials` draws of k windows, each method's interval of each; see the module
    docstring for what is counted."""
    rng = np.random.default_rng([seed, k, sum(map(ord, scenario.name))])
    draws = [scenario.draw(rng, k) for _ in range(trials)]
    out: dict[str, Result] = {}
    for name in methods:
        found = [METHODS[name](w, scenario.statistic, seed + i) for i, w in enumerate(draws)]
        if any(f is None for f in found):
            continue
        lo, hi = np.array(found).T
        a, b = slice(0, trials - trials % 2, 2), slice(1, trials, 2)
        with np.errstate(divide="ignore"):
            threshold = np.where(hi[b] > 0, 1.0 - lo[a] / hi[b], np.inf)
        threshold = np.where(lo[a] <= 0, np.inf, threshold)
        out[name] = Result(
            trials=trials,
            coverage=float(np.mean((lo <= true) & (true <= hi))),
            width=float(np.median((hi - lo) / true)),
            calls_80=float(np.quantile(threshold, 0.8, method="higher")),
            false_calls=float(np.mean((lo[a] > hi[b]) | (lo[b] > hi[a]))),
        )
    return out


def describe(scenario: Scenario, seed: int = 2, draws: int = 500) -> str:
    """The scenario's windows in the terms the methodology measures them: how far
    apart window values are, and (slices) how far apart slices are."""
    rng = np.random.default_rng(seed)
    sets = [scenario.draw(rng, 8) for _ in range(draws)]
    values = np.concatenate([window_values(s, scenario.statistic) for s in sets])
    text = f"window values {np.std(values) / np.mean(values):.1%} apart"
    if scenario.statistic == "mean":
        spread = np.mean([w.std(ddof=1) / w.mean() for s in sets for w in s])
        text += (f"; slices {spread:.1%} apart (on a window: {spread / math.sqrt(SLICES):.1%} "
                 "if they were independent)")
    else:
        text += f"; {np.mean([len(w) for s in sets for w in s]):.0f} requests a window"
    return text


def _pct(x: float) -> str:
    return "never" if not math.isfinite(x) or x >= 1.0 else f"{100 * x:.1f}%"


def report(scenarios: Sequence[Scenario], ks: Sequence[int], trials: int, seed: int,
           methods: Sequence[str], out: Callable[[str], None] = print) -> dict:
    """Run every scenario at every k and print one table a scenario; returns the
    results as {scenario: {k: {method: Result}}}."""
    results: dict[str, dict[int, dict[str, Result]]] = {}
    for sc in scenarios:
        true = truth(sc)
        out(f"\n{sc.name}{' (stress test)' if sc.stress else ''}: {describe(sc)}; "
            f"truth {true:.4g}")
        out(f"{'k':>3}  {'method':<10} {'coverage':>15} {'width':>7} {'calls 80%':>10} "
            f"{'false calls':>12}")
        results[sc.name] = {}
        for k in ks:
            found = measure(sc, k, trials, seed, true, methods)
            results[sc.name][k] = found
            for name, r in found.items():
                out(f"{k:>3}  {name:<10} {r.coverage:>8.1%} ± {r.se:.1%} {_pct(r.width):>7} "
                    f"{_pct(r.calls_80):>10} {r.false_calls:>12.1%}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=400, help="draws per scenario and k")
    parser.add_argument("--ks", default="2,3,5,8", help="windows per cell, comma-separated")
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument("--only", default="", help="scenario names, comma-separated")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help=f"of {', '.join(METHODS)}")
    args = parser.parse_args(argv)
    names = [s for s in args.only.split(",") if s]
    chosen = [s for s in SCENARIOS if not names or s.name in names]
    methods = [m for m in args.methods.split(",") if m]
    if unknown := sorted(set(names) - {s.name for s in SCENARIOS}) + sorted(set(methods) - set(METHODS)):
        parser.error(f"unknown scenario or method: {', '.join(unknown)}")
    started = time.process_time()
    report(chosen, [int(k) for k in args.ks.split(",")], args.trials, args.seed, methods)
    print(f"\n{args.trials} trials a row ({args.trials // 2} pairs); "
          f"CPU {time.process_time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
