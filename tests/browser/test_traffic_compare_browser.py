"""The compare page's prefix-reuse and conversation tables in a real browser (issue 33,
item 4): two synthetic runs with traffic cells of known numbers (the second's every
TTFT doubled) show, per reuse asked, each run's achieved reuse, TTFT, uncached
prefill tok/s (as the run page prints them) and status word linked to its methodology entry; per turn, each
run's TTFT; and swapping the runs swaps the sides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from site_builder.publish import build_site
from tests.support.chromium import Watcher, require_chromium
from tests.support.rate_runs import add_rate
from tests.support.synthetic_runs import make_measured_run
from tests.support.traffic_runs import add_traffic

pytestmark = pytest.mark.browser

ROWS_JS = r"""(sel) => Array.from(document.querySelectorAll(sel + ' tbody tr')).map((tr) =>
  Array.from(tr.children).map((c) => c.innerText.replace(/\s+/g, ' ').trim()))"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    root = tmp_path_factory.mktemp("traffic-browser")
    data = root / "data"
    add_traffic(make_measured_run(data / "a", run_id="ta", contexts=[1024], concurrency=[1]))
    add_traffic(make_measured_run(data / "b", run_id="tb", contexts=[1024], concurrency=[1],
                                  seed=2), ttft_scale=2.0)
    report = build_site(data, root / "site", cache_dir=root / "cache", jobs=1)
    assert report.errors == []
    return root / "site"


def test_reuse_comparison_shows_each_runs_numbers(browser: Any, site: Path) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(site.resolve().as_uri() + "/")
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    page.goto((site / "compare.html").resolve().as_uri() + "#a=ta&b=tb")
    page.locator("#ab-prefix-reuse table tbody tr").first.wait_for()
    rows = page.evaluate(ROWS_JS, "#ab-prefix-reuse")
    assert rows == [
        ["0%", "A 0.0% B 0.0%", "A 200 ms B 400 ms", "A 20K B 10K", "A Valid B Valid"],
        ["50%", "A 50.0% B 50.0%", "A 110 ms B 220 ms", "A 18.2K B 9,091", "A Valid B Valid"],
        ["90%", "A 10.0% B 10.0%", "A 190 ms B 380 ms", "A 18.9K B 9,474",
         "A Reuse off target B Reuse off target"],
        ["99%", "A — B —", "A 50 ms B 100 ms", "A — B —",
         "A Reuse not verifiable B Reuse not verifiable"],
    ]
    caption = page.locator("#ab-prefix-reuse caption").inner_text()
    assert caption == "4K context, 1 at once"
    off = page.locator("#ab-prefix-reuse .st-reuse_off_target a").first
    assert off.get_attribute("href") == "methodology.html#reuse-off-target"
    assert "asked 90%" in (page.locator("#ab-prefix-reuse .st-reuse_off_target").first
                           .get_attribute("title") or "")
    turns = page.evaluate(ROWS_JS, "#ab-conversations")
    assert [r[:3] for r in turns] == [["1", "A 0.0% B 0.0%", "A 100 ms B 200 ms"],
                                      ["4", "A 75.0% B 75.0%", "A 80 ms B 160 ms"]]
    page.click("#ab-swap")
    page.wait_for_function("() => document.querySelector('#ab-prefix-reuse td.num')"
                           " && document.querySelector('#ab-prefix-reuse tbody tr:nth-child(1)"
                           " td:nth-child(3)').innerText.includes('A 400 ms')")
    # each side's status word in its own colours: the stylesheet's traffic status rules
    colours = page.evaluate("""() => Array.from(document.querySelectorAll(
      '#ab-prefix-reuse .badge')).map((b) => getComputedStyle(b).backgroundColor)""")
    assert colours[0] != colours[4] and len(set(colours)) == 3  # Valid, off target, unverified
    assert watcher.problems() == []
    context.close()


@pytest.fixture(scope="module")
def rate_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    root = tmp_path_factory.mktemp("rate-browser")
    data = root / "data"
    add_rate(make_measured_run(data / "a", run_id="ra", contexts=[1024], concurrency=[1]))
    add_rate(make_measured_run(data / "b", run_id="rb", contexts=[1024], concurrency=[1], seed=2))
    report = build_site(data, root / "site", cache_dir=root / "cache", jobs=1)
    assert report.errors == []
    return root / "site"


def test_rate_comparison_shows_each_runs_numbers(browser: Any, rate_site: Path) -> None:
    """Issue 34: per offered rate both runs measured on the same curve, each run's
    achieved rate, TTFT p90 and status word (tests/support/rate_runs.py's figures)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(rate_site.resolve().as_uri() + "/")
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    page.goto((rate_site / "compare.html").resolve().as_uri() + "#a=ra&b=rb")
    page.locator("#ab-request-rate table tbody tr").first.wait_for()
    assert page.evaluate(ROWS_JS, "#ab-request-rate") == [
        ["1/s", "A 1/s B 1/s", "A 100 ms B 100 ms", "A Valid B Valid"],
        ["2/s", "A 2/s B 2/s", "A 100 ms B 100 ms", "A Valid B Valid"],
        ["4/s", "A 4/s B 4/s", "A 3,655 ms B 3,655 ms", "A Valid B Valid"],
        ["8/s", "A 8/s B 8/s", "A 100 ms B 100 ms", "A Load not delivered B Load not delivered"],
    ]
    assert page.locator("#ab-request-rate caption").inner_text() == \
        "1K context, no cap on requests in flight"
    late = page.locator("#ab-request-rate .st-load_not_delivered a").first
    assert late.get_attribute("href") == "methodology.html#load-not-delivered"
    assert page.locator("#ab-prefix-reuse").count() == 0  # no traffic cells: no such part
    assert watcher.problems() == []
    context.close()
