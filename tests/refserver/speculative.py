"""The reference server's draft model of known acceptance (issue 35).

With `spec_draft_tokens` = k, every decode step of a request (each step after
its first token, which the prefill makes) is one verification step: k draft
tokens are proposed and `accepted` of them kept, and the step yields
accepted + 1 tokens (the target adds one). The accepted counts are known in
advance, per request and step: `spec_accept` (a list cycled over a request's
steps, step 0 first) or, without it, seeded draws — each draft token kept with
probability `spec_accept_p` until the first rejected one, from a generator
seeded by (scenario seed, request number). A step that would pass the
request's max_tokens yields only what is left (its accepted count cut to
that, less one). With `spec_steps_per_chunk` = m the server streams the
tokens of m steps as one chunk (a server that batches steps per event);
the step clock still paces chunks.

The truth record of each request holds `spec_steps`, per verification step
its tokens (accepted + 1), and `spec_accepted`; the engine's counters sum
them: vLLM `vllm:spec_decode_num_drafts_total`, `..._num_draft_tokens_total`
and `..._num_accepted_tokens_total` (counters, as vLLM v1 names them), and
llama-server's `timings.draft_n` / `draft_n_accepted` per request. With
`spec_counters_lie` = f both claim accepted × f (rounded); with
`spec_counters` false neither is there.

SGLang reports no count (docs/engines.md, "Speculative decoding (SGLang)"):
its `sglang:spec_accept_length` / `spec_accept_rate` gauges hold the steps
logged in the last window of `LOG_INTERVAL` decode batches (its
--decode-log-interval), and /server_info's `avg_spec_accept_length` all the
windows logged so far; `SpecLogs` keeps both from the true totals.
"""

from __future__ import annotations

import random
from typing import Any


class Drafts:
    """One request's verification steps: how many tokens each yields, logged as taken."""

    def __init__(self, sc: Any, index: int, rec: dict) -> None:
        self.sc, self.rec = sc, rec
        self.rng = random.Random(f"{sc.seed}:{index}")
        self.steps = 0
        rec.update(spec_steps=[], spec_accepted=[])
        self.drafted = self.accepted = 0  # this request's true totals

    def _accepted(self) -> int:
        sc, k = self.sc, self.sc.spec_draft_tokens
        if sc.spec_accept:
            return min(k, sc.spec_accept[self.steps % len(sc.spec_accept)])
        n = 0
        while n < k and self.rng.random() < sc.spec_accept_p:
            n += 1
        return n

    def step(self, left: int) -> int:
        """One verification step with `left` tokens still to generate: its tokens."""
        acc = self._accepted()
        tokens = min(acc + 1, left)
        self.steps += 1
        self.drafted += self.sc.spec_draft_tokens
        self.accepted += tokens - 1
        self.rec["spec_steps"].append(tokens)
        self.rec["spec_accepted"].append(tokens - 1)
        return tokens

    def chunk(self, left: int) -> int:
        """The tokens of one streamed chunk: `spec_steps_per_chunk` steps."""
        n = 0
        for _ in range(self.sc.spec_steps_per_chunk):
            if n >= left:
                break
            n += self.step(left - n)
        return n


LOG_INTERVAL = 40  # SGLang's --decode-log-interval default: decode batches between its logs


class SpecLogs:
    """SGLang's logged acceptance: at every LOG_INTERVAL-th decode batch the steps and
    accepted drafts since the last log become the gauges' window and join the totals."""

    def __init__(self) -> None:
        self.marks = (0, 0)  # (steps, accepted) at the last log
        self.window: tuple[int, int] | None = None  # the last logged window's, None before one
        self.total = (0, 0)  # every logged window's

    def tick(self, batches: int, steps: int, accepted: int) -> None:
        """After decode batch number `batches`, with the true totals so far."""
        if batches % LOG_INTERVAL:
            return
        window = (steps - self.marks[0], accepted - self.marks[1])
        self.marks = (steps, accepted)
        if window[0]:
            self.window = window
            self.total = (self.total[0] + window[0], self.total[1] + window[1])


def accept_length(sc: Any, steps: int, accepted: int) -> float:
    """SGLang's logged accept length: (accepted drafts + one a step) ÷ steps, as claimed."""
    return (claimed(sc, accepted) + steps) / steps


def claimed(sc: Any, accepted: int) -> int:
    """Accepted tokens as the counters and timings claim them."""
    return round(accepted * sc.spec_counters_lie)


def check(sc: Any) -> str | None:
    """The speculative fields' problem, or None when they are valid."""
    k = sc.spec_draft_tokens
    if k is not None and (not isinstance(k, int) or k < 1):
        return "spec_draft_tokens must be an int >= 1 or null"
    if sc.spec_accept is not None and (not sc.spec_accept or not all(
            isinstance(a, int) and a >= 0 for a in sc.spec_accept)):
        return "spec_accept must be a non-empty list of ints >= 0 or null"
    if not 0 <= sc.spec_accept_p <= 1:
        return "spec_accept_p must be in [0, 1]"
    if sc.spec_counters_lie < 0:
        return "spec_counters_lie must be >= 0 (a factor)"
    if not isinstance(sc.spec_steps_per_chunk, int) or sc.spec_steps_per_chunk < 1:
        return "spec_steps_per_chunk must be an int >= 1"
    return None
