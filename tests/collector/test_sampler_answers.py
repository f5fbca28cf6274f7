"""A /metrics that answers garbage, slowly or not at all (issue 9, item 4).

The sampler runs in a background thread: whatever /metrics answers, a scrape
never raises into it or into the event loop's worker threads; a failed scrape
is a gap (`failures`, `failed_ns`), and no NaN, infinite or negative gauge
value is recorded.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from bench.server import sampler as sampler_module
from bench.server.engines import ServerInfo
from bench.server.sampler import MetricsSampler
from rundir.contract import METRIC_RUNNING, METRIC_WAITING
from tests.refserver.harness import refserver_fixture  # noqa: F401

HTML = "<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>"


def body(obj) -> str:
    return json.dumps(obj)


# ---- the metrics sampler: a gap, never an exception ------------------------


def gauges_info(base_url: str) -> ServerInfo:
    return ServerInfo(base_url=base_url, engine="vllm", model="ref", has_metrics=True,
                      gauges={METRIC_RUNNING: "vllm:num_requests_running",
                              METRIC_WAITING: "vllm:num_requests_waiting"})


METRICS_BAD = [
    # (id, /metrics answer, drain state)
    ("html", {"body": HTML, "content_type": "text/html"}, "gone"),
    ("empty", {"body": ""}, "gone"),
    ("garbage", {"body": "\x00\x01 not prometheus {{{"}, "gone"),
    ("json", {"body": body({"running": 1})}, "gone"),
    ("nan-values", {"body": 'vllm:num_requests_running{engine="0"} NaN\n'
                            'vllm:num_requests_waiting{engine="0"} NaN\n'}, "gone"),
    ("infinite-values", {"body": "vllm:num_requests_running +Inf\n"}, "gone"),
    ("negative-values", {"body": "vllm:num_requests_running -3\nvllm:num_requests_waiting -1\n"},
     "gone"),
    ("bad-label-syntax", {"body": 'vllm:num_requests_running{engine="0} 1\n'}, "gone"),
    ("http-500", {"status": 500, "body": "oops"}, "gone"),
    ("http-404", {"status": 404}, "gone"),
    ("reset", {"reset": True}, "gone"),
    ("closed", {"close": True}, "gone"),
    ("too-slow", {"delay_s": 5}, "busy"),
]


@pytest.mark.parametrize("answer, drain", [c[1:] for c in METRICS_BAD],
                         ids=[c[0] for c in METRICS_BAD])
def test_bad_metrics_answer_is_a_gap(refserver, answer, drain) -> None:
    srv = refserver(endpoint_answers={"/metrics": answer})
    sampler = MetricsSampler(gauges_info(srv.base_url), None, timeout_s=0.5)
    try:
        assert sampler.scrape() is None
        assert sampler.failures == 1 and len(sampler.failed_ns) == 1
        assert sampler.table().num_rows == 0 and sampler.latest() == {}
        assert sampler.drain_state() == drain
        assert sampler.failures == 2
    finally:
        sampler.stop()


def test_one_bad_metrics_line_costs_only_itself(refserver) -> None:
    page = ('vllm:num_requests_waiting{engine="0} 1\n'  # bad label syntax, first
            'vllm:num_requests_running{engine="0"} 3\n'
            "this line is not prometheus\n"
            'vllm:num_requests_waiting{engine="1"} NaN\n')
    srv = refserver(endpoint_answers={"/metrics": {"body": page, "content_type": "text/plain"}})
    sampler = MetricsSampler(gauges_info(srv.base_url), None, timeout_s=2)
    try:
        assert sampler.scrape() == {METRIC_RUNNING: 3.0}
        assert sampler.table().column("value").to_pylist() == [3.0]
    finally:
        sampler.stop()


@pytest.mark.parametrize("answer", [{"body": HTML}, {"reset": True}, {"delay_s": 5}],
                         ids=["html", "reset", "slow"])
def test_sampling_thread_survives_a_bad_metrics(refserver, answer, monkeypatch) -> None:
    raised: list = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    srv = refserver(endpoint_answers={"/metrics": answer})
    sampler = MetricsSampler(gauges_info(srv.base_url), None, interval_s=0.05, timeout_s=0.3)
    sampler.start()
    try:
        deadline = time.monotonic() + 10
        while sampler.failures < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sampler.failures >= 2 and sampler._thread.is_alive()
    finally:
        sampler.stop()
    assert raised == []


def test_sampling_thread_survives_a_bug_in_parsing(refserver, monkeypatch) -> None:
    """Even an unexpected exception inside a scrape is a gap, not the end of sampling."""
    raised: list = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))

    def broken(*_a, **_k):
        raise RuntimeError("parser bug")

    monkeypatch.setattr(sampler_module, "parse_metrics", broken)
    srv = refserver()
    sampler = MetricsSampler(gauges_info(srv.base_url), None, interval_s=0.05, timeout_s=1)
    sampler.start()
    try:
        deadline = time.monotonic() + 10
        while sampler.failures < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sampler.failures >= 2 and sampler._thread.is_alive()
    finally:
        sampler.stop()
    assert raised == []


def test_slow_metrics_does_not_block_the_server(refserver) -> None:
    """`metrics_delay_s` delays /metrics only: the server answers other
    requests while a scrape is pending (a 2 s limit against a 4 s delay),
    and the late answer is the real one."""
    srv = refserver(metrics_delay_s=4)
    sampler = MetricsSampler(gauges_info(srv.base_url), None, timeout_s=30)
    done: list = []
    scraping = threading.Thread(target=lambda: done.append(sampler.scrape()))
    scraping.start()
    try:
        time.sleep(0.3)
        assert httpx.get(srv.base_url + "/v1/models", timeout=2).status_code == 200
        assert not done  # /v1/models answered while /metrics was still pending
        scraping.join(30)
        assert done == [{METRIC_RUNNING: 0.0, METRIC_WAITING: 0.0}]
    finally:
        sampler.stop()
