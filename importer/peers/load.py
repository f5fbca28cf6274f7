"""The load an imported tool run ran at: from its file, declared at import, or inferred.

Why a step of its own: several formats (AIPerf's raw and records exports,
inference-perf's per-request file, MLPerf Endpoints' events) keep every
request but not the configuration that produced them, and a run directory is
filed under its load (one concurrency or one rate). The order is fixed:

* the file's own configuration (or a companion file the reader read);
* ``bench import --concurrency N`` / ``--rate R``: declared, and refused when
  it contradicts the file's own configuration;
* inferred from the stamps, closed loop only: a closed loop refills a slot
  soon after a request ends, so its in-flight count stays near the highest
  it held, and that peak is the load. An open loop's count swings with its
  arrivals (its peak is a chance excursion) and its rate is not a count:
  such a run is refused, naming the flag.

What was done is said in ``extra["load"]`` (the notes and the page show it).
"""

from __future__ import annotations

import dataclasses

from importer.peers.model import TIER_AGGREGATE, PeerRun
from rundir.plateau import in_flight_steps

# A closed loop keeps its streams busy: from the first time the in-flight count reaches
# its peak to the last send, the time-weighted mean count stays near the peak (0.72 to 0.99
# of it in the committed AIPerf, inference-perf and MLPerf fixtures, whose tools refill a
# slot 0 to 60 ms late). An open loop's peak is a chance excursion: its mean sat at 0.12
# to 0.39 of its peak in Poisson arrivals at 2 to 20 req/s (tests/importer/test_peer_import_cli.py).
HELD_SHARE = 0.6
INFERRED = "concurrency inferred from the requests' stamps: {n}"


class LoadError(ValueError):
    """A declared load that cannot be used, or a load that cannot be found: one line."""


def infer_concurrency(send_ns: list[int], end_ns: list[int | None]) -> int | None:
    """The closed loop's concurrency (its peak in-flight count), or None when the count did
    not stay near its peak as a closed loop's does (module docstring, HELD_SHARE)."""
    if not send_ns:
        return None
    steps = in_flight_steps(send_ns, end_ns)
    peak = max(c for _, c in steps)
    start = next(t for t, c in steps if c >= peak)
    stop = max(int(t) for t in send_ns)
    if stop <= start:  # every request sent before the peak: nothing to judge but the peak
        return peak
    area = 0
    for (t0, c0), (t1, _) in zip(steps, steps[1:], strict=False):
        lo, hi = max(t0, start), min(t1, stop)
        if hi > lo:
            area += c0 * (hi - lo)
    return peak if area / (stop - start) >= HELD_SHARE * peak else None


def declare_input(run: PeerRun, input_tokens: int | None) -> PeerRun:
    """``--input-tokens N``: the prompt length, where neither the file nor its requests say it
    (the context the run is filed under); refused when the file has its own."""
    if input_tokens is None:
        return run
    if input_tokens < 1:
        raise LoadError(f"--input-tokens {input_tokens}: expected a whole number of at least 1")
    if run.input_tokens is not None and run.input_tokens != input_tokens:
        raise LoadError(f"{run.source_file}: --input-tokens {input_tokens} contradicts the file's own "
                        f"input length {run.input_tokens}")
    extra = {**run.extra, "input_length": f"{input_tokens} tokens declared at import (--input-tokens)"}
    return dataclasses.replace(run, input_tokens=input_tokens, extra=extra)


def resolve_load(run: PeerRun, concurrency: int | None = None, rate: float | None = None,
                 input_tokens: int | None = None) -> PeerRun:
    """The run with its load set: the file's, the declared one, or the inferred one."""
    run = declare_input(run, input_tokens)
    if concurrency is not None and concurrency < 1:
        raise LoadError(f"--concurrency {concurrency}: expected a whole number of at least 1")
    if rate is not None and not rate > 0:
        raise LoadError(f"--rate {rate:g}: expected a request rate above 0 (requests per second)")
    if concurrency is not None and rate is not None:
        raise LoadError("--concurrency and --rate: give one (a closed loop's streams or an open "
                        "loop's rate), not both")
    has_own = run.rate is not None or bool(run.concurrency)
    if has_own:
        own = f"rate {run.rate:g}/s" if run.rate is not None else f"concurrency {run.concurrency}"
        if rate is not None and (run.rate is None or abs(run.rate - rate) > 1e-9 * max(rate, 1.0)):
            raise LoadError(f"{run.source_file}: --rate {rate:g} contradicts the file's own {own}")
        if concurrency is not None and (run.rate is not None or run.concurrency != concurrency):
            raise LoadError(f"{run.source_file}: --concurrency {concurrency} contradicts the file's "
                            f"own {own}")
        return run
    extra = dict(run.extra)
    if concurrency is not None or rate is not None:
        flag = f"--concurrency {concurrency}" if concurrency is not None else f"--rate {rate:g}"
        what = f"concurrency {concurrency}" if concurrency is not None else f"request rate {rate:g}/s"
        extra["load"] = f"{what} declared at import ({flag}): the file does not carry its configuration"
        return dataclasses.replace(run, concurrency=concurrency, rate=rate, extra=extra)
    if run.tier == TIER_AGGREGATE:
        raise LoadError(f"{run.source_file}: the tool's summary names no concurrency or rate: "
                        "pass --concurrency N or --rate R")
    found = infer_concurrency([r.send_ns for r in run.requests],
                              [r.end_ns if r.end_ns is not None else (r.chunk_ns[-1] if r.chunk_ns else None)
                               for r in run.requests])
    if found is None:
        raise LoadError(f"{run.source_file}: the file carries no concurrency or rate and its sends do "
                        "not follow its ends as a closed loop's do (an open loop?): pass --rate R "
                        "(or --concurrency N)")
    extra["load"] = INFERRED.format(n=found) + " (the file does not carry its configuration)"
    return dataclasses.replace(run, concurrency=found, extra=extra)


__all__ = ["INFERRED", "LoadError", "declare_input", "infer_concurrency", "resolve_load"]
