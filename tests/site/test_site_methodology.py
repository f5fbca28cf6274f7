"""The methodology page renders as its author wrote it: anchors without raw HTML, and no
line turned into something else (a sentence starting with `+` once became a bullet)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from site_builder.render import _DOC_MD, markdown
from tests.conftest import REPO, run_cli
from tests.support.chromium import parse_html, site_pages

DOCS = [REPO / "docs" / "methodology.md"]

# Every anchor docs/methodology.md has offered (as `<a id>` before, `{#id}` or a heading now).
ANCHORS = {
    "largest-context", "over-capacity", "prefill", "tokens", "output-tokens", "total-tok-s",
    "per-request-tok-s", "time-between-tokens", "ttft", "average-active-requests",
    "completed-requests", "measured-for", "client-bound", "gauge-coverage", "valid",
    "requests-queued", "looped", "error", "reuse-off-target", "reuse-unverified",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled data built as a user would: `build-site --data data --out <tmp>`."""
    out = tmp_path_factory.mktemp("site") / "site"
    res = run_cli("build-site", "--data", str(REPO / "data"), "--out", str(out), "--quiet",
                  cwd=REPO)
    assert res.returncode == 0, res.stderr
    return out


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.parent.name)
def test_every_block_is_what_its_source_line_says(path: Path) -> None:
    """A block starts after a blank line: nothing interrupts a paragraph to open a list,
    heading or quote, there are no setext headings and no nested lists."""
    lines = path.read_text(encoding="utf-8").splitlines()
    tokens = _DOC_MD.parse(path.read_text(encoding="utf-8"))
    for tok in tokens:
        if tok.type == "heading_open":
            assert tok.markup.startswith("#"), f"{path.name}:{tok.map[0] + 1}: setext heading"
        if tok.type in ("bullet_list_open", "ordered_list_open"):
            assert tok.level == 0, f"{path.name}:{tok.map[0] + 1}: list inside a block"
        if tok.level == 0 and tok.nesting == 1 and tok.map and tok.map[0] > 0:
            before = lines[tok.map[0] - 1]
            assert not before.strip(), (
                f"{path.name}:{tok.map[0] + 1}: {tok.type} interrupts the line above: "
                f"{lines[tok.map[0]]!r}")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.parent.name)
def test_no_markup_is_left_as_text(path: Path) -> None:
    html = str(markdown(path.read_text(encoding="utf-8"), notes=False))
    assert "&lt;a " not in html and "{#" not in html


def test_block_ids_are_for_documents_only() -> None:
    doc = str(markdown("## Prefill\n\n{#prefill}Text.\n\n- {#a}**A**: x\n- {#a}b\n",
                       notes=False))
    assert '<p id="prefill">Text.</p>' in doc and '<h2 id="prefill-2">' in doc
    assert '<li id="a"><strong>A</strong>: x</li>' in doc
    assert "<li>{#a}b</li>" in doc  # a repeated id stays visible text, never a second id
    note = str(markdown("{#valid}Mine.\n"))
    assert "id=" not in note and "{#valid}Mine." in note  # run notes cannot place ids


def test_methodology_page_renders_as_written(site: Path) -> None:
    for rel in site_pages(site):
        html = (site / rel).read_text(encoding="utf-8")
        assert "&lt;a id=" not in html and "<a id=" not in parse_html(html).text(), rel
    doc = parse_html((site / "methodology.html").read_text(encoding="utf-8"))
    article = doc.find("article")
    ids = [n.attrs["id"] for n in doc.iter() if "id" in n.attrs]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert ANCHORS <= set(ids), ANCHORS - set(ids)
    assert "{#" not in article.text()
    for li in article.find_all("li"):
        assert not li.text().lstrip().startswith("max output"), li.text()[:80]
    fits = article.find("p", id="largest-context").text()
    assert "fits when context + max output + 64 ≤ the model's max length" in " ".join(fits.split())


def test_every_link_to_the_methodology_page_hits_an_id(site: Path) -> None:
    page = parse_html((site / "methodology.html").read_text(encoding="utf-8"))
    present = {n.attrs["id"] for n in page.iter() if "id" in n.attrs}
    linked: set[str] = set()
    for rel in site_pages(site):
        for node in parse_html((site / rel).read_text(encoding="utf-8")).iter():
            parts = urlsplit(node.attrs.get("href", ""))
            if parts.fragment and re.search(r"(^|/)methodology\.html$", parts.path):
                linked.add(parts.fragment)
            elif parts.fragment and not parts.path and rel == "methodology.html":
                linked.add(parts.fragment)
    assert linked, "no page links to the methodology page's entries"
    assert linked <= present, sorted(linked - present)
