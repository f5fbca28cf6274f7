"""The built site hosted under a sub-path (a GitHub project page, `s3://bucket/speed/`,
nginx `location /speed/`), in Chromium: served at /sub/path/ only, with every other
path a 404, a reader clicks from the index to a run's page and on to the compare page,
and nothing the pages load or link to leaves the prefix. This is why `build-site`
has no --base-url: every link is relative (docs/site.md, "Publishing")."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from site_builder.publish import build_site
from tests.support.chromium import Watcher, require_chromium, wait_for_charts
from tests.support.synthetic_runs import make_sample_data

pytestmark = pytest.mark.browser

PREFIX = "/sub/path/"


class _UnderPrefix(http.server.SimpleHTTPRequestHandler):
    """Serves the folder at PREFIX alone: a request elsewhere gets 404, as it would from
    a host that holds the site under a sub-path."""

    def translate_path(self, path: str) -> str:
        if not urlsplit(path).path.startswith(PREFIX):
            return str(Path(self.directory) / ".not-under-the-prefix")
        return super().translate_path("/" + path[len(PREFIX):])

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_chromium()
    base = tmp_path_factory.mktemp("subpath")
    report = build_site(make_sample_data(base / "data"), base / "site")
    assert report.errors == []
    handler = functools.partial(_UnderPrefix, directory=str(base / "site"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}{PREFIX}"
    server.shutdown()
    server.server_close()


def test_index_to_run_to_compare_under_a_sub_path(browser: Any, root: str) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(root)
    watcher.attach(context)
    page = watcher.watch(context.new_page())
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))
    try:
        origin = root[: -len(PREFIX)]
        assert page.request.get(origin + "/index.html").status == 404  # the prefix is required
        page.goto(root)  # the folder's URL, as a reader types it
        assert page.locator("h1").count() == 1
        page.locator('a[href^="runs/synth-a/"]').first.click()
        page.wait_for_url(f"{root}runs/synth-a/**")
        assert wait_for_charts(page) > 0
        page.get_by_role("link", name="Compare with another run").click()
        page.wait_for_url(f"{root}compare.html#a=synth-a")
        page.select_option("#ab-b", "synth-b")
        page.locator("#ab-result table").first.wait_for()
        assert "synth-b" in page.url
        links = page.eval_on_selector_all("a[href]", "els => els.map(a => a.href)")
        own = [u for u in links if watcher.own(u)]
        assert own and all(urlsplit(u).path.startswith(PREFIX) for u in own), own
        assert all(page.request.get(u.split("#")[0]).status == 200 for u in set(own))
        assert watcher.problems() == []
        outside = [u for u in requested if watcher.own(u) and u.startswith(origin)
                   and not urlsplit(u).path.startswith(PREFIX)]
        assert outside == []
    finally:
        context.close()
