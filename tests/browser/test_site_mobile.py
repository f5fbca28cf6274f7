"""Every page kind at a phone's width (390 px) and a desktop's (1440 px), in Chromium.

Two sites: the bundled sample data (``data/``, what the README publishes)
and a site built by importing the three published seed pages plus the
fidelity fixture (contexts of 1000K and above) with ``bench import``. On
every page, with JavaScript and without:

- the document is no wider than the viewport: a wide table scrolls in its own box,
  the column that names its rows staying in view;
- chart text is drawn at 10 px or more;
- no word is broken mid-token where it would have fit on a line of its own;
- no literal ``<a id=`` reaches the reader, context labels carry no thousands separator;
- without JavaScript, nothing that needs it is visible, and no page says "Loading…".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from site_builder.publish import build_site
from tests.support.chromium import require_chromium, site_pages, wait_for_charts

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
IMPORTS = Path(__file__).parents[1] / "data" / "import"
WIDTHS = (390, 1440)
MIN_CHART_PX = 10.0

# One pass over the rendered page; returns a list of problems (empty when fine).
CHECK_JS = r"""(minChartPx) => {
  const out = [];
  const vw = document.documentElement.clientWidth;
  const dw = document.documentElement.scrollWidth;
  if (dw > vw) out.push(`document is ${dw} px wide in a ${vw} px viewport`);

  const visible = (el) => !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length);
  const smallest = new Map();  // figure id -> [px, text] of its smallest text
  document.querySelectorAll('figure.chart svg text').forEach((t) => {
    const svg = t.ownerSVGElement;
    if (!visible(svg) || !t.textContent.trim()) return;
    const vb = svg.viewBox && svg.viewBox.baseVal;
    const natural = vb && vb.width ? vb.width : svg.width.baseVal.value;
    const scale = natural ? svg.getBoundingClientRect().width / natural : 1;
    const px = parseFloat(getComputedStyle(t).fontSize) * scale;
    const id = svg.closest('figure').id;
    if (!smallest.has(id) || px < smallest.get(id)[0]) smallest.set(id, [px, t.textContent]);
  });
  smallest.forEach(([px, label], id) => {
    if (px < minChartPx - 0.05) {
      out.push(`chart text "${label.slice(0, 24)}" drawn at ${px.toFixed(1)} px in #${id}`);
    }
  });

  // A table wider than its box scrolls inside the box, with the column naming its rows in view.
  document.querySelectorAll('.table-scroll').forEach((box) => {
    const table = box.querySelector('table');
    if (!table || !visible(box) || box.scrollWidth <= box.clientWidth) return;
    if (getComputedStyle(box).overflowX !== 'auto') out.push('a wide table\'s box does not scroll');
    const first = table.querySelector('tbody tr > :first-child');
    if (first && getComputedStyle(first).position !== 'sticky') {
      out.push(`first column of a scrolling table (${table.className}) is not sticky`);
    }
  });

  const text = document.body.innerText;
  if (text.includes('<a id=')) out.push('literal "<a id=" in the page text');
  const sep = text.match(/\b\d{1,3}(,\d{3})+K\b/);
  if (sep) out.push(`context label with a thousands separator: ${sep[0]}`);

  // Words broken across lines where the word would have fit on a line of its own.
  const OK_AFTER = '-/_.,:;?&=+)]}·–—';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const range = document.createRange();
  let node, broken = 0;
  while ((node = walker.nextNode()) && broken < 5) {
    const host = node.parentElement;
    if (!host || host.closest('script, style, svg, .visually-hidden') || !visible(host)) continue;
    for (const m of node.data.matchAll(/\S+/g)) {
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const rects = Array.from(range.getClientRects()).filter((r) => r.width > 0);
      const tops = new Set(rects.map((r) => Math.round(r.top)));
      if (tops.size < 2) continue;
      const wordWidth = rects.reduce((a, r) => a + r.width, 0);
      let box = host;
      while (box && getComputedStyle(box).display === 'inline') box = box.parentElement;
      const cs = getComputedStyle(box);
      const room = box.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
      if (wordWidth > room - 1) continue;  // cannot fit on a line: breaking is the only choice
      let prevTop = null;
      for (let i = 0; i < m[0].length; i++) {
        range.setStart(node, m.index + i);
        range.setEnd(node, m.index + i + 1);
        const r = range.getClientRects()[0];
        if (!r) continue;
        const top = Math.round(r.top);
        if (prevTop !== null && top > prevTop && !OK_AFTER.includes(m[0][i - 1])) {
          out.push(`"${m[0]}" broken after "${m[0].slice(0, i)}" in <${host.tagName.toLowerCase()}>`);
          broken++;
          break;
        }
        prevTop = top;
      }
    }
  }
  return out;
}"""

NO_JS_JS = r"""() => {
  const out = [];
  const visible = (el) => !!(el.offsetWidth || el.offsetHeight || el.getClientRects().length);
  document.querySelectorAll('[data-needs-js]').forEach((el) => {
    if (visible(el)) out.push(`<${el.tagName.toLowerCase()}> that needs JavaScript is visible`);
  });
  document.querySelectorAll('input, select, button').forEach((el) => {
    if (visible(el)) out.push(`a ${el.tagName.toLowerCase()} control is visible without JavaScript`);
  });
  if (/Loading…|Loading\.\.\./.test(document.body.innerText)) out.push('"Loading…" shown');
  return out;
}"""


def _seed_data(root: Path) -> Path:
    """The three published seeds and the fidelity page, imported as a user would."""
    from bench.cli import main

    data = root / "data"
    pages = sorted((IMPORTS / "seeds").glob("*.txt")) + [IMPORTS / "published-1m-fidelity.txt"]
    for page in pages:
        result = CliRunner().invoke(main, ["import", str(page), "--out", str(data)])
        assert result.exit_code == 0, result.output
    return data


@pytest.fixture(scope="module", params=["bundled", "seeds"])
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_chromium()
    root = tmp_path_factory.mktemp(f"mobile-{request.param}")
    data = REPO / "data" if request.param == "bundled" else _seed_data(root)
    report = build_site(data, root / "site")
    assert report.errors == []
    return root / "site"


def _urls(site: Path) -> list[str]:
    """Every page, plus the compare page comparing the site's first two runs."""
    urls = [(site / rel).resolve().as_uri() for rel in site_pages(site)]
    runs = [r["slug"] for r in json.loads((site / "index.json").read_text())["runs"]]
    if len(runs) >= 2:
        urls.append((site / "compare.html").resolve().as_uri() + f"#a={runs[0]}&b={runs[1]}")
    return urls


def _short(url: str, site: Path) -> str:
    return url.replace(site.resolve().as_uri() + "/", "")


@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_fits_and_reads_well(browser: Any, site: Path, width: int) -> None:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    problems = []
    try:
        for url in _urls(site):
            page.goto(url)
            wait_for_charts(page)
            if "compare.html#" in url:
                page.wait_for_selector("#ab-result table", timeout=10_000)
            problems += [f"{_short(url, site)} @{width}px: {p}"
                         for p in page.evaluate(CHECK_JS, MIN_CHART_PX)]
    finally:
        context.close()
    assert problems == [], "\n".join(problems)


def test_without_javascript_nothing_dead_is_shown(browser: Any, site: Path) -> None:
    context = browser.new_context(viewport={"width": WIDTHS[0], "height": 900},
                                  java_script_enabled=False)
    page = context.new_page()
    problems = []
    try:
        for url in _urls(site):
            page.goto(url)
            found = page.evaluate(CHECK_JS, MIN_CHART_PX) + page.evaluate(NO_JS_JS)
            problems += [f"{_short(url, site)} (no JS): {p}" for p in found]
    finally:
        context.close()
    assert problems == [], "\n".join(problems)


PEAKS_JS = r"""() => Array.from(document.querySelectorAll('#runs-table tbody tr')).map((tr) => {
  const r = tr.children[8].getBoundingClientRect();
  return [r.left, r.right, tr.children[8].textContent.trim()];
})"""


@pytest.mark.parametrize("js", [True, False])
def test_index_shows_each_runs_peak_on_a_phone(browser: Any, site: Path, js: bool) -> None:
    """Each run's headline number (peak total tok/s) is on screen at 390 px, no sideways
    scroll needed: the index's rows are cards there (issue 21)."""
    context = browser.new_context(viewport={"width": WIDTHS[0], "height": 900},
                                  java_script_enabled=js)
    page = context.new_page()
    try:
        page.goto((site / "index.html").resolve().as_uri())
        peaks = page.evaluate(PEAKS_JS)
        assert peaks
        off = [p for p in peaks if not (0 <= p[0] and p[1] <= WIDTHS[0] and p[2])]
        assert off == [], off
    finally:
        context.close()
