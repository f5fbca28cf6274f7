"""The built site, read as files: inert run values, relative links that resolve,
downloads that match the pages, and pages light enough to load fast."""

from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from rundir import contract
from site_builder.glossary import MEASUREMENT_HEADERS, TERMS
from site_builder.publish import build_site
from site_builder.render import markdown
from tests.support.chromium import Node, parse_html, site_pages
from tests.support.synthetic_runs import PWN_SCRIPT, make_measured_run, make_sample_data


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    data = make_sample_data(root / "data")
    report = build_site(data, root / "site")
    assert report.errors == [] and len(report.published) == 4
    return root / "site"


def _doc(site: Path, rel: str) -> Node:
    return parse_html((site / rel).read_text(encoding="utf-8"))


def _xss_slug(site: Path) -> str:
    return next(p.name for p in (site / "runs").iterdir() if p.name.startswith("xss"))


# --------------------------------------------------------------------------
# escaping
# --------------------------------------------------------------------------

ALLOWED_SCRIPT_SRC = re.compile(r"^(\.\./)*(static/[\w.+-]+\.js|data/(index|explore)\.js)$")


def test_every_run_value_is_rendered_inert(site: Path) -> None:
    for rel in site_pages(site):
        html = (site / rel).read_text(encoding="utf-8")
        doc = parse_html(html)
        for node in doc.iter():
            for name, value in node.attrs.items():
                assert not name.startswith("on"), f"{rel}: <{node.tag} {name}=…>"
                v = value.strip().lower()
                assert not v.startswith(("javascript:", "data:text", "vbscript:")), (rel, value)
            if node.tag == "script":
                if "src" in node.attrs:
                    assert ALLOWED_SCRIPT_SRC.match(node.attrs["src"]), (rel, node.attrs)
                    assert not node.text().strip()
                else:
                    assert node.attrs.get("type") == "application/json", rel
                    assert "<" not in node.text(), rel  # can never close its element
            assert node.tag not in ("iframe", "object", "embed", "foreignobject", "img",
                                    "image", "base", "form") or node.attrs.get("id") in (
                "run-filters", "ab-form", "oppoint-form", "explore-form"), f"{rel}: <{node.tag}>"


def test_xss_run_shows_its_payloads_as_text(site: Path) -> None:
    slug = _xss_slug(site)
    doc = _doc(site, f"runs/{slug}/index.html")
    assert doc.find("h1").text().startswith(f"Evil{PWN_SCRIPT} on GPU{PWN_SCRIPT}")
    assert PWN_SCRIPT in doc.find("code", id="launch-command").text()
    assert "mallory<img" in doc.find("p", "byline").text()
    notes = doc.find("section", "run-notes")
    # Markdown: raw HTML is text, unsafe links are not links, images are not loaded.
    assert PWN_SCRIPT in notes.text()
    hrefs = [a.attrs.get("href", "") for a in notes.find_all("a")]
    assert hrefs == ["https://tracker.example/pixel.png", "https://example.com/x"]
    assert all(a.attrs.get("rel") == "nofollow noopener noreferrer" for a in notes.find_all("a"))
    assert notes.find_all("h3")  # headings moved under the page's own
    cell = _doc(site, f"runs/{slug}/cells/decode-1024-2.html")
    assert "boom <img" in cell.find("span", "reason").text()
    assert PWN_SCRIPT in cell.find("ul", "errors").text()


def test_data_scripts_cannot_break_out(site: Path) -> None:
    for rel in ["data/index.js", "data/explore.js",
                *[f"runs/{p.name}/data.js" for p in (site / "runs").iterdir()]]:
        text = (site / rel).read_text(encoding="utf-8")
        assert "<" not in text and ">" not in text, rel
    index = (site / "data" / "index.js").read_text(encoding="utf-8")
    assert index.startswith("window.SPEED_MATRIX_INDEX = {")
    payload = json.loads(index.removeprefix("window.SPEED_MATRIX_INDEX = ").rstrip(";\n"))
    assert any(PWN_SCRIPT in r["title"] for r in payload["runs"])  # escaped, not dropped


def test_markdown_is_sanitised() -> None:
    html = str(markdown("<b>x</b> [a](javascript:alert(1)) [b](JAVASCRIPT:alert(1)) "
                        "[c](vbscript:x) [d](file:///etc/passwd) [e](./ok.html) "
                        "![i](https://x.example/p.png) <https://auto.example>"))
    assert "<b>" not in html and "&lt;b&gt;" in html
    assert 'href="javascript' not in html.lower() and "vbscript" not in html.split("[c]")[0]
    assert 'href="file:' not in html and 'href="./ok.html"' in html
    assert "<img" not in html and 'href="https://x.example/p.png"' in html
    assert 'href="https://auto.example"' in html


# --------------------------------------------------------------------------
# links
# --------------------------------------------------------------------------


def _targets(site: Path) -> list[tuple[str, str, str]]:
    """(page, attribute, value) of every href/src on every page."""
    out = []
    for rel in site_pages(site):
        for node in _doc(site, rel).iter():
            for attr in ("href", "src"):
                if attr in node.attrs:
                    out.append((rel, attr, node.attrs[attr]))
    return out


def test_links_are_relative_and_resolve(site: Path) -> None:
    ids: dict[str, set[str]] = {}
    checked = 0
    for rel, attr, value in _targets(site):
        parts = urlsplit(value)
        if parts.scheme in ("http", "https", "mailto"):
            # Only links a run's notes wrote may leave the site, and never as a resource.
            assert attr == "href", (rel, value)
            continue
        assert not parts.scheme and not parts.netloc, (rel, value)
        assert not value.startswith("/"), f"{rel}: root-relative link {value}"
        target = (site / rel).parent / unquote(parts.path) if parts.path else site / rel
        target = target.resolve()
        assert target.is_file(), f"{rel}: {value} -> missing {target}"
        assert site.resolve() in target.parents, f"{rel}: {value} leaves the site"
        if parts.fragment and target.suffix == ".html" and "=" not in parts.fragment:
            key = str(target)
            if key not in ids:
                ids[key] = {n.attrs["id"] for n in parse_html(target.read_text("utf-8")).iter()
                            if "id" in n.attrs}
            assert parts.fragment in ids[key], f"{rel}: {value} -> no #{parts.fragment}"
        checked += 1
    assert checked > 200


def test_table_headers_link_to_their_glossary_terms(site: Path) -> None:
    doc = _doc(site, "runs/synth-a/index.html")
    heads = doc.find("table", "measurements").find("thead").find_all("a")
    # the table's declared headers (the published ones are pinned by the seed pages' tests)
    assert [a.text() for a in heads] == MEASUREMENT_HEADERS
    anchors = {t.anchor for t in TERMS}
    assert all(a.attrs["href"].split("#")[1] in anchors for a in heads)
    glossary = _doc(site, "methodology.html").find("dl", "glossary")
    assert {n.attrs["id"] for n in glossary.find_all("dt")} == anchors


# --------------------------------------------------------------------------
# pages
# --------------------------------------------------------------------------


def test_run_page_of_a_measured_run(site: Path) -> None:
    doc = _doc(site, "runs/synth-a/index.html")
    assert doc.find("h1").text() == "Synth-4B on RTX PRO 6000 Blackwell Server Edition 96GB"
    assert doc.find("p", "byline").text() == "by @tester · Measured Nov 29, 2025, 07:06 UTC"
    rows = doc.find("table", "matrix").rows()
    assert rows[0] == ["Context", "1", "2", "4", "8"]
    assert rows[1][4].endswith("Requests queued" + rows[1][4].split("Requests queued")[1])
    assert "*" in rows[1][3]  # client-bound mark
    assert rows[2][4] == "Looped"
    assert rows[3][3:] == ["Over capacity", "Over capacity"]
    notes = " ".join(p.text() for p in doc.find("section", id="decode").find_all("p", "note"))
    for word in ("Requests queued:", "Over capacity:", "Looped:", "Client-bound",
                 "TTFT is measured after the benchmark warms"):
        assert word in notes
    # Each measured cell links to its drill-down page, which has three charts.
    links = [a.attrs["href"] for a in doc.find("table", "matrix").find("tbody").find_all("a")]
    assert "cells/decode-1024-8.html" in links and "cells/decode-4096-8.html" in links
    cell = _doc(site, "runs/synth-a/cells/decode-1024-8.html")
    assert cell.find("h1").text() == "1K context × 8 requests at once"
    assert [f.attrs["id"] for f in cell.find_all("figure", "chart")] == [
        "chart-ttft", "chart-ttft-cdf", "chart-tbt", "chart-tbt-cdf", "chart-timeline"]
    assert all(f.find("div", "chart-fallback").find_all("svg") for f in cell.find_all("figure"))
    assert [f.attrs["id"] for f in doc.find_all("figure", "chart")] == [
        "chart-prefill", "chart-decode", "chart-tradeoff", "chart-heatmap"]
    copy = doc.find("button", "copy")
    assert copy.attrs["data-copy"] == "launch-command"


def test_index_model_compare_and_downloads(site: Path) -> None:
    index = _doc(site, "index.html")
    table = index.find("table", id="runs-table")
    heads = [th.text() for th in table.find("thead").find_all("th")]
    assert heads == ["Model", "GPU", "GPUs", "Engine", "Version", "Quantization", "Measured",
                     "Single stream tok/s", "Peak total tok/s", "Prefill tok/s at 8K"]
    rows = {r[0]: r for r in table.find("tbody").rows()}
    qwen = rows["Qwen3.5-4B imported"]
    # The seed's own numbers; its peak (8K × 128) is a Requests-queued cell, marked so.
    assert qwen[7:] == ["203.9", "2,777.1 Requests queued", "32.7K"]
    engines = [o.attrs["value"] for o in index.find("select", name="engine").find_all("option")]
    assert engines[0] == "" and {"sglang", "vllm"} <= set(engines) and len(engines) == 4
    model = _doc(site, "models/synth-4b.html")
    assert [m.find("h3").text() for m in model.find_all("section", "mini-matrix")] == [
        "H200 SXM 141GB ×8 · sglang 0.5.2 · FP8",
        "RTX PRO 6000 Blackwell Server Edition 96GB · vllm 0.11.0 · BF16"]
    assert model.find_all("figure", "chart")
    compare = _doc(site, "compare.html")
    assert len(compare.find("select", id="ab-a").find_all("option")) == 4
    downloads = _doc(site, "downloads.html")
    assert "index.json" in [a.attrs["href"] for a in downloads.find_all("a")]


def test_downloads_carry_the_page_numbers(site: Path, tmp_path: Path) -> None:
    rows = list(csv.DictReader((site / "runs/synth-a/cells.csv").open(encoding="utf-8")))
    data = json.loads((site / "runs/synth-a/cells.json").read_text(encoding="utf-8"))
    assert len(rows) == len(data["cells"]) == 3 + 12
    queued = next(r for r in rows if r["status"] == contract.REQUESTS_QUEUED)
    assert queued["context"] == "1024" and queued["concurrency"] == "8"
    assert float(queued["total_tok_s"]) > 0 and queued["status_label"] == "Requests queued"
    assert data["run"]["info"]["run_id"] == "synth-a"
    index = json.loads((site / "index.json").read_text(encoding="utf-8"))
    assert sorted(r["slug"] for r in index["runs"])[:3] == ["qwen-seed", "synth-a", "synth-b"]
    assert len(list(csv.DictReader((site / "index.csv").open(encoding="utf-8")))) == 4
    # Raw files are byte-for-byte copies; imported runs have no requests.parquet.
    raw = sorted(p.name for p in (site / "runs/synth-a/raw").iterdir())
    assert raw == [contract.CELLS_FILE, contract.REQUESTS_FILE, contract.RUN_YAML,
                   contract.SERVER_METRICS_FILE]
    assert not (site / "runs/qwen-seed/raw" / contract.REQUESTS_FILE).exists()


def test_run_pages_are_light(site: Path) -> None:
    for slug in ("synth-a", "qwen-seed"):
        html = (site / "runs" / slug / "index.html").read_bytes()
        assert len(gzip.compress(html, 9)) < 60_000, slug
    bundles = list((site / "static").glob("vega-*_vega-lite-*_vega-embed-*.js"))
    assert len(bundles) == 1


def test_methodology_comes_from_docs_with_raw_html_disabled(tmp_path: Path) -> None:
    make_measured_run(tmp_path / "data" / "r", run_id="r", contexts=[1024], concurrency=[1],
                      duration_s=0.3)
    md = tmp_path / "methodology.md"
    md.write_text(f"# How we measure\n\n{PWN_SCRIPT}\n\n## TTFT\n\nFirst token.\n")
    build_site(tmp_path / "data", tmp_path / "site", methodology=md)
    doc = _doc(tmp_path / "site", "methodology.html")
    article = doc.find("article")
    assert article.find("h1").text() == "How we measure"
    assert article.find("h2", id="ttft").text() == "TTFT"
    assert article.find("dt", id="term-ttft").text() == "TTFT"
    assert PWN_SCRIPT in article.text() and not article.find_all("script")
