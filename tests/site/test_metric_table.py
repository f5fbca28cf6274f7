"""The metric table is the one source of a metric's header, format and direction
(issue 19, item 1): the run page's All measurements, the cell pages, the chart
tooltips, the glossary, the downloads and the compare page all read it.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from rundir import contract
from site_builder import chartkit, glossary, metrictable, pages
from site_builder.aggregate import CellResult
from site_builder.render import Renderer, templates_dir
from site_builder.runrows import COMPARE_FIELDS, COMPARE_TEXT_FIELDS
from tests.support.chromium import parse_html

DECODE_CELL = CellResult(phase=contract.DECODE, context=8192, concurrency=16,
                         status=contract.VALID, total_tok_s=12_345.67, per_request_tok_s=81.25,
                         ttft_ms=4.84, tbt_ms=12.34, avg_active=15.96, completed=1648,
                         output_tokens=370_401, measured_s=30.04)
PREFILL_CELL = CellResult(phase=contract.PREFILL, context=8192, concurrency=1,
                          status=contract.VALID, total_tok_s=8820.44, ttft_ms=928.7, completed=5)


def test_every_record_names_a_real_figure_and_a_glossary_entry() -> None:
    fields = set(CellResult.__dataclass_fields__)
    terms = {t.key: t for t in glossary.TERMS}
    for m in metrictable.TABLE:
        assert m.key in fields, m.key
        assert m.better in ("higher", "lower", None)
        assert set(m.phases) <= set(contract.PHASES) and set(m.on_cell) <= set(m.phases)
        if m.term:  # its glossary entry is its name and hover text
            assert (terms[m.term].name, terms[m.term].short) == (m.header, m.hint), m.term


def test_all_measurements_columns_are_the_tables() -> None:
    assert glossary.MEASUREMENT_HEADERS[4:] == [m.header for m in metrictable.MEASURED]
    assert glossary.ENERGY_HEADERS[:-1] == [m.header for m in metrictable.ENERGY]
    r = Renderer(globals_={"measured_metrics": metrictable.MEASURED,
                           "energy_metrics": metrictable.ENERGY, "headers": [],
                           "energy_headers": [], "phase_labels": glossary.PHASE_LABELS})
    run = type("Run", (), {"measurement_rows": [DECODE_CELL], "agg": type("A", (), {"telemetry": False})})
    html = r.env.get_template("_partials/measurements.html").render(run=run, root="", links=False)
    cells = [td.text() for td in parse_html(html).find("tbody").find_all("td")]
    assert cells[4:] == ["12.3K", "81.3", "4.8 ms", "12.3 ms", "16.0", "1,648", "370,401", "30.0 s"]
    # a record's format is what the column prints
    fast = replace(metrictable.MEASURED[0], fmt=lambda v: "fmt")
    html = r.env.get_template("_partials/measurements.html").render(
        run=run, root="", links=False, measured_metrics=[fast])
    assert [td.text() for td in parse_html(html).find("tbody").find_all("td")][4:] == ["fmt"]


def test_cell_page_figures_and_tooltips_come_from_the_table() -> None:
    got = pages.Pages._cell_metrics(None, DECODE_CELL)  # type: ignore[arg-type]
    assert [h for h, _, _ in got] == [m.header for m in metrictable.on_cell_page(contract.DECODE)]
    assert got[2] == ("TTFT", "median over the requests", "4.8 ms")
    prefill = pages.Pages._cell_metrics(None, PREFILL_CELL)  # type: ignore[arg-type]
    assert prefill == [("Prompt tok/s", "median of the samples used", "8,820.4"),
                       ("TTFT", "median of the samples used", "929 ms"),
                       ("Completed requests", "cold samples used", "5")]
    row = chartkit.cell_rows([DECODE_CELL])[0]
    for m in metrictable.TOOLTIP:
        assert row[m.header] == m.cell_text(DECODE_CELL)


def test_compare_choices_and_script_rules_come_from_the_table() -> None:
    assert pages.COMPARE_METRICS == [(m.key, m.header, m.better) for m in metrictable.COMPARED]
    rules = metrictable.js_rules()
    assert rules["higher"] == {"total_tok_s": True, "per_request_tok_s": True, "ttft_ms": False,
                               "tbt_ms": False, "tok_s_per_kw": True}
    assert set(rules["prefill"]) == {m.key for m in metrictable.TABLE
                                     if contract.PREFILL in m.phases and m.prefill_words}
    # every compared metric has its raw and text column in the runs' data.js
    for m in metrictable.COMPARED:
        assert m.key in COMPARE_FIELDS and f"{m.key}_text" in COMPARE_TEXT_FIELDS
    r = Renderer(globals_={"assets": {k: k for k in ("css", "favicon", "vega", "explore_js",
                                                      "compare_js", "site_js")},
                           "version": "0", "nav": "", "cache_note": ""})
    doc = parse_html(r.render("compare.html", depth=0, runs=[], metrics=pages.COMPARE_METRICS))
    assert json.loads(doc.find("script", id="metric-rules").text()) == rules


@pytest.mark.parametrize("script", ["compare.js", "explore.js"])
def test_scripts_write_no_metric_direction_or_header(script: str) -> None:
    text = (templates_dir() / "static" / script).read_text("utf-8")
    assert not re.search(r"(?:total_tok_s|per_request_tok_s|ttft_ms|tbt_ms)\s*:\s*(?:true|false)", text)
    assert "cold TTFT" not in text and "prompt tok/s by" not in text



def test_listed_text_gives_prefill_its_whole_tok_s() -> None:
    total = next(m for m in metrictable.COMPARED if m.key == "total_tok_s")
    assert total.listed_text(PREFILL_CELL) == "8,820"
    assert total.listed_text(DECODE_CELL) == total.cell_text(DECODE_CELL) == "12.3K"
    ttft = next(m for m in metrictable.COMPARED if m.key == "ttft_ms")
    assert ttft.listed_text(PREFILL_CELL) == ttft.cell_text(PREFILL_CELL) == "929 ms"
