"""The prefix reuse a traffic cell got, measured twice, and the verdict on it (pure).

Why twice: a reuse knob proves nothing (a generated script that dropped its
prefix flag gave TTFT 4-6x off; a 94.59% hit ratio bought 5.7-6.2% more
throughput), so the reuse a page shows is what the server did, read from the
requests (the `cached_tokens` of each answer's usage) and from the engine's own
accounting over the same requests (its prefix-cache counters, or its
per-request timings), and the two must agree with each other and with the
target. The collector judges a cell with it when the cell ends; the builder
recomputes the same figures from the raw rows (docs/methodology.md, "Prefix
reuse and conversations").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MIN_TOLERANCE_POINTS = 2.0

SOURCE_COUNTERS = "counters"  # the engine's prefix-cache counters, scraped around the cell
SOURCE_TIMINGS = "timings"  # the engine's per-request count apart from usage (llama.cpp cache_n)
SERVER_SOURCES = (SOURCE_COUNTERS, SOURCE_TIMINGS)


def percent(part: float, whole: float) -> float | None:
    """100 × part ÷ whole; None when there is no whole."""
    return 100.0 * part / whole if whole > 0 else None


def requests_ratio(prompt_tokens: Iterable[int | None], cached_tokens: Iterable[int | None]
                   ) -> float | None:
    """Σ cached ÷ Σ prompt tokens (percent) over the requests that reported
    both; None when none reported cached tokens (the server does not say)."""
    prompt = cached = 0
    seen = False
    for p, c in zip(prompt_tokens, cached_tokens, strict=True):
        if p is None or c is None:
            continue
        seen = True
        prompt += p
        cached += c
    return percent(cached, prompt) if seen else None


def tolerance(block: int | None, mean_prompt: float | None) -> float:
    """How far (points) a measured reuse may sit from its target or the other
    measure: max(2 points, one cache block ÷ the mean prompt), because a
    block-granular cache can only reuse whole blocks."""
    if not block or not mean_prompt:
        return MIN_TOLERANCE_POINTS
    return max(MIN_TOLERANCE_POINTS, 100.0 * block / mean_prompt)


@dataclass(frozen=True)
class ReuseVerdict:
    """`off` / `unverifiable`: what the cell's status becomes (else it stays as
    judged); `reason`: the sentence its reason carries (None: nothing to say)."""

    off: bool
    unverifiable: bool
    reason: str | None


def _shown(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}%"


def judge_reuse(target: float | None, achieved: float | None, server: float | None,
                tol: float, server_name: str = "server counters") -> ReuseVerdict:
    """The verdict on a cell's reuse: `target` percent asked (None: a
    conversation, whose turns are judged one by one instead), `achieved`
    from the requests, `server` from the engine (`server_name` says which).

    Off target when a measure sits more than `tol` points from the target, or
    the two measures more than `tol` apart; not verifiable when neither exists;
    checked once (said in the reason) when only one does."""
    if achieved is None and server is None:
        return ReuseVerdict(False, True, "reuse not verifiable: the server reports no cached "
                                         "tokens and no prefix-cache counters")
    numbers = (f"asked {_shown(target)}, requests report {_shown(achieved)} cached, "
               f"{server_name} {_shown(server)} (tolerance {tol:.1f} points)")
    measured = [m for m in (achieved, server) if m is not None]
    off_target = target is not None and any(abs(m - target) > tol for m in measured)
    disagree = len(measured) == 2 and abs(measured[0] - measured[1]) > tol
    if off_target or disagree:
        why = "reuse off target" if off_target else "reuse measures disagree"
        return ReuseVerdict(True, False, f"{why}: {numbers}")
    if achieved is None:
        return ReuseVerdict(False, False, "reuse checked once: the requests report no cached "
                                          f"tokens, {server_name} {_shown(server)}")
    if server is None:
        return ReuseVerdict(False, False, "reuse checked once: no engine counters, requests "
                                          f"report {_shown(achieved)} cached")
    return ReuseVerdict(False, False, None)


@dataclass(frozen=True)
class Turn:
    """One conversation request: its conversation, that conversation's turn,
    its prompt tokens and the cached ones the server reported."""

    conversation: int
    turn: int
    prompt_tokens: int | None
    cached_tokens: int | None


def turn_problems(turns: Sequence[Turn], block: int | None) -> list[str]:
    """Turns that did not reuse the context sent before them: turn k's cached
    tokens must reach turn k−1's prompt tokens less one block (its history is
    a prefix of turn k's prompt). A turn whose counts are missing is not
    judged here (the cell's verdict says whether anything was verifiable)."""
    slack = block or 1
    last: dict[int, Turn] = {}
    problems = []
    for t in sorted(turns, key=lambda t: (t.conversation, t.turn)):
        before = last.get(t.conversation)
        last[t.conversation] = t
        if before is None or before.turn != t.turn - 1:
            continue
        if before.prompt_tokens is None or t.cached_tokens is None:
            continue
        need = before.prompt_tokens - slack
        if t.cached_tokens < need:
            problems.append(f"conversation {t.conversation} turn {t.turn}: {t.cached_tokens:,} "
                            f"cached tokens, expected at least {need:,} (turn {before.turn}'s "
                            f"{before.prompt_tokens:,} less one block of {slack})")
    return problems
