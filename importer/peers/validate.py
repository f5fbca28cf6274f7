"""Checks on a PeerRun before anything is written (issue 36, "Bad files").

Why apart from the readers: each reader translates one format, but the ways
a run can be unusable once translated are the same for all of them (a NaN
stamp, a chunk before its send, counts that fall, two clocks mixed), and
each must end in one line naming the request (its source line when the
reader kept it) and the field. The first problem found is raised as a
PeerFormatError; a run that passes has stamps every figure can trust.
"""

from __future__ import annotations

import math
import time

from importer.peers.model import (
    TIER_AGGREGATE,
    TIER_REQUEST,
    TIERS,
    PeerFormatError,
    PeerRequest,
    PeerRun,
)

# Stamps of one run further apart than this are not one run on one clock.
MAX_SPAN_NS = 24 * 3600 * 10**9
# A stamp within this of the Unix epoch's now is a wall-clock stamp (time.time_ns);
# monotonic clocks count from boot and are years short of it.
WALL_NEAR_NS = 5 * 365 * 24 * 3600 * 10**9


def _where(req: PeerRequest, index: int) -> str:
    return f"request {index + 1}" + (f" (line {req.line})" if req.line else "")


def _fail(req: PeerRequest, index: int, field: str, message: str) -> PeerFormatError:
    return PeerFormatError(f"{_where(req, index)}: {message}", line=req.line, field=field)


def _finite(value: object) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def _check_numbers(req: PeerRequest, i: int) -> None:
    scalars = (("send_ns", req.send_ns), ("end_ns", req.end_ns),
               ("prompt_tokens", req.prompt_tokens), ("output_tokens", req.output_tokens))
    for name, value in scalars:
        if value is not None and not _finite(value):
            raise _fail(req, i, name, f"{value!r} is not a finite number")
    for name, values in (("chunk_ns", req.chunk_ns), ("chunk_tokens", req.chunk_tokens or ())):
        for k, value in enumerate(values):
            if not _finite(value):
                raise _fail(req, i, name, f"chunk {k + 1} is {value!r}, not a finite number")
    for name, value in (*scalars, *(("chunk_ns", v) for v in req.chunk_ns),
                        *(("chunk_tokens", v) for v in req.chunk_tokens or ())):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise _fail(req, i, name, f"expected a whole number, got {type(value).__name__} {value!r}")
    for name in ("prompt_tokens", "output_tokens"):
        value = getattr(req, name)
        if value is not None and value < 0:
            raise _fail(req, i, name, f"{value} is negative")


def _check_order(req: PeerRequest, i: int) -> None:
    chunks = req.chunk_ns
    if chunks and chunks[0] < req.send_ns:
        raise _fail(req, i, "chunk_ns", f"chunk 1 arrives {(req.send_ns - chunks[0]) / 1e6:.3f} ms "
                    "before the request was sent")
    for k in range(1, len(chunks)):
        if chunks[k] < chunks[k - 1]:
            raise _fail(req, i, "chunk_ns", f"chunk {k + 1} arrives {(chunks[k - 1] - chunks[k]) / 1e6:.3f}"
                        f" ms before chunk {k} (a negative gap)")
    if req.end_ns is not None:
        if req.end_ns < req.send_ns:
            raise _fail(req, i, "end_ns", "the request ends before it was sent")
        if chunks and req.end_ns < chunks[-1]:
            raise _fail(req, i, "end_ns", f"the request ends {(chunks[-1] - req.end_ns) / 1e6:.3f} ms "
                        "before its last chunk")
    tokens = req.chunk_tokens
    if tokens is not None:
        if len(tokens) != len(chunks):
            raise _fail(req, i, "chunk_tokens", f"{len(tokens)} counts for {len(chunks)} chunks")
        if tokens and tokens[0] < 0:
            raise _fail(req, i, "chunk_tokens", "chunk 1 has a negative count")
        for k in range(1, len(tokens)):
            if tokens[k] < tokens[k - 1]:
                raise _fail(req, i, "chunk_tokens", f"the cumulative count falls at chunk {k + 1} "
                            f"({tokens[k - 1]} -> {tokens[k]})")


def _stamps(req: PeerRequest) -> list[int]:
    return [req.send_ns, *([] if req.end_ns is None else [req.end_ns]), *req.chunk_ns]


def _check_clock(requests: tuple[PeerRequest, ...], now_ns: int) -> None:
    """One clock: no stamp a day from another, and wall-clock stamps not mixed with others."""
    lo = min(range(len(requests)), key=lambda i: min(_stamps(requests[i])))
    hi = max(range(len(requests)), key=lambda i: max(_stamps(requests[i])))
    first, last = min(_stamps(requests[lo])), max(_stamps(requests[hi]))
    wall = [abs(t - now_ns) <= WALL_NEAR_NS for t in (first, last)]
    if wall[0] != wall[1]:
        which, other = (lo, hi) if wall[0] else (hi, lo)
        raise _fail(requests[other], other, "send_ns",
                    f"mixed clocks: {_where(requests[which], which)} has wall-clock stamps (near the "
                    "Unix epoch's now) and this one does not")
    if last - first > MAX_SPAN_NS:
        raise _fail(requests[hi], hi, "send_ns",
                    f"mixed clocks: stamps {(last - first) / 3.6e12:.1f} h apart from "
                    f"{_where(requests[lo], lo)}'s (one run spans at most 24 h)")


def validate(run: PeerRun, now_ns: int | None = None) -> None:
    """Raise PeerFormatError naming the first problem; return when the run is usable."""
    if run.tier not in TIERS:
        raise PeerFormatError(f"unknown tier {run.tier!r} (expected one of {', '.join(TIERS)})",
                              field="tier")
    for name, value in run.published.items():
        if not _finite(value):
            raise PeerFormatError(f"published figure {name} is {value!r}, not a finite number",
                                  field=name)
    if run.tier == TIER_AGGREGATE:
        if run.requests:
            raise PeerFormatError(f"tier aggregate holds {len(run.requests)} requests "
                                  "(an aggregate holds the tool's summary only)", field="tier")
        if not run.published:
            raise PeerFormatError("no request and no published figure: nothing to import",
                                  field="requests")
        return
    if not run.requests:
        raise PeerFormatError(f"tier {run.tier} with no request at all: nothing to import",
                              field="requests")
    for i, req in enumerate(run.requests):
        _check_numbers(req, i)
        _check_order(req, i)
        if run.tier == TIER_REQUEST and len(req.chunk_ns) > 2:
            raise _fail(req, i, "chunk_ns", f"{len(req.chunk_ns)} chunk stamps at tier request "
                        "(first and last token only)")
    _check_clock(run.requests, time.time_ns() if now_ns is None else now_ns)


__all__ = ["MAX_SPAN_NS", "WALL_NEAR_NS", "validate"]
