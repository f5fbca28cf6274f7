"""A published page imported with ``bench import`` and built shows what the
original showed, row for row (issue 10, "Fidelity to published pages").

The fixture ``tests/data/import/published-1m-fidelity.txt`` is a page of the
seeds' family with what the three seeds lack: contexts of 1000K and above,
Looped rows published with ``0`` completed requests and output tokens, an
Over capacity row published with values, the status legend in the published
order and wording, and a byline with a label and a date.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from click.testing import CliRunner

from rundir.words import STATUS_NOTES, context_label
from site_builder import formats
from site_builder.glossary import TERM_BY_NAME, definitions, methodology_path
from site_builder.publish import build_site
from tests.site.test_site_seed import _seed_table, assert_seed_columns
from tests.support.chromium import Node, parse_html

FIXTURE = Path(__file__).parents[1] / "data" / "import" / "published-1m-fidelity.txt"
ERROR_NOTE = STATUS_NOTES["error"]


def _import_and_build(tmp: Path) -> tuple[Node, Path, list[str]]:
    from bench.cli import main

    result = CliRunner().invoke(main, ["import", str(FIXTURE), "--out", str(tmp / "data")])
    assert result.exit_code == 0, result.output
    report = build_site(tmp / "data", tmp / "site")
    assert report.errors == [] and len(report.published) == 1
    run_dir = next((tmp / "site" / "runs").iterdir())
    html = (run_dir / "index.html").read_text(encoding="utf-8")
    return parse_html(html), run_dir, FIXTURE.read_text(encoding="utf-8").splitlines()


def test_imported_page_matches_the_published_one_row_for_row(tmp_path: Path) -> None:
    doc, _run, lines = _import_and_build(tmp_path)
    # Summary line: contexts 8K–1019K and prefill at ... 1019K, 1024K, no separators.
    engine = doc.find("span", "engine-line").text()
    rest = doc.find("span", "matrix-line").text() + " · " + doc.find("span", "prefill-line").text()
    assert engine + rest == lines[2]
    assert "1019K" in lines[2] and "1024K" in lines[2]

    # Byline: the label stays where the page had it, the date as published.
    assert doc.find("p", "byline").text() == lines[3]
    assert lines[3] == "by @qwen.fan dev import · Measured Sep 27, 2026, 19:59 UTC"
    assert "Header / line" not in doc.text()
    assert doc.text().count("dev import") == 1  # in the byline only, not in the notes

    # Prefill list, glued as the browser saved it.
    start = next(i for i, x in enumerate(lines) if x.startswith("prompt tok/s by context length"))
    want = [lines[start].removeprefix("prompt tok/s by context length")]
    want += lines[start + 1:lines.index("Sustained decode")]
    assert ["".join(r) for r in doc.find("table", "prefill").find("tbody").rows()] == want

    # Matrix, cell by cell (the 1019K row: a Looped cell with numbers, one without).
    decode = doc.find("section", id="decode")
    assert decode.find("table", "matrix").rows() == _seed_table(lines, "| Context |")

    # All measurements, row for row: Looped zeros, Over capacity with values.
    meas = doc.find("section", id="measurements")
    assert_seed_columns(meas.find("table", "measurements").rows(),
                        _seed_table(lines, "| Phase | Context |"))

    # The legend: the published order and wording (our Error note follows it:
    # the published wording of an Error note is not in the fixture).
    legend = lines[-1]
    for section in (decode, meas):
        notes = [p.text() for p in section.find_all("p", "status-notes")]
        assert notes == [legend + " " + ERROR_NOTE]


def test_downloads_carry_the_published_values(tmp_path: Path) -> None:
    _doc, run, _lines = _import_and_build(tmp_path)
    with (run / "cells.csv").open(encoding="utf-8", newline="") as fh:
        rows = {(r["phase"], r["context_label"], r["concurrency"]): r for r in csv.DictReader(fh)}
    over = rows[("decode", "1019K", "8")]
    assert (over["status"], over["avg_active"], over["completed"], over["output_tokens"],
            over["measured_s"]) == ("over_capacity", "1.0", "0", "0", "30.0")
    looped = rows[("decode", "1019K", "2")]
    assert (looped["completed"], looped["output_tokens"], looped["total_tok_s"]) == ("0", "0", "")
    assert ("prefill", "1024K", "1") in rows

    cells = json.loads((run / "cells.json").read_text(encoding="utf-8"))["cells"]
    by_key = {(x["phase"], x["context_label"], x["concurrency"]): x for x in cells}
    over_json = by_key[("decode", "1019K", 8)]
    assert (over_json["avg_active"], over_json["completed"], over_json["output_tokens"],
            over_json["measured_s"]) == (1.0, 0, 0, 30.0)
    assert by_key[("decode", "1019K", 2)]["completed"] == 0
    # Contexts 1000K and above have no separator anywhere in the downloads.
    assert "1,019K" not in (run / "cells.csv").read_text(encoding="utf-8")
    assert "1,0" not in json.dumps([x["context_label"] for x in cells])


def test_context_labels_have_no_thousands_separator() -> None:
    assert context_label(1019 * 1024) == "1019K"
    assert context_label(1024 * 1024) == "1024K"
    assert context_label(10_000 * 1024) == "10000K"
    assert context_label(257_984) == "251K"
    assert context_label(1023) == "1023"


def test_published_date_format() -> None:
    assert formats.published_datetime("2026-09-27T19:59:00Z") == "Sep 27, 2026, 19:59 UTC"
    assert formats.published_datetime("2026-03-03T14:05:00+00:00") == "Mar 3, 2026, 14:05 UTC"
    assert formats.published_datetime("2026-03-03") == "Mar 3, 2026 UTC"
    assert formats.published_datetime(None) == ""


def test_average_active_has_one_definition_the_methodology_s() -> None:
    term = TERM_BY_NAME["Average active requests"]
    doc = definitions(methodology_path().read_text(encoding="utf-8"))
    assert term.long == doc["average-active-requests"]
    for text in (term.short, term.long):
        assert "running gauge" not in text and "running-requests gauge" not in text
    assert "minus the ones waiting" in term.long and "waiting-requests gauge" in term.long
    assert "receiving tokens" in term.long
