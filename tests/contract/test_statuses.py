"""The status table is the one source of a status's words, colours and rules (issue 19, item 2).

* Every contract status has a record; a missing one stops the table loading.
* A status has one colour on every page: the stylesheet's variable, the
  matrix/measurement rules that use it and the heatmap fill are the same.
* Text on each fill reads at WCAG AA.
* No template, stylesheet or script writes a status code: the pages' scripts
  get the statuses that carry numbers from the build.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from rundir import contract, statuses, words
from site_builder import chartkit, statusstyle
from site_builder.aggregate import NUMBER_STATUSES
from site_builder.render import Renderer, templates_dir
from tests.support.chromium import parse_html

MUTED = "#59636e"  # style.css --muted: the compare page's A/B texts on a cell's fill


def _luminance(hex_colour: str) -> float:
    def lin(v: int) -> float:
        s = v / 255
        return s / 12.92 if s <= 0.04045 else ((s + 0.055) / 1.055) ** 2.4
    r, g, b = (lin(int(hex_colour[i:i + 2], 16)) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _served_css() -> str:
    return statusstyle.static_bytes(templates_dir() / "static" / "style.css").decode("utf-8")


def _variables(css: str) -> dict[str, str]:
    return dict(re.findall(r"--([\w-]+):\s*(#[0-9a-f]{6})", css))


def test_every_contract_status_has_one_record() -> None:
    assert [s.code for s in statuses.TABLE] == sorted(contract.STATUSES,
                                                      key=[s.code for s in statuses.TABLE].index)
    assert set(statuses.BY_CODE) == set(contract.STATUSES)
    assert NUMBER_STATUSES == statuses.NUMBER_STATUSES == (
        contract.VALID, contract.REQUESTS_QUEUED, contract.REUSE_OFF_TARGET,
        contract.REUSE_UNVERIFIED, contract.LOAD_NOT_DELIVERED)
    # a site without traffic cells knows only the matrix's statuses (byte-identical builds)
    assert {s.code for s in statuses.page_table()} == set(contract.STATUSES) - {
        contract.REUSE_OFF_TARGET, contract.REUSE_UNVERIFIED, contract.LOAD_NOT_DELIVERED}
    assert statuses.page_table(traffic=True) == statuses.TABLE


def test_a_status_without_a_record_stops_the_table() -> None:
    short = tuple(s for s in statuses.TABLE if s.code != contract.LOOPED)
    with pytest.raises(LookupError, match="looped"):
        statuses.check(short, contract.STATUSES, statuses.HEATMAP_ORDER)
    with pytest.raises(LookupError, match="retried"):
        statuses.check(statuses.TABLE, (*contract.STATUSES, "retried"), statuses.HEATMAP_ORDER)
    wrong = tuple(dataclasses.replace(s, numbers=False) if s.code == contract.VALID else s
                  for s in statuses.TABLE)
    with pytest.raises(ValueError, match="valid"):
        statuses.check(wrong, contract.STATUSES, statuses.HEATMAP_ORDER)
    statuses.check(statuses.TABLE, contract.STATUSES, statuses.HEATMAP_ORDER)


def test_words_come_from_the_table() -> None:
    for s in statuses.TABLE:
        assert words.status_label(s.code) == s.label
        assert words.STATUS_NOTES.get(s.code) == s.note
    # the published legend order of the notes
    assert list(words.STATUS_NOTES)[:3] == [contract.REQUESTS_QUEUED, contract.LOOPED,
                                           contract.OVER_CAPACITY]


def test_each_status_has_one_colour_in_the_stylesheet_and_the_heatmap() -> None:
    css = _served_css()
    assert statusstyle.MARKER not in css
    found = _variables(css)
    for s in statuses.page_table():
        assert found[f"st-{s.code}"] == s.fill and found[f"st-{s.code}-ink"] == s.ink, s.code
        # its badge and table cells use its variable, no other colour
        assert f".badge.st-{s.code} {{ color: var(--st-{s.code}-ink);" in css
        if s.role != "measured":
            assert f"td.st-{s.code} {{ background: var(--st-{s.code});" in css
    for code, fill in chartkit.MISSING_FILLS.items():
        assert found[f"st-{code}"] == fill, code
    assert set(chartkit.MISSING_FILLS) == {s.code for s in statuses.TABLE if not s.numbers}
    # no status rule outside the generated block, no colour literal beside a status class
    source = (templates_dir() / "static" / "style.css").read_text("utf-8")
    assert not re.search(r"\.st-\w", source)


def test_the_old_variables_left_only_their_other_uses() -> None:
    """--queued coloured notices, throttled cells, the client-bound mark and the
    glossary's target: each has its own variable, at the value it had."""
    found = _variables(_served_css())
    assert found["notice"] == found["target"] == "#fff8e1"
    assert found["throttled"] == found["mark"] == "#9a6700"
    assert not {"queued", "queued-bg", "over-bg", "err-bg"} & set(found)


def test_text_on_every_status_fill_reads_at_aa() -> None:
    for s in statuses.TABLE:
        assert _contrast(s.ink, s.fill) >= 4.5, s.code
        if s.role == "failed":  # the compare page's grey A/B texts sit on it too
            assert _contrast(MUTED, s.fill) >= 4.5, s.code


def test_no_template_or_script_writes_a_status_code() -> None:
    codes = "|".join(contract.STATUSES)
    # a DOM event name ("error" of a script element) is not a status code
    literal = re.compile(rf"""(?<!addEventListener\()["'](?:{codes})["']|st-(?:{codes})\b""")
    offenders = [f"{p.relative_to(templates_dir())}: {m.group(0)}"
                 for p in sorted(templates_dir().rglob("*")) if p.is_file() and p.suffix != ".svg"
                 for m in literal.finditer(p.read_text("utf-8"))]
    assert offenders == []
    progress = (Path(__file__).parents[2] / "bench" / "run" / "progress.py").read_text("utf-8")
    assert not literal.search(progress)


def test_pages_hand_the_scripts_the_status_rules() -> None:
    r = Renderer(globals_={"assets": {k: k for k in ("css", "favicon", "vega", "explore_js",
                                                      "compare_js", "site_js", "slo_js", "address_js",
                                                      "rules_js")},
                           "version": "0", "nav": "", "cache_note": "", "medians_note": ""})
    for template, context in (("compare.html", {"groups": [], "pick": ("", ""), "metrics": [],
                                               "tool_groups": []}),
                              ("explore.html", {"families": [], "view_text": "", "chart_title": "",
                                                "chart_caption": "", "fallback_svg": "",
                                                "cost_note": "", "slo_spec": "", "filters": [],
                                                "dates": None})):
        doc = parse_html(r.render(template, depth=0, **context))
        rules = doc.find("script", id="status-rules")
        assert rules is not None, template
        assert json.loads(rules.text()) == statuses.js_rules()
    assert statuses.js_rules()["numbers"] == [contract.VALID, contract.REQUESTS_QUEUED]
    assert statuses.js_rules()["flagged"] == [contract.REQUESTS_QUEUED]
    traffic = statuses.js_rules(traffic=True)
    assert traffic["numbers"] == list(statuses.NUMBER_STATUSES)
    assert traffic["flagged"] == [contract.REQUESTS_QUEUED, contract.REUSE_OFF_TARGET,
                                  contract.REUSE_UNVERIFIED, contract.LOAD_NOT_DELIVERED]
