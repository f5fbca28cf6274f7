"""Rate cells' arrival schedules: what computing and checking one costs, and the gap test's power.

    python benchmarks/arrival_schedule.py            # time: a 1,000 req/s × 60 s schedule, made and checked
    python benchmarks/arrival_schedule.py --power    # the gap test's power (docs/methodology.md quotes it)

The timing is one figure with its conditions (this host, one core): it only has
to show that a schedule and its check cost nothing next to the cell they serve.
The power table says how many gaps the test needs to catch a given departure
(rejection at 0.001 in at least 90% of trials), by simulation: i.i.d. gaps drawn
from the process actually sent, tested against the process intended, through
the same functions check_load uses, with check_load's slack (the lag limit,
which in mean gaps is 0.01 up to 10 req/s, 0.1 at 100 req/s, 1 at 1,000 req/s).
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from rundir import arrivals
from rundir.arrivals import Process

RATE, WINDOW = 1000.0, 60.0
SIZES = (20, 30, 50, 100, 200, 500, 700, 1000, 1500, 2000, 3000, 5000)
TRIALS = 400
POISSON = Process("poisson")
GAMMA4 = Process("gamma", 4.0)

# (what was sent, how it was sent: a function rng, n -> n gaps in units of the target's mean gap; judged as)
CASES = (
    ("Poisson at the target (false alarms)", lambda g, n: g.exponential(1.0, n), POISSON),
    ("same, each send late by U(0, slack)", None, POISSON),
    ("Poisson 20% slow (0.8 × rate)", lambda g, n: g.exponential(1 / 0.8, n), POISSON),
    ("Poisson 20% fast (1.2 × rate)", lambda g, n: g.exponential(1 / 1.2, n), POISSON),
    ("Poisson 10% slow (0.9 × rate)", lambda g, n: g.exponential(1 / 0.9, n), POISSON),
    ("constant, judged as Poisson", lambda g, n: np.ones(n), POISSON),
    ("gamma:4 (CV 0.5), judged as Poisson", lambda g, n: g.gamma(4.0, 0.25, n), POISSON),
    ("gamma:2 (CV 0.71), judged as Poisson", lambda g, n: g.gamma(2.0, 0.5, n), POISSON),
    ("Poisson, judged as gamma:4", lambda g, n: g.exponential(1.0, n), GAMMA4),
)


def timing(repeats: int = 5) -> None:
    """Best of `repeats`: make a 1,000 req/s × 60 s Poisson schedule, and check it sent 0.2 ms late."""
    process = POISSON
    seed = arrivals.cell_seed(1, ("rate", 1024, 0, None, None, RATE))
    make = check = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        offsets = arrivals.schedule(process, RATE, WINDOW, seed)
        t1 = time.perf_counter()
        result = arrivals.check_load(process, RATE, WINDOW, offsets, offsets + 200_000, 0)
        t2 = time.perf_counter()
        make, check = min(make, t1 - t0), min(check, t2 - t1)
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"numpy {np.__version__}; best of {repeats}")
    print(f"schedule: {offsets.size} arrivals (poisson, {RATE:g} req/s x {WINDOW:g} s) "
          f"in {make * 1e3:.1f} ms")
    print(f"check_load: {result.gaps} gaps, KS p = {result.gap_p_value:.3f}, in {check * 1e3:.1f} ms")
    gamma = Process("gamma", 4.0)
    offsets = arrivals.schedule(gamma, RATE, WINDOW, seed)
    t0 = time.perf_counter()
    result = arrivals.check_load(gamma, RATE, WINDOW, offsets, offsets, 0)
    print(f"check_load (gamma:4, incomplete gamma per gap): {result.gaps} gaps in "
          f"{(time.perf_counter() - t0) * 1e3:.1f} ms")


def power(trials: int, slack: float) -> None:
    """The share of trials the gap test rejects at 0.001, per case and number of gaps;
    `slack` in mean gaps (check_load's: the lag limit, max(1 ms, 1% of 1/rate))."""
    rng = np.random.Generator(np.random.PCG64(2026))
    print(f"slack {slack:g} mean gaps: rejections at {arrivals.SIGNIFICANCE:g} out of {trials} trials, "
          "by number of gaps")
    print(f"{'case':40s}" + "".join(f"{n:>7d}" for n in SIZES))
    for name, draw, judged in CASES:
        row = []
        for n in SIZES:
            rejected = 0
            for _ in range(trials):
                if draw is None:  # send jitter within the slack: adjacent gaps share a send
                    gaps = rng.exponential(1.0, n) + np.diff(rng.uniform(0.0, slack, n + 1))
                else:
                    gaps = draw(rng, n)  # in units of the mean gap: judge at rate 1
                d = arrivals.ks_statistic(judged, 1.0, gaps, slack)
                rejected += arrivals.ks_p_value(d, n) < arrivals.SIGNIFICANCE
            row.append(rejected / trials)
        print(f"{name:40s}" + "".join(f"{r:7.3f}" for r in row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--power", action="store_true", help="simulate the gap test's power instead")
    parser.add_argument("--trials", type=int, default=TRIALS, help="trials per case and size (--power)")
    parser.add_argument("--slack", default="0.01,0.1,1",
                        help="the test's slack in mean gaps, list (--power; 0.01: rates up to 10 req/s, "
                             "0.1: 100 req/s, 1: 1,000 req/s)")
    args = parser.parse_args()
    if args.power:
        for slack in (float(x) for x in args.slack.split(",")):
            power(args.trials, slack)
            print()
    else:
        timing()


if __name__ == "__main__":
    main()
