"""The metric table is the one source of a metric's header, format and direction
(issue 19, item 1): the run page's All measurements, the cell pages, the chart
tooltips, the glossary, the downloads and the compare page all read it.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from rundir import contract, tails
from site_builder import chartkit, formats, glossary, metrictable, pages
from site_builder.aggregate import CellResult
from site_builder.render import Renderer, templates_dir
from site_builder.runrows import COMPARE_FIELDS, COMPARE_TEXT_FIELDS
from tests.support.chromium import parse_html

DECODE_CELL = CellResult(phase=contract.DECODE, context=8192, concurrency=16,
                         status=contract.VALID, total_tok_s=12_345.67, per_request_tok_s=81.25,
                         ttft_ms=4.84, tbt_ms=12.34, avg_active=15.96, completed=1648,
                         output_tokens=370_401, measured_s=30.04)
# DECODE_CELL's figures as All measurements prints them, by column header.
SAMPLE_ROW = {"Total tok/s": "12.3K", "Per request tok/s": "81.3", "TTFT": "4.8 ms",
              "Time between tokens": "12.3 ms", "Average active requests": "16.0",
              "Completed requests": "1,648", "Output tokens": "370,401", "Measured for": "30.0 s"}
PREFILL_CELL = CellResult(phase=contract.PREFILL, context=8192, concurrency=1,
                          status=contract.VALID, total_tok_s=8820.44, ttft_ms=928.7, completed=5)


def test_every_record_names_a_real_figure_and_a_glossary_entry() -> None:
    fields = set(CellResult.__dataclass_fields__)
    terms = {t.key: t for t in glossary.TERMS}
    for m in metrictable.TABLE:  # a field, or a property computed from them (e2e_ms)
        assert m.key in fields or isinstance(getattr(CellResult, m.key, None), property), m.key
        assert m.better in ("higher", "lower", None)
        assert set(m.phases) <= set(contract.PHASES) and set(m.on_cell) <= set(m.phases)
        if m.term:  # its glossary entry is its name and hover text
            assert (terms[m.term].name, terms[m.term].short) == (m.header, m.hint), m.term


def test_all_measurements_columns_are_the_tables() -> None:
    assert glossary.MEASUREMENT_HEADERS[4:] == [m.header for m in metrictable.MEASURED]
    assert glossary.ENERGY_HEADERS[:-1] == [m.header for m in metrictable.ENERGY]
    r = Renderer(globals_={"measured_metrics": metrictable.MEASURED,
                           "energy_metrics": metrictable.ENERGY, "headers": [],
                           "energy_headers": [], "phase_labels": glossary.PHASE_LABELS,
                           "tail_levels": None})  # the published layout: no percentile data
    run = type("Run", (), {"measurement_rows": [DECODE_CELL], "not_checked": False,
                           "agg": type("A", (), {"telemetry": False})})
    html = r.env.get_template("_partials/measurements.html").render(run=run, root="", links=False)
    cells = [td.text() for td in parse_html(html).find("tbody").find_all("td")]
    assert len(cells) == len(glossary.MEASUREMENT_HEADERS)
    # by header, so a new metric's column (wherever it stands) leaves these as they are
    shown = dict(zip(glossary.MEASUREMENT_HEADERS[4:], cells[4:], strict=True))
    assert {h: shown[h] for h in SAMPLE_ROW} == SAMPLE_ROW
    # a record's format is what the column prints
    fast = replace(metrictable.MEASURED[0], fmt=lambda v: "fmt")
    html = r.env.get_template("_partials/measurements.html").render(
        run=run, root="", links=False, measured_metrics=[fast])
    assert [td.text() for td in parse_html(html).find("tbody").find_all("td")][4:] == ["fmt"]


def test_every_figure_on_the_pages_is_downloaded_once() -> None:
    """A column of All measurements is a column of the downloads (the measured ones in
    every run's, the energy ones in telemetry runs'), and every download column is a
    cell's figure or field, named once."""
    for m in metrictable.MEASURED:
        assert metrictable.downloaded(m) == "cells", m.key
    for m in metrictable.ENERGY:
        assert metrictable.downloaded(m) == "energy", m.key
    names = [c for cols in metrictable.DOWNLOAD_COLUMNS.values() for c in cols]
    assert len(names) == len(set(names))
    fields = set(CellResult.__dataclass_fields__)
    assert [c for c in names if c not in fields] == []


def test_page_order_and_download_order_are_declared_apart(monkeypatch) -> None:
    """Where a record stands in TABLE (its place on the pages) does not move its
    download column: a new metric can sit beside its kin on the page while its
    column goes at the end of the downloads' group, which tools read by position."""
    published = metrictable.download_columns("cells"), metrictable.download_columns("energy")
    monkeypatch.setattr(metrictable, "TABLE", tuple(reversed(metrictable.TABLE)))
    assert (metrictable.download_columns("cells"), metrictable.download_columns("energy")) == (
        published)


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
                                                      "compare_js", "site_js", "address_js",
                                                      "rules_js")},
                           "version": "0", "nav": "", "cache_note": ""})
    doc = parse_html(r.render("compare.html", depth=0, groups=[], pick=("", ""),
                              metrics=pages.COMPARE_METRICS, tool_groups=[]))
    assert json.loads(doc.find("script", id="metric-rules").text()) == rules


@pytest.mark.parametrize("script", ["compare.js", "explore.js", "compare_traffic.js"])
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


def test_end_to_end_latency_is_a_decode_latency_published_by_its_percentiles() -> None:
    (e2e,) = [m for m in metrictable.TABLE if m.key == "e2e_ms"]
    assert (e2e.header, e2e.better, e2e.phases, e2e.fmt) == (
        "End-to-end latency", "lower", (contract.DECODE,), formats.ttft)
    # the published layout stays: no All measurements column, tooltip, comparison or download
    assert e2e not in [*metrictable.MEASURED, *metrictable.TOOLTIP, *metrictable.COMPARED]
    assert metrictable.downloaded(e2e) is None
    cell = replace(DECODE_CELL, tails={"e2e_ms_p50": 1234.4, "e2e_ms_p99": 2500.0})
    assert e2e.cell_text(cell) == e2e.tail_text(cell, "p50") == "1,234 ms"
    assert e2e.tail_text(cell, "p99") == "2,500 ms" and e2e.tail_text(cell, "p90") == "—"


def test_the_metrics_with_tails_are_the_tails_module_s() -> None:
    assert [m.key for m in metrictable.TAILED] == [
        "per_request_tok_s", "ttft_ms", "tbt_ms", "e2e_ms"]
    assert {m.key for m in metrictable.TAILED} == set(tails.BY_KEY)
    assert all(m.tail_metric is tails.BY_KEY[m.key] for m in metrictable.TAILED)
    assert next(m for m in metrictable.TABLE if m.key == "avg_active").tail_metric is None
    ttft = next(m for m in metrictable.TAILED if m.key == "ttft_ms")
    cell = replace(DECODE_CELL, tails={"ttft_ms_p99": 48.25})
    assert ttft.tail_text(cell, "p50") == "4.8 ms" and ttft.tail_text(cell, "p99") == "48 ms"


def test_the_glossary_lists_every_metric_term_from_the_table_in_its_order() -> None:
    termed = [m.term for m in metrictable.TABLE if m.term]
    metric_terms = [t.key for t in glossary.TERMS if t.key in termed]
    assert sorted(metric_terms) == sorted(set(termed))  # each once, none by hand
    assert metric_terms == [m.term for m in (*metrictable.glossary_metrics(),
                                             *metrictable.glossary_metrics(energy=True))]
    # a decode cell's figures first (the table's order), prefill's own after; energy last
    # (these in this order; a new metric's term may stand between them)
    decode = ["total-tok-s", "per-request-tok-s", "ttft", "time-between-tokens",
              "end-to-end-latency", "average-active-requests"]
    assert [t for t in metric_terms if t in decode] == decode
    assert metric_terms.index("average-active-requests") < metric_terms.index("prompt-tok-s")
    assert metric_terms[-3:] == ["prompt-tok-s", "j-per-token", "avg-w"]
    assert {"percentile-levels", "end-to-end-latency"} <= {t.key for t in glossary.TERMS}
