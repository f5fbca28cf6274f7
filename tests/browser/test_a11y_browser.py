"""Keyboard and screen-reader basics of every page of the sample site, in a real
browser after its scripts ran: a skip link first in the tab order that moves focus
to the content, a visible outline on the focused control, and a `scope` on every
header cell (tables the scripts build included: the compare page's A/B tables)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from site_builder.publish import build_site
from tests.support.chromium import Watcher, require_chromium, site_pages, wait_for_charts
from tests.support.synthetic_runs import make_sample_data

pytestmark = pytest.mark.browser

NO_SCOPE_JS = """() => Array.from(document.querySelectorAll('th'))
  .filter(th => !['col', 'row', 'colgroup', 'rowgroup'].includes(th.getAttribute('scope')))
  .map(th => th.textContent.trim().slice(0, 40))"""
FOCUS_JS = """() => { const e = document.activeElement, s = getComputedStyle(e),
  r = e.getBoundingClientRect();
  return {tag: e.tagName, cls: e.className, text: e.textContent.trim(), outline: s.outlineStyle,
          width: parseFloat(s.outlineWidth), top: r.top, bottom: r.bottom}; }"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    root = tmp_path_factory.mktemp("a11y-site")
    assert build_site(make_sample_data(root / "data"), root / "site").errors == []
    return root / "site"


@pytest.fixture
def page(browser: Any, site: Path) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    watcher = Watcher(site.resolve().as_uri() + "/")
    watcher.attach(context)
    yield watcher.watch(context.new_page()), watcher
    context.close()


def test_every_header_cell_has_a_scope(page: tuple[Any, Watcher], site: Path) -> None:
    p, watcher = page
    runs = sorted(x.name for x in (site / "runs").iterdir() if x.is_dir())
    rels = [*site_pages(site), f"compare.html#a={runs[0]}&b={runs[1]}"]
    for rel in rels:
        p.goto(watcher.site_root + rel, wait_until="load")
        wait_for_charts(p)
        if rel.startswith("compare.html#"):
            p.wait_for_selector("table.matrix.ab")
        assert p.evaluate(NO_SCOPE_JS) == [], f"{rel}: header cells without scope"


def test_skip_link_comes_first_and_moves_focus_to_the_content(page: tuple[Any, Watcher]) -> None:
    p, watcher = page
    for rel in ("index.html", "compare.html", "methodology.html"):
        p.goto(watcher.site_root + rel, wait_until="load")
        p.keyboard.press("Tab")
        first = p.evaluate(FOCUS_JS)
        assert (first["tag"], first["text"]) == ("A", "Skip to content"), rel
        assert first["top"] >= 0 and first["outline"] != "none" and first["width"] >= 1, first
        p.keyboard.press("Enter")
        assert p.evaluate("() => document.activeElement.id") == "main", rel
        p.keyboard.press("Tab")  # the next control after the skip target is inside main
        assert p.evaluate("() => document.querySelector('main').contains(document.activeElement)")


def test_keyboard_focus_is_visible_on_links_and_buttons(page: tuple[Any, Watcher]) -> None:
    p, watcher = page
    p.goto(watcher.site_root + "index.html", wait_until="load")
    seen = []
    for _ in range(12):
        p.keyboard.press("Tab")
        f = p.evaluate(FOCUS_JS)
        seen.append(f["tag"])
        assert f["outline"] != "none" and f["width"] >= 1, f"no visible focus on {f}"
    assert {"A"} <= set(seen)
