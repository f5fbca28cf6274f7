"""Speculative decoding measured by its acceptance: tokens per verification step (issue 35).

With a draft model the target verifies k drafted tokens per step and keeps the
accepted ones plus one of its own, so a step yields 1 to k + 1 tokens. An
engine that streams once per step sends each step's tokens as one chunk, and
requests.parquet stores every chunk's cumulative token count: the tokens a
chunk carries *are* that step's accepted drafts plus one, from the client alone.

The client figure (`spec_tokens_per_step`) of a cell is token-weighted:
Σ tokens ÷ Σ steps over its measured requests' decode chunks (every chunk that
adds tokens after a request's first, which the prefill made). It is published
only where it means tokens per step (`client_figure` says why not otherwise):

1. the cell's tokens were counted from per-chunk usage (`usage_continuous`):
   a chunk-counted stream is one token a chunk by construction;
2. the engine is one known to send one chunk per engine step (`PER_STEP_ENGINES`):
   vLLM's default; llama-server streams one event per token, SGLang merges the
   steps queued while its front end was behind (docs/engines.md);
3. where the engine's counters give the mean draft length (Δdraft tokens ÷
   Δdrafts), no chunk carries more than its ceiling + 1 tokens (one that does
   proves several steps per chunk). The ceiling, not the mean: a proposer that
   may draft fewer than k (vLLM's ngram lookup: a mean of 2.85 at k = 3,
   docs/engines.md) still sends steps of k + 1 tokens, which the mean refused.
   k is at least the ceiling, so a chunk past it cannot be one step; merged steps
   that total no more than that pass unseen, as under any bound;
4. the engine confirmed it was drafting: its counters or timings counted
   drafts in the cell. Chunks of several tokens are no proof (an engine may
   hold back a token whose text is an incomplete character, or batch steps),
   nor is one token a chunk a figure of 1.0 (an engine that is not drafting
   sends that too): a run without counted drafts publishes no acceptance, and
   its files stay as they were.

The server figure (`spec_tokens_per_step_server`) comes from the engine's own
counters (vLLM: 1 + Δaccepted ÷ Δdrafts) or per-request timings (llama.cpp:
generated tokens after the first ÷ (those − accepted)). The two must agree within
`AGREE_REL` (2%, relative); outside it the acceptance is published as disagreeing.
Pure: numpy only; the collector and the site builder both call it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

COUNT_USAGE_CONTINUOUS = "usage_continuous"  # rundir.contract's name (contract imports nothing here)
PER_STEP_ENGINES = frozenset({"vllm"})  # engines known to stream one chunk per engine step
AGREE_REL = 0.02  # client and server figures agree within this, relative to the server's
SOURCE_VLLM = "vllm:spec_decode counters"
SOURCE_LLAMACPP = "llama.cpp timings draft_n_accepted"


@dataclass(frozen=True)
class Steps:
    """One request's decode steps as the client saw them: tokens after the first
    chunk, steps (chunks that added tokens), and the most tokens one chunk carried."""

    tokens: int
    steps: int
    most: int


def request_steps(chunk_tokens: Sequence[int] | np.ndarray | None) -> Steps:
    """The decode steps of one request from its cumulative `chunk_tokens`: every
    chunk that adds tokens after the first one that did (the prefill's token)."""
    cum = np.asarray(chunk_tokens if chunk_tokens is not None else [], dtype=np.int64)
    if cum.size == 0:
        return Steps(0, 0, 0)
    added = np.diff(cum, prepend=0)
    adding = added[added > 0]
    decode = adding[1:]
    return Steps(int(decode.sum()), int(decode.size), int(decode.max()) if decode.size else 0)


@dataclass(frozen=True)
class SpecFigure:
    """A cell's tokens per step from its chunks (None: not measurable, `reason` says why)."""

    value: float | None
    reason: str | None
    tokens: int = 0
    steps: int = 0


def client_figure(chunk_lists: Iterable[Sequence[int] | np.ndarray | None], engine: str | None,
                  counting: str | None, draft_length: float | None = None,
                  drafts_counted: bool = False) -> SpecFigure:
    """Σ tokens ÷ Σ steps over a cell's measured requests (`chunk_lists`: their
    cumulative chunk_tokens), or None with the reason it is not measurable
    (the rules in this module's docstring). `draft_length`: the mean draft length
    where the engine's counters told it; `drafts_counted`: the engine counted
    drafts in the cell."""
    steps = [request_steps(c) for c in chunk_lists]
    tokens, n = sum(s.tokens for s in steps), sum(s.steps for s in steps)
    most = max((s.most for s in steps), default=0)
    if engine not in PER_STEP_ENGINES:
        return SpecFigure(None, f"tokens per step not measurable: {engine or 'this server'} is "
                                "not known to stream once per verification step", tokens, n)
    if counting != COUNT_USAGE_CONTINUOUS:
        return SpecFigure(None, "tokens per step not measurable: the server sent no per-chunk "
                                "token count", tokens, n)
    if n == 0:
        return SpecFigure(None, "tokens per step not measurable: no decode steps", tokens, n)
    longest = math.ceil(draft_length - 1e-9) if draft_length is not None else None
    if longest is not None and most > longest + 1:
        return SpecFigure(None, f"tokens per step not measurable: a chunk carried {most} tokens, "
                                f"more than the draft length {longest} + 1 (the server sends "
                                "several steps per chunk)", tokens, n)
    if not drafts_counted:
        return SpecFigure(None, "tokens per step not measurable: the engine counted no drafts "
                                "(no speculative decoding, or no counters to confirm it)", tokens, n)
    return SpecFigure(tokens / n, None, tokens, n)


def counters_figure(drafts: float, draft_tokens: float | None, accepted: float
                    ) -> tuple[float | None, float | None]:
    """(tokens per step, draft length k) from vLLM-style counter deltas over a
    cell: 1 + accepted ÷ drafts, and draft tokens ÷ drafts; (None, None) without drafts."""
    if not drafts or drafts <= 0 or accepted < 0:
        return None, None
    k = draft_tokens / drafts if draft_tokens is not None and draft_tokens > 0 else None
    return 1.0 + accepted / drafts, k


def timings_figure(generated: Iterable[int | None], accepted: Iterable[int | None]) -> float | None:
    """Tokens per step from per-request timings (llama.cpp's draft_n_accepted):
    Σ (generated − 1) ÷ Σ (generated − 1 − accepted) over the requests that told
    both (the first token is the prefill's, every step adds its accepted drafts
    plus one); None where none did or no step was taken."""
    pairs = [(g, a) for g, a in zip(generated, accepted, strict=True)
             if g is not None and a is not None and g > 0]
    tokens = sum(g - 1 for g, _ in pairs)
    steps = sum(g - 1 - a for g, a in pairs)
    return tokens / steps if pairs and steps > 0 else None


def agreement(client: float | None, server: float | None) -> str | None:
    """Why the two figures disagree (relative difference past AGREE_REL), else None."""
    if client is None or server is None or server <= 0:
        return None
    off = abs(client - server) / server
    if off <= AGREE_REL + 1e-12:  # 2% exactly agrees (float rounding aside)
        return None
    why = ("; the counters' figure is the higher, as it is when steps that proposed no draft "
           "(an n-gram lookup that found nothing) or drafts accepted past max_tokens count only "
           "there" if server > client else "")
    return (f"acceptance disagrees: the client saw {client:.3f} tokens per step, the server's "
            f"counters {server:.3f} ({100 * off:.1f}% apart, more than {100 * AGREE_REL:g}%){why}")
