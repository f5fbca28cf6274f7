"""rundir/speculative.py's rules: when chunks are tokens per verification step, and the 2% check."""

from __future__ import annotations

import pytest

from rundir.speculative import (
    agreement,
    client_figure,
    counters_figure,
    request_steps,
    timings_figure,
)

CONT = "usage_continuous"


def test_steps_skip_the_prefills_token_and_chunks_that_add_nothing() -> None:
    # role chunk (0), first token (1), steps of 3, 4, 1, a usage-only chunk (no rise)
    s = request_steps([0, 1, 4, 8, 9, 9])
    assert (s.tokens, s.steps, s.most) == (8, 3, 4)
    assert request_steps([]) == request_steps(None) == request_steps([0, 1])


def test_the_cell_figure_is_token_weighted_over_its_requests() -> None:
    # 1 + (3 + 3) over 2 steps, and 1 + (1 + 1 + 1 + 1) over 4 steps: 10 tokens / 6 steps
    fig = client_figure([[1, 4, 7], [1, 2, 3, 4, 5]], "vllm", CONT, 3, True)
    assert fig.value == pytest.approx(10 / 6) and fig.reason is None
    assert (fig.tokens, fig.steps) == (10, 6)


@pytest.mark.parametrize("engine, counting, k, why", [
    ("vllm", "chunks_usage", 3, "no per-chunk token count"),
    ("llama.cpp", CONT, 3, "llama.cpp is not known to stream once per verification step"),
    ("openai", CONT, None, "openai is not known"),
    ("vllm", CONT, 1, "a chunk carried 3 tokens, more than the draft length 1 + 1"),
])
def test_not_measurable_says_why(engine, counting, k, why) -> None:
    fig = client_figure([[1, 4, 5]], engine, counting, k, True)
    assert fig.value is None and why in fig.reason


def test_published_only_where_the_engine_counted_drafts() -> None:
    chunks = [[1, 2, 3, 4]]
    assert "the engine counted no drafts" in client_figure(chunks, "vllm", CONT, None, False).reason
    assert client_figure(chunks, "vllm", CONT, 3, True).value == 1.0  # drafting, nothing accepted
    # a chunk of 2 tokens is no proof of drafting (a held-back partial character)
    assert client_figure([[1, 3]], "vllm", CONT, None, False).value is None


def test_server_figures() -> None:
    assert counters_figure(10, 30, 18) == (pytest.approx(2.8), 3.0)
    assert counters_figure(0, 0, 0) == (None, None)
    # 11 generated: the prefill's token, then 10 over steps that accepted 6 -> 10 / 4
    assert timings_figure([11, None], [6, 3]) == pytest.approx(2.5)
    assert timings_figure([1], [0]) is None


def test_agreement_within_two_percent() -> None:
    assert agreement(2.04, 2.0) is None
    assert agreement(2.0, 2.0) is None and agreement(None, 2.0) is None
    assert "2.5% apart" in agreement(2.05, 2.0)


def test_a_disagreement_with_the_counters_higher_names_what_only_they_count() -> None:
    """vLLM's counters leave out steps that proposed no draft and keep drafts accepted
    past max_tokens: both raise their figure, never lower it (docs/methodology.md)."""
    higher = agreement(3.735, 3.848)  # measured: vLLM ngram, 128 output tokens
    assert higher is not None and "counters' figure is the higher" in higher
    lower = agreement(3.0, 2.0)  # counters claiming half: nothing explains it
    assert lower is not None and "higher" not in lower


def test_llama_server_reason_names_its_streaming_not_the_missing_usage():
    """llama-server sends no per-chunk usage AND streams once per token; the reason a
    reader gets is the fundamental one (one event per token), not the usage."""
    fig = client_figure([[1, 2, 3, 4]], "llama.cpp", "chunks_usage", 3.0, True)
    assert fig.value is None
    assert "llama.cpp is not known to stream once per verification step" in fig.reason
