"""The run page of an imported run shows a published page's labels and numbers exactly.

The run is built from the seed's own numbers (parsed minimally from its
text); the page we render must give back the seed's strings cell by cell:
title, summary, fact blocks, launch command, prefill list, decode matrix,
All measurements table and the notes under the tables.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rundir.words import MISSING
from site_builder import metrictable
from site_builder.publish import build_site
from tests.support.chromium import Node, parse_html
from tests.support.synthetic_runs import QWEN_SEED_TEXT, make_seed_run

# The published pages, kept verbatim beside the importer's tests.
SEEDS = Path(__file__).parents[1] / "data" / "import" / "seeds"
OTHER_SEEDS = ["kimi-k2.6-int4-h200x8.txt", "kimi-k2.6-nvfp4-rtxpro6000x8.txt"]


def _build(tmp: Path, text: str) -> tuple[Node, list[str]]:
    make_seed_run(tmp / "data" / "seed", text, run_id="seed")
    report = build_site(tmp / "data", tmp / "site")
    assert report.errors == [] and report.published == ["seed"]
    html = (tmp / "site" / "runs" / "seed" / "index.html").read_text(encoding="utf-8")
    return parse_html(html), text.splitlines()


def _seed_table(lines: list[str], header_prefix: str) -> list[list[str]]:
    """Rows of a markdown-ish table in the seed text (header first, separator dropped)."""
    start = next(i for i, x in enumerate(lines) if header_prefix in x)
    header = lines[start][lines[start].index("| "):]
    rows = [header]
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]


def _seed_block(lines: list[str], start: str, stop: str) -> list[tuple[str, str]]:
    i, j = lines.index(start) + 1, lines.index(stop)
    items = [x[2:] if x.startswith("- ") else x for x in lines[i:j]]
    return list(zip(items[::2], items[1::2], strict=True))


def _facts(doc: Node, heading: str) -> list[tuple[str, str]]:
    block = doc.find("section", "facts-block", **{"aria-labelledby": f"facts-{heading.lower()}"})
    return [(d.find("dt").text(), d.find("dd").text()) for d in block.find("dl").find_all("div")]


def assert_seed_columns(ours: list[list[str]], seed: list[list[str]]) -> None:
    """Our All measurements table (header row first) gives back every column of the
    published one exactly: each seed header once, in the seed's order, every row's
    text equal. Between or after them it may have columns the page was published
    without, but only a metric table's column (a metric added since) and only empty
    (MISSING) on every row: the published page has no such figure, so a new metric
    may add a column to an imported page, never a number, and never change one."""
    header, seed_header = ours[0], seed[0]
    missing = [h for h in seed_header if header.count(h) != 1]
    assert not missing, f"published columns missing or doubled: {missing}"
    where = [header.index(h) for h in seed_header]
    assert where == sorted(where), f"published columns out of their order: {header}"
    assert len(ours) == len(seed), (len(ours), len(seed))
    for got, want in zip(ours[1:], seed[1:], strict=True):
        assert [got[i] for i in where] == want
    metric_headers = {m.header for m in metrictable.TABLE}
    for i in sorted(set(range(len(header))) - set(where)):
        assert header[i] in metric_headers, f"column {header[i]!r}: not a metric's"
        values = {row[i] for row in ours[1:]}
        assert values <= {MISSING}, f"column {header[i]!r} adds figures: {sorted(values)[:3]}"


def check_page_matches_seed(doc: Node, lines: list[str]) -> None:
    assert doc.find("p", "kicker").text() == lines[0] == "Speed test matrix"
    assert doc.find("h1").text() == lines[1]

    # Summary: the browser's text glues "BF16" and "6 contexts"; ours has a separator.
    engine = doc.find("span", "engine-line").text()
    rest = doc.find("span", "matrix-line").text() + " · " + doc.find("span", "prefill-line").text()
    assert lines[2] == engine + rest

    for heading, stop in (("Hardware", "Engine"), ("Engine", "Run"), ("Run", "Launch command")):
        assert _facts(doc, heading) == _seed_block(lines, heading, stop), heading

    text = "\n".join(lines)
    launch = text.split("Launch command\n", 1)[1].split("\nprompt tok/s", 1)[0]
    assert doc.find("code", id="launch-command").text() == launch.removesuffix("Prefill").strip()

    # Prefill list: "8K context" "32.7K" "250 ms TTFT", glued as the browser saved it.
    start = next(i for i, x in enumerate(lines) if x.startswith("prompt tok/s by context length"))
    seed_prefill = [lines[start].removeprefix("prompt tok/s by context length")]
    seed_prefill += lines[start + 1:lines.index("Sustained decode")]
    ours = doc.find("table", "prefill").find("tbody").rows()
    assert ["".join(r) for r in ours] == seed_prefill
    prefill_sub = doc.find("section", id="prefill").find("p", "sub").text()
    assert prefill_sub == "prompt tok/s by context length"

    # Sustained decode matrix, cell by cell.
    decode = doc.find("section", id="decode")
    assert decode.find("p", "sub").text() == (
        "total tok/s · rows are context length, columns are simultaneous requests")
    seed_matrix = _seed_table(lines, "| Context |")
    assert decode.find("table", "matrix").rows() == seed_matrix

    # Notes under the matrix, as the seed words them.
    notes = [p.text() for p in decode.find_all("p", "note")]
    i = lines.index(next(x for x in lines if x.startswith("| 251K |") or x.startswith("| 256K |")))
    seed_notes = []
    for line in lines[i + 1:]:
        if line == "All measurements":
            break
        seed_notes.append(line)
    assert notes == seed_notes

    # All measurements: the seed's exact headers, then every row.
    meas = doc.find("section", id="measurements")
    assert meas.find("p", "sub").text() == (
        "Latencies are medians. Total tok/s is output across all simultaneous requests.")
    assert_seed_columns(meas.find("table", "measurements").rows(),
                        _seed_table(lines, "| Phase | Context |"))
    assert [p.text() for p in meas.find_all("p", "note")] == [lines[-1]]


def test_qwen_seed_run_page_matches_cell_by_cell(tmp_path: Path) -> None:
    doc, lines = _build(tmp_path, QWEN_SEED_TEXT)
    check_page_matches_seed(doc, lines)
    # An imported run says so, and offers no per-cell pages.
    assert "imported from a published page" in doc.find("p", "imported-note").text()
    assert not doc.find("table", "matrix").find("tbody").find_all("a")


def test_embedded_seed_is_the_published_one() -> None:
    path = SEEDS / "qwen3.5-4b-bf16-rtxpro6000.txt"
    assert path.read_text(encoding="utf-8") == QWEN_SEED_TEXT


@pytest.mark.parametrize("name", OTHER_SEEDS)
def test_other_seed_pages_match(tmp_path: Path, name: str) -> None:
    path = SEEDS / name
    doc, lines = _build(tmp_path, path.read_text(encoding="utf-8"))
    check_page_matches_seed(doc, lines)
