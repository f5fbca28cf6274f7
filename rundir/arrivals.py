"""Arrival schedules for rate cells, and the check that the client delivered them (pure, numpy only).

Why open loop: a closed-loop client (C streams, each sending when its last
answer ends) offers whatever load the server lets it, so a slow server is
never asked for more than it can take. A rate cell fixes the offered load
instead: requests are due at times drawn before the cell starts from a
recorded seed, whatever the server does. The schedule is reproducible from
(process, rate, window, seed), so the builder can recompute what was due.

Why the check judges the client against its own schedule and not against the
target: a Poisson schedule's realised rate N ÷ window differs from the target by
chance, about rate ÷ sqrt(N) (N = rate × window), so at 1 req/s over 60 s the
schedule alone is off by ~13% one time in three. What the client answers for
is sending what was scheduled, when it was scheduled, with the intended gaps:

- delivery: requests sent ÷ requests the schedule put in the window >= 99%;
- timeliness: p99 send lag (send - scheduled) <= max(1 ms, 1% of the mean gap
  1/rate), so lateness never reshapes the process (a request due while the
  client could not send, e.g. the in-flight cap was full, is late: that is
  client-side queueing and it shows here);
- shape: the gaps between consecutive sends (in scheduled order) against the
  intended distribution, by a one-sample Kolmogorov-Smirnov test at 0.001
  (exponential for Poisson, gamma for gamma:K; 20 gaps at least, fewer are not
  tested) blind to shifts within the send lags' spread, at most the lag limit
  (send jitter the lag check admits is not a wrong process; see ks_statistic), or, for a constant
  process, every gap within max(1 ms, 1% of 1/rate) of 1/rate.
  docs/methodology.md, "Arrivals at a rate", gives the test's power.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

POISSON = "poisson"
CONSTANT = "constant"
GAMMA = "gamma"
PROCESSES = (POISSON, CONSTANT, GAMMA)

MIN_DELIVERED = 0.99  # sent ÷ scheduled in the window
MIN_LAG_LIMIT_MS = 1.0  # p99 send lag allowed: max(this, LAG_GAP_FRACTION × mean gap)
LAG_GAP_FRACTION = 0.01
MIN_GAPS = 20  # fewer gaps between sends: the shape is not tested
SIGNIFICANCE = 0.001  # the KS test's false-alarm rate
CONSTANT_MIN_TOLERANCE_MS = 1.0  # a constant process' gap may be off by max(this, 1% of 1/rate)
CONSTANT_GAP_FRACTION = 0.01

_NS = 1e9
CLOCK_NS = 1  # the clock's resolution: the gap test's least slack
_EPS = 1e-15
_TINY = 1e-300
_MAX_ITER = 100_000


@dataclass(frozen=True)
class Process:
    """An arrival process: name poisson | constant | gamma; shape K for gamma (CV 1/sqrt(K)), else None."""

    name: str
    shape: float | None = None

    def __post_init__(self) -> None:
        if self.name not in PROCESSES:
            raise ValueError(f"arrival process: expected one of {', '.join(PROCESSES)}, got {self.name!r}")
        if (self.name == GAMMA) != (self.shape is not None):
            raise ValueError(f"arrival process {self.name!r}: a shape is for gamma only, and gamma needs one")
        if self.shape is not None and not (math.isfinite(self.shape) and self.shape > 0):
            raise ValueError(f"arrival process gamma: expected a shape K > 0, got {self.shape!r}")

    def __str__(self) -> str:
        if self.name != GAMMA:
            return self.name
        assert self.shape is not None
        k = float(self.shape)
        return f"gamma:{int(k)}" if k == int(k) and k < 2 ** 53 else f"gamma:{k!r}"  # round-trips


def parse_process(text: str) -> Process:
    """`--arrivals` text -> Process: "poisson", "constant" or "gamma:K" (K > 0, e.g. gamma:4)."""
    bad = ValueError(f"--arrivals: expected poisson, constant or gamma:K with K > 0, got {text!r}")
    t = text.strip().lower() if isinstance(text, str) else ""
    if t in (POISSON, CONSTANT):
        return Process(t)
    name, sep, k = t.partition(":")
    if name != GAMMA or not sep:
        raise bad
    try:
        shape = float(k)
    except ValueError:
        raise bad from None
    if not (math.isfinite(shape) and shape > 0):
        raise bad
    return Process(GAMMA, shape)


def _key_part(part: object) -> str:
    """One key part as stable text: numbers by value (2 and 2.0 alike), None, strings quoted."""
    if part is None:
        return "None"
    if isinstance(part, (bool, np.bool_)):
        return "True" if part else "False"
    if isinstance(part, (int, float, np.integer, np.floating)):
        value = float(part)
        if math.isfinite(value) and value == int(value) and abs(value) < 2 ** 53:
            return str(int(value))
        return repr(value)
    if isinstance(part, str):
        return repr(part)
    raise ValueError(f"cell_seed: a key part must be a string, number or None, got {type(part).__name__}")


def cell_seed(run_seed: int, key: tuple) -> int:
    """A stable 63-bit seed for one cell: blake2b of the run seed and the cell key
    (not hash(), which changes per process), so each cell gets its own schedule."""
    text = f"{int(run_seed)}|" + "|".join(_key_part(p) for p in key)
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def seed_from_text(text: str) -> int:
    """A stable 63-bit seed from text (the default `--arrival-seed`, from the run id)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _check_rate(rate: float, duration_s: float) -> None:
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"arrival rate: expected requests/s > 0, got {rate!r}")
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"arrival window: expected seconds > 0, got {duration_s!r}")


def schedule(process: Process, rate: float, duration_s: float, seed: int) -> np.ndarray:
    """Every arrival in [0, duration_s): int64 ns offsets from the window start, sorted.

    Poisson: exponential gaps, mean 1/rate; gamma:K: gamma gaps, shape K, scale
    1/(rate K) (same mean, CV 1/sqrt(K)); the first arrival is one gap after the
    start (the process starts at the window start). Constant: at (i + 1/2)/rate,
    half a gap in, so a window of n/rate seconds holds exactly n arrivals, each in
    the middle of its 1/rate slot. Drawn with numpy's Generator(PCG64(seed))."""
    _check_rate(rate, duration_s)
    limit_ns = duration_s * _NS
    if process.name == CONSTANT:
        n = max(0, math.ceil(rate * duration_s - 0.5))
        times = (np.arange(n + 1, dtype=np.float64) + 0.5) / rate
    else:
        rng = np.random.Generator(np.random.PCG64(int(seed)))
        expected = rate * duration_s
        parts: list[np.ndarray] = []
        end = 0.0
        while end < duration_s:
            draw = int(expected + 6 * math.sqrt(expected) + 16)
            if process.name == POISSON:
                gaps = rng.exponential(1.0 / rate, draw)
            else:
                assert process.shape is not None
                gaps = rng.gamma(process.shape, 1.0 / (rate * process.shape), draw)
            chunk = end + np.cumsum(gaps)
            parts.append(chunk)
            end = float(chunk[-1])
        times = np.concatenate(parts)
    ns = np.floor(times * _NS)
    return ns[ns < limit_ns].astype(np.int64)


# ---- distributions -------------------------------------------------------------------------------

def gamma_p(a: float, x: np.ndarray | float) -> np.ndarray:
    """Regularised lower incomplete gamma P(a, x) for a > 0, elementwise (P = 0 for x <= 0).

    The series sum x^n / (a (a+1) ... (a+n)) where x < a + 1 (it converges fast
    there), else 1 - Q with Q's continued fraction (modified Lentz), both to ~1e-15."""
    if not (math.isfinite(a) and a > 0):
        raise ValueError(f"gamma_p: expected a shape a > 0, got {a!r}")
    xs = np.atleast_1d(np.asarray(x, dtype=np.float64))
    out = np.zeros_like(xs)
    pos = xs > 0
    log_front = np.zeros_like(xs)
    log_front[pos] = -xs[pos] + a * np.log(xs[pos]) - math.lgamma(a)
    series = pos & (xs < a + 1)
    frac = pos & ~series
    if series.any():
        out[series] = np.exp(log_front[series]) * _gamma_series(a, xs[series])
    if frac.any():
        out[frac] = 1.0 - np.exp(log_front[frac]) * _gamma_fraction(a, xs[frac])
    out = np.clip(out, 0.0, 1.0)
    return out if np.ndim(x) else out.reshape(())


def _gamma_series(a: float, x: np.ndarray) -> np.ndarray:
    term = np.full_like(x, 1.0 / a)
    total = term.copy()
    denom = a
    for _ in range(_MAX_ITER):
        denom += 1.0
        term = term * x / denom
        total += term
        if np.all(np.abs(term) < np.abs(total) * _EPS):
            return total
    raise ArithmeticError(f"gamma_p: the series did not converge (a={a})")


def _gamma_fraction(a: float, x: np.ndarray) -> np.ndarray:
    b = x + 1.0 - a
    c = np.full_like(x, 1.0 / _TINY)
    d = 1.0 / np.where(np.abs(b) < _TINY, _TINY, b)
    h = d.copy()
    for i in range(1, _MAX_ITER):
        an = -i * (i - a)
        b = b + 2.0
        d = an * d + b
        d = np.where(np.abs(d) < _TINY, _TINY, d)
        c = b + an / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        d = 1.0 / d
        step = d * c
        h = h * step
        if np.all(np.abs(step - 1.0) < _EPS):
            return h
    raise ArithmeticError(f"gamma_p: the continued fraction did not converge (a={a})")


def process_cdf(process: Process, rate: float, gaps_s: np.ndarray) -> np.ndarray:
    """The intended CDF of one gap (seconds) under a Poisson or gamma process at `rate`."""
    g = np.asarray(gaps_s, dtype=np.float64)
    if process.name == POISSON:
        return np.where(g > 0, -np.expm1(-rate * np.maximum(g, 0.0)), 0.0)
    if process.name == GAMMA:
        assert process.shape is not None
        return gamma_p(process.shape, g * rate * process.shape)
    raise ValueError(f"process_cdf: a {process.name} process has no continuous gap distribution")


def ks_statistic(process: Process, rate: float, gaps_s: np.ndarray, slack_s: float = 0.0) -> float:
    """One-sample Kolmogorov-Smirnov D of the gaps (seconds) against the process' CDF,
    blind to shifts up to `slack_s`: D = sup max(F_n(y) - F(y + slack), F(y - slack) - F_n(y), 0).

    Why the slack: sends whose lags spread over L move each gap by less than L,
    which a plain KS over 10^4+ gaps rejects (at 1,000 req/s, 50 µs of uniform
    send jitter did 18 times in 20). If every observed gap is within the slack
    of a gap drawn from F (the schedule's), this D is at most that sample's plain
    D, so the p-value stays valid (conservative); slack 0 is the plain test."""
    x = np.sort(np.asarray(gaps_s, dtype=np.float64))
    n = x.size
    if n == 0:
        raise ValueError("ks_statistic: no observations")
    if not (math.isfinite(slack_s) and slack_s >= 0):
        raise ValueError(f"ks_statistic: expected a slack >= 0 seconds, got {slack_s!r}")
    i = np.arange(1, n + 1, dtype=np.float64)
    above = i / n - process_cdf(process, rate, x + slack_s)
    below = process_cdf(process, rate, x - slack_s) - (i - 1) / n
    return float(max(np.max(above), np.max(below), 0.0))


def kolmogorov_q(lam: float) -> float:
    """P(K > lam) for the Kolmogorov distribution (K = sup of a Brownian bridge)."""
    if lam <= 0:
        return 1.0
    if lam < 1.18:  # the theta-function form converges fast for small lam
        s = sum(math.exp(-((2 * j - 1) ** 2) * math.pi ** 2 / (8 * lam * lam)) for j in range(1, 40))
        return min(1.0, max(0.0, 1.0 - math.sqrt(2 * math.pi) / lam * s))
    s = sum((-1) ** (j - 1) * math.exp(-2 * j * j * lam * lam) for j in range(1, 100))
    return min(1.0, max(0.0, 2.0 * s))


def ks_p_value(d: float, n: int) -> float:
    """The KS test's p-value: the asymptotic Kolmogorov distribution at Stephens'
    small-sample corrected (sqrt(n) + 0.12 + 0.11/sqrt(n)) × D."""
    rn = math.sqrt(n)
    return kolmogorov_q((rn + 0.12 + 0.11 / rn) * d)


# ---- the check -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoadCheck:
    """What a rate cell delivered against its schedule. Rates in requests/s, lags in ms.

    `gaps`: gaps between consecutive sends (the test's sample size); gap_statistic:
    KS D (Poisson, gamma) or the worst gap's distance from 1/rate in ms (constant);
    gap_p_value: the KS p-value, None for constant or when not tested; gap_statistic
    is None when not tested; gap_slack_ms: the KS test's slack (ks_statistic), the
    spread of the send lags (max - min), at least 1 ns, at most the lag limit. `notes`: sentences
    worth saying that are no problem (a gap test not run for want of gaps)."""

    process: Process
    rate: float
    window_s: float
    scheduled: int
    sent: int
    schedule_rate: float
    achieved_rate: float
    rate_uncertainty: float
    lag_p50_ms: float | None
    lag_p99_ms: float | None
    lag_limit_ms: float
    gaps: int
    gap_slack_ms: float
    gap_statistic: float | None
    gap_p_value: float | None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def delivered(self) -> bool:
        """The load was delivered: no problem found."""
        return not self.problems

    @property
    def reason(self) -> str | None:
        """The problems' sentences, then the notes'; None when there is nothing to say."""
        text = " ".join(self.problems + self.notes)
        return text or None


def lag_limit_ms(rate: float) -> float:
    """The p99 send lag allowed: max(1 ms, 1% of the mean gap 1/rate)."""
    return max(MIN_LAG_LIMIT_MS, LAG_GAP_FRACTION * 1000.0 / rate)


def rate_uncertainty(process: Process, scheduled: int, window_s: float) -> float:
    """The chance spread (one standard deviation, req/s) of a schedule's realised rate:
    sqrt(N)/window for Poisson, sqrt(N/K)/window for gamma:K (a renewal process'
    count variance ~ N × CV²), 0 for constant."""
    if process.name == CONSTANT:
        return 0.0
    k = process.shape if process.name == GAMMA else 1.0
    assert k is not None
    return math.sqrt(scheduled / k) / window_s


def _fmt(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def check_load(process: Process, rate: float, window_s: float, scheduled_ns: np.ndarray,
               send_ns: np.ndarray, window_start_ns: int) -> LoadCheck:
    """Judge a rate cell's sends against its schedule.

    scheduled_ns, send_ns: one entry per request of the cell, the run's monotonic
    clock (scheduled = window_start_ns + schedule offset). A request never sent
    has send_ns -1 (any negative value; NaN too if the array is float). Only
    requests scheduled in [window_start_ns, window_start_ns + window) count; a
    request sent late, even after the window (the drain), counts as sent."""
    _check_rate(rate, window_s)
    sched = np.asarray(scheduled_ns)
    send = np.asarray(send_ns)
    if sched.shape != send.shape or sched.ndim != 1:
        raise ValueError(f"check_load: scheduled_ns and send_ns must be 1-d and of one length, "
                         f"got {sched.shape} and {send.shape}")
    sched = sched.astype(np.int64)
    if send.dtype.kind == "f":
        was_sent = np.isfinite(send) & (send >= 0)
        send = np.where(was_sent, send, -1).astype(np.int64)
    else:
        send = send.astype(np.int64)
        was_sent = send >= 0
    start = int(window_start_ns)
    inside = (sched >= start) & (sched - start < window_s * _NS)
    order = np.argsort(sched[inside], kind="stable")
    sched_in = sched[inside][order]
    send_in = send[inside][order]
    ok = was_sent[inside][order]
    scheduled = int(sched_in.size)
    sent = int(ok.sum())
    limit = lag_limit_ms(rate)
    problems: list[str] = []
    notes: list[str] = []
    if scheduled == 0:
        notes.append(f"The schedule put no request in the {_fmt(window_s)} s window.")
    elif sent < MIN_DELIVERED * scheduled:
        problems.append(f"Sent {sent} of the {scheduled} requests scheduled in the {_fmt(window_s)} s window "
                        f"({100.0 * sent / scheduled:.1f}%, needs {100 * MIN_DELIVERED:.0f}%).")
    lag_p50 = lag_p99 = None
    lags_ms = np.zeros(0)
    if sent:
        lags_ms = (send_in[ok] - sched_in[ok]) / 1e6
        lag_p50 = float(np.percentile(lags_ms, 50))
        lag_p99 = float(np.percentile(lags_ms, 99))
        if lag_p99 > limit:
            problems.append(f"Send lag p99 was {_fmt(lag_p99)} ms, over the {_fmt(limit)} ms allowed "
                            f"(max of 1 ms and 1% of the mean gap {_fmt(1000.0 / rate)} ms).")
    gaps_ns = np.diff(send_in[ok])
    # at least the clock's 1 ns: times are whole ns, so a gap is off its real value by up to 1 ns,
    # which matters for gamma:K with small K, whose gaps pile up near 0
    slack_ms = min(max(float(lags_ms.max() - lags_ms.min()), CLOCK_NS / 1e6), limit) if sent else 0.0
    stat, p_value = _gap_test(process, rate, gaps_ns, slack_ms, problems, notes)
    return LoadCheck(process=process, rate=float(rate), window_s=float(window_s), scheduled=scheduled,
                     sent=sent, schedule_rate=scheduled / window_s, achieved_rate=sent / window_s,
                     rate_uncertainty=rate_uncertainty(process, scheduled, window_s),
                     lag_p50_ms=lag_p50, lag_p99_ms=lag_p99, lag_limit_ms=limit, gaps=int(gaps_ns.size),
                     gap_slack_ms=slack_ms,
                     gap_statistic=stat, gap_p_value=p_value, problems=problems, notes=notes)


def _gap_test(process: Process, rate: float, gaps_ns: np.ndarray, slack_ms: float, problems: list[str],
              notes: list[str]) -> tuple[float | None, float | None]:
    """(statistic, p-value) of the gaps between sends (ns); appends a problem or a note."""
    n = int(gaps_ns.size)
    if process.name == CONSTANT:
        if n == 0:
            notes.append("Gap test not run: no gap between sends.")
            return None, None
        mean_ms = 1000.0 / rate
        tol = max(CONSTANT_MIN_TOLERANCE_MS, CONSTANT_GAP_FRACTION * mean_ms)
        off = np.abs(gaps_ns / 1e6 - mean_ms)
        worst = float(off.max())
        bad = int((off > tol).sum())
        if bad:
            problems.append(f"{bad} of {n} gaps between sends were more than {_fmt(tol)} ms from the "
                            f"constant {_fmt(mean_ms)} ms (the worst by {_fmt(worst)} ms).")
        return worst, None
    if n < MIN_GAPS:
        notes.append(f"Gap test not run: {n} gaps between sends, needs {MIN_GAPS}.")
        return None, None
    d = ks_statistic(process, rate, gaps_ns / _NS, slack_ms / 1000.0)
    p = ks_p_value(d, n)
    if p < SIGNIFICANCE:
        problems.append(f"The gaps between sends are unlike a {process} process at {_fmt(rate)} req/s: "
                        f"Kolmogorov-Smirnov D = {d:.3f} over {n} gaps (to within {_fmt(slack_ms)} ms), "
                        f"p = {p:.2g} < {SIGNIFICANCE:g}.")
    return d, p


def stored_load(process: Process, rate: float, key: tuple, window_start_ns: int,
                window_end_ns: int, run_seed: int, scheduled_ns: Sequence[int],
                send_ns: Sequence[int]) -> LoadCheck:
    """A stored rate cell's delivered load: its schedule made again from the run's
    seed and the cell's key (`key`: rundir.contract.cell_key of its row), each
    scheduled request sent when a stored request has its scheduled time.

    Why again from the seed: a request the client never sent (due while the cap
    was full when the window ended) has no row, yet it was offered; the seed the
    run recorded makes the whole schedule, so the collector's verdict and the
    builder's figures count it alike."""
    window_ns = window_end_ns - window_start_ns
    offsets = schedule(process, rate, window_ns / _NS, cell_seed(run_seed, key))
    scheduled = window_start_ns + offsets
    sent_at = dict(zip((int(t) for t in scheduled_ns), (int(t) for t in send_ns), strict=True))
    send = np.array([sent_at.get(int(t), -1) for t in scheduled], dtype=np.int64)
    return check_load(process, rate, window_ns / _NS, scheduled, send, window_start_ns)
