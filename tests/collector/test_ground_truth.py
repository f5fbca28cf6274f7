"""Every page metric against the reference server's exact ground truth.

The reference server logs when it really sent every chunk; the collector
stamps when each arrived. For each scenario the page's numbers (computed by
`page_metrics`, the same functions the site uses) must agree with numbers
computed here from the server's own log, within 1% (or 0.5 ms).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pytest

from rundir import activity, metrics
from rundir.contract import METRIC_WAITING, PURPOSE_MEASURE
from rundir.io import read_run
from site_builder.aggregate import measured_cells
from tests.conftest import run_cli
from tests.refserver.harness import (  # noqa: F401
    refserver_fixture,
    true_request_figures,
    true_running,
    true_waiting,
)

FAST = ["--duration", "4", "--warmup-stable", "1", "--no-prefill", "--server-wait", "3"]


def collect(srv, tmp_path: Path, *extra: str, ok: bool = True) -> tuple[Path, object]:
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), *FAST, *extra)
    if ok:
        assert res.returncode == 0, res.stderr
    return out, res


def collect_prefill(srv, tmp_path: Path, exit_code: int = 0) -> Path:
    """A 2K prefill cell (and one short decode cell) against `srv`."""
    out = tmp_path / "pre"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(out), "--contexts",
                  "2k", "--concurrency", "1", "--duration", "1", "--warmup-stable", "0.5",
                  "--max-output", "50", "--server-wait", "3")
    assert res.returncode == exit_code, res.stderr
    return out


def page_metrics(run_dir: Path) -> dict[tuple[int, int], dict]:
    """The sustained-decode numbers a page shows for each cell."""
    run = read_run(run_dir)
    out = {}
    req = run.requests
    for cell in run.cells.to_pylist():
        if cell["phase"] != "decode" or cell["window_start_ns"] is None:
            continue
        rows = [r for r in req.to_pylist() if r["purpose"] == PURPOSE_MEASURE
                and r["context"] == cell["context"] and r["concurrency"] == cell["concurrency"]]
        table = req.filter(np.isin(np.array(req.column("request_id").to_pylist()),
                                   [r["request_id"] for r in rows]))
        chunks = metrics.Chunks.from_table(table)
        done = np.array([r["finish_reason"] is not None and r["error"] is None
                         and not r["cancelled"] for r in table.to_pylist()], dtype=bool)
        s, e = cell["window_start_ns"], cell["window_end_ns"]
        m = metrics.decode_metrics(chunks, s, e, done)
        active = activity.window_activity_detail(chunks, run.server_metrics, s, e).avg_active
        out[(cell["context"], cell["concurrency"])] = dict(
            cell=cell, m=m, active=active, requests=table.to_pylist(),
            waiting_samples=waiting_sample_times(run.server_metrics))
    return out


def truth_metrics(records: list[dict], page: dict) -> dict:
    """The same metrics from the server's send times."""
    cell = page["cell"]
    s, e = cell["window_start_ns"], cell["window_end_ns"]
    ours = {r["request_id"]: r for r in page["requests"]}
    recs = [r for r in records if r["request_id"] in ours]
    tokens = 0
    rates, gaps, ttfts = [], [], []
    for r in recs:
        chunks = [(t, n) for t, n, _ in r["chunks"] if n > 0]
        if chunks:
            ttfts.append((chunks[0][0] - ours[r["request_id"]]["send_ns"]) / 1e6)
        inwin = [(t, n) for t, n in chunks if s <= t <= e]
        tokens += sum(n for _, n in inwin)
        if len(inwin) >= 2:
            after = sum(n for _, n in inwin[1:])
            span = inwin[-1][0] - inwin[0][0]
            rates.append(after / (span / 1e9))
            gaps.append(span / 1e6 / after)
    grid = np.arange(s, e, 2_000_000)
    active = float(np.mean([true_running(records, int(t)) for t in grid]))
    transit = sum(in_transit_ns(r, ours[r["request_id"]], s, e) for r in recs) / (e - s)
    stale = stale_gauge(records, page["waiting_samples"], grid)
    completed = sum(1 for r in recs if r["finish_reason"] == "length" and not r["cancelled"]
                    and s <= r["finish_ns"] <= e)
    return dict(total=tokens / ((e - s) / 1e9), per_request=statistics.median(rates),
                tbt=statistics.median(gaps), ttft=statistics.median(ttfts), active=active,
                completed=completed, tokens=tokens, transit=transit, stale=stale)


def waiting_sample_times(server_metrics) -> np.ndarray:
    """When the collector read the server's waiting gauge (sorted)."""
    if server_metrics is None or not len(server_metrics):
        return np.array([], dtype=np.int64)
    rows = [r["t_ns"] for r in server_metrics.to_pylist() if r["name"] == METRIC_WAITING]
    return np.sort(np.array(rows, dtype=np.int64))


def _overlap(a: int | None, b: int | None, start_ns: int, end_ns: int) -> int:
    """Length of [a, b) inside the window (0 when either end is unknown)."""
    if a is None or b is None:
        return 0
    return max(0, min(b, end_ns) - max(a, start_ns))


def stale_gauge(records: list[dict], samples: np.ndarray, grid: np.ndarray) -> float:
    """How far, on average over the window, the waiting count the collector
    holds between its samples of the gauge is from the server's true waiting
    count: the one error the page's average active may have besides
    transport. Exact from the server's log: the true count at each grid
    point against the true count at the last sample before it (0 before the
    first, as the collector takes it)."""
    def waiting(ts: np.ndarray) -> np.ndarray:
        return np.array([true_waiting(records, int(t)) for t in ts], dtype=float)
    last = np.searchsorted(samples, grid, side="right") - 1
    held_at = np.unique(samples[last[last >= 0]])
    held = dict(zip(held_at.tolist(), waiting(held_at).tolist(), strict=True))
    held_now = np.array([held[int(samples[i])] if i >= 0 else 0.0 for i in last])
    return float(np.mean(np.abs(waiting(grid) - held_now)))


def in_transit_ns(rec: dict, row: dict, start_ns: int, end_ns: int) -> int:
    """Time inside the window a request spent between the client and the
    server: sent but not yet received, finished but not yet seen to end.

    The client counts a request active from its send to its stream's end; the
    server holds a slot from receipt to finish. The difference is transport
    and scheduling, which grows on a busy host (each restart adds both ends),
    so the page's average active may exceed the server's by this much and no
    more (a queued request's wait is the waiting gauge's, `stale_gauge_ns`)."""
    last = max((t for t in row["chunk_ns"] or []), default=None)
    stop = row["end_ns"] if row["end_ns"] is not None else last
    return (_overlap(row["send_ns"], rec["recv_ns"] or None, start_ns, end_ns)
            + _overlap(rec["finish_ns"], stop, start_ns, end_ns))


def assert_close(ours: float, truth: float, what: str, abs_ms: float | None = None) -> None:
    tol = max(0.01 * abs(truth), abs_ms or 0.0)
    assert abs(ours - truth) <= tol, f"{what}: ours {ours:.4f}, truth {truth:.4f}"


def assert_ttft_within_transport(ours: float, records: list[dict], page: dict, key) -> None:
    """The page's TTFT (a median) between the median of each request's true
    TTFT and the median of that TTFT moved by the request's own transport (its
    way up and its first token's way down, from the two logs): a median is
    monotone in every sample, so a busy host widens the bound, never breaks it,
    and a quiet one keeps it within a fraction of a millisecond."""
    cell = page["cell"]
    fig = true_request_figures(records, page["requests"], cell["window_start_ns"],
                               cell["window_end_ns"])["ttft_ms"]
    lo, hi = float(np.nanmedian(fig.lo)), float(np.nanmedian(fig.hi))
    assert lo - 1e-6 <= ours <= hi + 1e-6, (
        f"{key} TTFT: ours {ours:.4f}, truth {float(np.nanmedian(fig.truth)):.4f} "
        f"(with transport {lo:.4f}..{hi:.4f})")


def check_against_truth(srv, run_dir: Path) -> dict:
    pages = page_metrics(run_dir)
    records = srv.truth(min_records=1)
    for key, page in pages.items():
        t = truth_metrics(records, page)
        m = page["m"]
        assert_close(m.total_tok_s, t["total"], f"{key} total tok/s")
        assert_close(m.per_request_tok_s, t["per_request"], f"{key} per-request tok/s")
        assert_close(m.tbt_ms, t["tbt"], f"{key} time between tokens", abs_ms=0.5)
        assert_ttft_within_transport(m.ttft_ms, records, page, key)
        # transport time counts as active on the client's side; the waiting
        # gauge is held between samples, and so may lag either way
        low = (t["active"] - t["stale"]) * 0.99
        high = (t["active"] + t["transit"] + t["stale"]) * 1.01
        assert low <= page["active"] <= high, (
            f"{key} average active: ours {page['active']:.4f}, truth {t['active']:.4f}"
            f" (+{t['transit']:.4f} in transit, ±{t['stale']:.4f} gauge not yet sampled)")
        assert m.completed == t["completed"], key
        assert abs(m.output_tokens - t["tokens"]) <= max(2, 0.01 * t["tokens"]), key
    return pages


def statuses(run_dir: Path) -> dict[tuple[str, int, int], tuple[str, str | None]]:
    return {(c["phase"], c["context"], c["concurrency"]): (c["status"], c["reason"])
            for c in read_run(run_dir).cells.to_pylist()}


def test_steady_decode_matches_truth(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, ttft_ms=20, default_max_tokens=300)
    run_dir, _ = collect(srv, tmp_path, "--contexts", "256", "--concurrency", "1,4",
                         "--max-output", "300")
    pages = check_against_truth(srv, run_dir)
    assert {p["cell"]["status"] for p in pages.values()} == {"valid"}
    # restarts inside the window: completions are counted, not only streams
    assert pages[(256, 1)]["m"].completed >= 1 and pages[(256, 4)]["m"].completed >= 4


def test_speculative_chunks_count_every_token(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=100, tokens_per_chunk=[1, 3, 2])
    run_dir, _ = collect(srv, tmp_path, "--contexts", "256", "--concurrency", "2",
                         "--max-output", "2000")
    pages = check_against_truth(srv, run_dir)
    page = pages[(256, 2)]
    assert page["cell"]["token_counting"] == "usage_continuous"
    # 1, 3, 2 tokens per chunk: two per chunk on average, whatever pace the
    # host let the server keep (check_against_truth holds the rates to truth)
    chunks = sum(len(r["chunk_ns"]) for r in page["requests"])
    tokens = sum(r["chunk_tokens"][-1] for r in page["requests"] if r["chunk_tokens"])
    assert tokens / chunks == pytest.approx(2, rel=0.02)


def test_reasoning_tokens_are_output(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=150, reasoning_tokens=40)
    run_dir, _ = collect(srv, tmp_path, "--contexts", "128", "--concurrency", "2",
                         "--max-output", "120")
    check_against_truth(srv, run_dir)
    assert statuses(run_dir)[("decode", 128, 2)][0] == "valid"


def test_more_requests_than_slots_is_queued(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, slots=2)
    run_dir, _ = collect(srv, tmp_path, "--contexts", "128", "--concurrency", "4",
                         "--max-output", "200", "--warmup-timeout", "3")
    check_against_truth(srv, run_dir)
    status, reason = statuses(run_dir)[("decode", 128, 4)]
    assert status == "requests_queued", reason


def test_data_parallel_gauges_are_summed(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, dp_ranks=2)
    run_dir, _ = collect(srv, tmp_path, "--contexts", "128", "--concurrency", "4",
                         "--max-output", "2000")
    pages = check_against_truth(srv, run_dir)
    assert pages[(128, 4)]["cell"]["status"] == "valid"
    metrics_rows = read_run(run_dir).server_metrics.to_pylist()
    assert {r["labels"] for r in metrics_rows if r["name"] == "running"} >= {
        'engine="0",model_name="ref"', 'engine="1",model_name="ref"'}


def test_kv_budget_plans_and_refusals(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, kv_budget_tokens=4096, refuse_over_kv=True)
    run_dir, res = collect(srv, tmp_path, "--contexts", "1k", "--concurrency", "1,2,4",
                           "--max-output", "512")
    st = statuses(run_dir)
    assert st[("decode", 1024, 1)][0] == "valid"
    assert st[("decode", 1024, 2)][0] == "valid"  # 2 × 1,536 fits 4,096
    assert st[("decode", 1024, 4)][0] == "over_capacity"  # planned skip
    assert "Over capacity" in res.stderr
    # the server refusing a context it cannot hold is Over capacity too
    run2 = tmp_path / "forced"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(run2), *FAST,
                  "--contexts", "1k", "--concurrency", "4", "--max-output", "512",
                  "--kv-budget", "1000000")
    assert res.returncode == 0, res.stderr
    status, reason = statuses(run2)[("decode", 1024, 4)]
    assert status == "over_capacity" and "refused" in reason


def test_looping_model_is_looped(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=300, loop_after_tokens=30, loop_period=5)
    run_dir, _ = collect(srv, tmp_path, "--contexts", "128", "--concurrency", "2",
                         "--max-output", "400")
    status, reason = statuses(run_dir)[("decode", 128, 2)]
    assert status == "looped" and "period" in reason
    kept = read_run(run_dir).requests.to_pylist()
    assert any(r["content_tail"] for r in kept)  # the evidence stays


def test_final_usage_only_with_multi_token_chunks_is_not_trusted(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, tokens_per_chunk=[1, 3], usage_mode="final",
                    default_max_tokens=100)
    run_dir, res = collect(srv, tmp_path, "--contexts", "128", "--concurrency", "1",
                           "--max-output", "100", ok=False)
    assert res.returncode == 3, res.stderr  # finished, with an Error cell
    status, reason = statuses(run_dir)[("decode", 128, 1)]
    assert status == "error" and "several tokens per chunk" in reason


def test_prefill_rejects_cache_hits_and_matches_truth(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, ttft_ms=5, prefill_tok_per_s=20000)
    out = collect_prefill(srv, tmp_path)
    run = read_run(out)
    rows = [r for r in run.requests.to_pylist() if r["purpose"] == "prefill_sample"]
    assert len(rows) == 3 and all(r["error"] is None for r in rows)
    chunks = metrics.Chunks.from_table(run.requests.filter(
        np.array([r["purpose"] == "prefill_sample" for r in run.requests.to_pylist()])))
    m = metrics.prefill_metrics(chunks, np.array([r["prompt_tokens"] for r in rows]))
    truth = srv.truth_by_id()
    true_ttft = statistics.median(
        (truth[r["request_id"]]["chunks"][0][0] - r["send_ns"]) / 1e6 for r in rows)
    assert_close(m.ttft_ms, true_ttft, "prefill TTFT", abs_ms=0.5)
    # 2,048 words at 20,000 tok/s + 5 ms: about 107 ms
    assert m.ttft_ms == pytest.approx(5 + 2048 / 20000 * 1000, rel=0.1)


@pytest.mark.parametrize("in_usage", [True, False], ids=["usage", "counter-only"])
def test_prefill_cache_hits_are_rejected_and_retried(refserver, tmp_path, in_usage) -> None:
    """Every second request is served from the prefix cache. A hit is told by
    usage `cached_tokens`, or only by vLLM's prefix-cache hit counter; either
    way the collector rejects it, keeps it as evidence, and takes another
    cold sample, and the page's prefill numbers come from cold samples only."""
    srv = refserver(tokens_per_s=200, ttft_ms=5, prefill_tok_per_s=20000, cache_hit_every=2,
                    report_cached_tokens=in_usage)
    out = collect_prefill(srv, tmp_path)
    run = read_run(out)
    truth = srv.truth_by_id()
    rows = [r for r in run.requests.to_pylist() if r["purpose"] == "prefill_sample"]
    hits = [r for r in rows if truth[r["request_id"]]["cached"]]
    cold = [r for r in rows if not truth[r["request_id"]]["cached"]]
    assert len(cold) == 3 and hits, [truth[r["request_id"]]["cached"] for r in rows]
    assert all(r["error"] is None for r in cold)
    for r in hits:
        assert r["error"] == f"rejected: prefix-cache hit ({r['prompt_tokens']} cached tokens)"
    cells, _ = measured_cells(run)
    prefill = next(c for c in cells if c.phase == "prefill")
    assert prefill.status == "valid" and prefill.completed == 3
    true_ttft = statistics.median(
        (truth[r["request_id"]]["chunks"][0][0] - r["send_ns"]) / 1e6 for r in cold)
    assert_close(prefill.ttft_ms, true_ttft, "prefill TTFT", abs_ms=0.5)
    # cold: 2,048 words at 20,000 tok/s + 5 ms; a hit would have been ~5 ms
    assert prefill.ttft_ms == pytest.approx(5 + 2048 / 20000 * 1000, rel=0.1)


def test_prefill_every_sample_a_cache_hit_is_an_error(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200, ttft_ms=5, cache_hit_every=1)
    out = collect_prefill(srv, tmp_path, exit_code=3)  # finished, with an Error cell
    status, reason = statuses(out)[("prefill", 2048, 1)]
    assert status == "error" and reason == "only 0 cold samples in 9 tries"


def test_generic_endpoint_without_tokenizer_or_metrics(refserver, tmp_path) -> None:
    """No /tokenize, no /metrics, no max_model_len: prompt sizes come from a
    ratio calibrated on the server's usage counts, activity from the client."""
    srv = refserver(engine="generic", tokens_per_s=200)
    run_dir, _ = collect(srv, tmp_path, "--contexts", "1k", "--concurrency", "2",
                         "--max-output", "2000")
    run = read_run(run_dir)
    assert run.info.engine.name == "openai"
    assert len(run.server_metrics) == 0
    prompts = [r["prompt_tokens"] for r in run.requests.to_pylist() if r["prompt_tokens"]]
    assert prompts and all(abs(p - 1024) <= 16 for p in prompts)
    check_against_truth(srv, run_dir)


def test_default_dry_run_plans_the_full_matrix(refserver, tmp_path) -> None:
    """`bench run --base-url URL --dry-run` as a new user types it."""
    srv = refserver(max_model_len=32768, kv_budget_tokens=262144)
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--dry-run", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stderr.split())
    assert "Contexts: 8K, 16K, 27K; concurrency: 1, 2, 4, 8, 16, 32, 64, 128" in text
    assert "dropped context 32K" in text and "Over capacity" in text and "Will run" in text
    assert not (tmp_path / "runs").exists()
