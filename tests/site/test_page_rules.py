"""Each rule the page recomputes runs in both languages on the same inputs: the Python
the build decides with, and templates/static/rules.js under node (issue 31, item 3).

The rules: the Pareto frontier (explore.pareto_front), Vega-Lite hole filling
(chartkit.Template.fill), the SLO grammar (slo.parse, Slo.spec) and judgement
(slo.judge), a run's best cell under the limits and the ranking with its ties
(oppoint.slo_rank), and the ranking at a point (oppoint.rank). Hypothesis draws the
inputs from small value sets, so ties, empty inputs and limits that exclude
everything come up often; the rules' data (levels, grammar, measures) is the build's
(site_builder/pagerules.py), handed to node as the page gets it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rundir import contract, tails
from site_builder import chartkit, explore, oppoint, pagerules, rankings, slo
from site_builder.aggregate import CellResult, RunAggregate
from site_builder.views import RunView
from tests.support.synthetic_runs import run_info

DRIVER = Path(__file__).parents[1] / "support" / "rules_node.js"


class Node:
    """rules.js in one node process, asked a line at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["node", str(DRIVER)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, encoding="utf-8")

    def call(self, fn: str, *args: Any) -> Any:
        """The function's answer; a JavaScript error comes back as JsError."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"fn": fn, "args": list(args)}, allow_nan=False) + "\n")
        self.proc.stdin.flush()
        # JavaScript writes a whole float as an integer: read every number as a float
        out = json.loads(self.proc.stdout.readline(), parse_int=float)
        if "error" in out:
            raise JsError(out["error"])
        return out["ok"]

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


class JsError(Exception):
    """An error thrown by rules.js."""


@pytest.fixture(scope="module")
def js() -> Iterator[Node]:
    if shutil.which("node") is None:
        if os.environ.get("CI"):
            pytest.fail("node is not installed (.ci/run installs nodejs)")
        pytest.skip("node is not installed (.ci/run installs nodejs)")
    node = Node()
    node.call("use", pagerules.js_rules())
    yield node
    node.close()


# ---- the Pareto frontier -------------------------------------------------------
coords = st.sampled_from([0.0, 1.0, 2.0, 2.5, 3.0, 100.0])


@given(st.lists(st.tuples(coords, coords), max_size=12))
def test_pareto_front_is_the_same_in_both(js: Node, points: list[tuple[float, float]]) -> None:
    assert js.call("paretoFront", [list(p) for p in points]) == explore.pareto_front(points)


# ---- Vega-Lite holes -----------------------------------------------------------
names = st.sampled_from(["lines", "colors", "x_title", "y_title"])
values = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6)
                      | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


@st.composite
def templates(draw: st.DrawFn) -> tuple[chartkit.Template, dict[str, Any], dict[str, Any]]:
    """A template with holes both ways (a value, a list) and the values to fill it."""
    holes = draw(st.lists(names, unique=True, max_size=4))
    spec: dict[str, Any] = {"mark": "line", "title": draw(st.text(max_size=6))}
    for i, hole in enumerate(holes):
        spec[f"f{i}"] = chartkit.slots(hole) if draw(st.booleans()) else chartkit.slot(hole)
    text = json.dumps(spec, separators=(",", ":"))
    given_names = draw(st.sampled_from([holes, holes[:-1], [*holes, "extra"]]))
    return (chartkit.Template(text, frozenset(holes)), {n: draw(values) for n in given_names},
            {"points": [{"x": draw(coords)}]})


@given(templates())
def test_filling_a_template_is_the_same_in_both(
        js: Node, case: tuple[chartkit.Template, dict[str, Any], dict[str, Any]]) -> None:
    template, filled, data = case
    try:
        want: Any = template.fill(data, **filled)
    except ValueError:
        with pytest.raises(JsError, match="template holes"):
            js.call("fill", template.text, filled, data)
        return
    assert js.call("fill", template.text, filled, data) == want


# ---- the SLO grammar and judgement ---------------------------------------------
part = st.builds(
    "{}{}_{}{}={}{}".format,
    st.sampled_from(["", " ", "\t", "\u00a0"]),
    st.sampled_from(["ttft", "tbt", "TTFT", "Tbt", "e2e", ""]),
    st.sampled_from(["p50", "p99", "p99_9", "p99.9", "P90", "p98", "p", "p9_9"]),
    st.sampled_from(["", " "]),
    st.sampled_from(["2000", "50", "12.5", ".5", "5.", "1e3", "+7", "0", "-1", "nan", "inf",
                     "1_000", "0x10", "", "2s", "1e400", " 3 "]),
    st.sampled_from(["", " ", "\u2028"]))
specs = st.lists(part, max_size=3).map(",".join) | st.text(max_size=12)


def _python_parse(text: str) -> list[list[Any]] | None:
    try:
        return [[lim.metric, lim.level, lim.ms] for lim in slo.parse(text).limits]
    except slo.SloError:
        return None


@given(specs)
def test_reading_limits_is_the_same_in_both(js: Node, text: str) -> None:
    want = _python_parse(text)
    got = js.call("sloParse", text)
    assert (None if got is None else [[m["metric"], m["level"], m["ms"]] for m in got]) == want
    if want:  # and both write them back alike, as the address and the flag take them
        assert js.call("sloSpec", got) == slo.parse(text).spec


levels = st.sampled_from(tails.LEVELS)
limit_ms = st.sampled_from([5.0, 20.0, 50.0, 500.0, 2000.0])


@st.composite
def limits(draw: st.DrawFn) -> slo.Slo:
    """One or two limits (one per metric), levels and numbers from small sets."""
    metrics = draw(st.lists(st.sampled_from(list(slo.METRICS)), min_size=1, max_size=2,
                            unique=True))
    return slo.Slo(tuple(slo.Limit(m, draw(levels), draw(limit_ms)) for m in metrics))


def _js_limits(limits: slo.Slo) -> list[dict[str, Any]]:
    return [{"metric": lim.metric, "level": lim.level, "ms": lim.ms} for lim in limits.limits]


def test_limits_beyond_the_number_range_of_a_spec_still_round_trip(js: Node) -> None:
    """Spec texts agree for the numbers a reader sets; JavaScript writes a number under
    1e-4 in exponent form as Python does, each reading the other's back."""
    for text in ("ttft_p99=0.0001", "tbt_p50=123456789012.5", "ttft_p90=1e-7"):
        got = js.call("sloParse", text)
        assert _python_parse(js.call("sloSpec", got)) == _python_parse(text)
        assert js.call("sloParse", slo.parse(text).spec) == got


# ---- cells and runs ---------------------------------------------------------------
figures = st.sampled_from([None, 5.0, 20.0, 50.0, 500.0, 3000.0])
speeds = st.sampled_from([None, 100.0, 200.0, 400.0])
STATUSES = [contract.VALID, contract.VALID, contract.REQUESTS_QUEUED, contract.OVER_CAPACITY]


@st.composite
def cells(draw: st.DrawFn, context: int, concurrency: int, with_tails: bool) -> CellResult:
    """A decode cell: its medians, every level of TTFT and time between tokens (None:
    too few requests), maybe 95% intervals; a status without numbers now and then."""
    status = draw(st.sampled_from(STATUSES))
    if status not in (contract.VALID, contract.REQUESTS_QUEUED):
        return CellResult(contract.DECODE, context, concurrency, status)
    total = draw(speeds)
    cell = CellResult(contract.DECODE, context, concurrency, status, total_tok_s=total,
                      per_request_tok_s=draw(speeds), ttft_ms=draw(figures),
                      tbt_ms=draw(figures))
    if with_tails:
        cell.tails = {m.column(level): draw(figures) for m in (tails.TTFT, tails.TBT)
                      for level in tails.LEVELS[1:]}
    if total is not None and draw(st.booleans()):
        lo = draw(st.sampled_from([0.8, 0.95, 1.0]))
        cell.intervals = {key: [v * lo, v * (2 - lo)] for key in ("total_tok_s", "ttft_ms")
                          if (v := getattr(cell, key)) is not None}
    return cell


POINTS = [(1024, 1), (1024, 8), (4096, 8), (32768, 1), (32768, 8)]


@st.composite
def runs(draw: st.DrawFn) -> list[RunView]:
    """Up to five runs of two models on two setups (titles tie), each with some of the
    points (sorted, as a RunAggregate's cells are), imported ones with medians only."""
    out = []
    for i in range(draw(st.integers(0, 5))):
        at = sorted(draw(st.lists(st.sampled_from(POINTS), unique=True, max_size=4)))
        with_tails = draw(st.booleans())
        gpus = draw(st.sampled_from([None, 1, 8]))
        info = run_info(f"r{i}", info={"model": {"name": draw(st.sampled_from(["A", "B"]))},
                                       "hardware": {"gpu_name": "H200" if gpus else None,
                                                    "gpu_count": gpus}})
        agg = RunAggregate(f"r{i}", contract.SOURCE_MEASURED, f"d{i}",
                           [draw(cells(c, n, with_tails)) for c, n in at])
        out.append(RunView(info, agg, draw(st.sampled_from([f"z{i}", f"a{i}"]))))
    return out


measures = st.sampled_from([key for key, _, _ in oppoint.METRICS])


@given(runs(), limits(), measures)
def test_best_cells_under_limits_and_their_ranking_are_the_same_in_both(
        js: Node, views: list[RunView], limits: slo.Slo, by: str) -> None:
    want = [[e.run.slug, oppoint.Point(e.cell.context, e.cell.concurrency).label if e.cell
             else slo.none_meets(e.run.agg.cells, limits), e.tied]
            for e in oppoint.slo_rank(views, limits, by)]
    got = js.call("rankSlo", rankings.client_data(views), _js_limits(limits), by)
    assert got == want


@given(runs(), st.sampled_from(POINTS), measures)
def test_the_ranking_at_a_point_is_the_same_in_both(
        js: Node, views: list[RunView], at: tuple[int, int], by: str) -> None:
    point = oppoint.Point(*at)
    data = rankings.client_data(views, [point])
    want = [[e.run.slug, oppoint.Point(e.cell.context, e.cell.concurrency).label if e.cell
             else None, e.exact] for e in oppoint.rank(views, point, by)]
    assert js.call("rankAt", data, point.key, by) == want


@given(runs(), limits())
def test_judging_a_cell_is_the_same_in_both(js: Node, views: list[RunView],
                                            limits: slo.Slo) -> None:
    for x in (x for run in views for x in run.agg.cells if x.has_numbers):
        want = slo.judge(x, limits).meets
        assert js.call("meets", explore.point_levels(x), _js_limits(limits)) == want
        assert slo.levels_meet(explore.point_levels(x), limits) == want


def test_the_page_gets_the_builds_levels_grammar_and_measures() -> None:
    rules = pagerules.js_rules()
    assert rules["levels"] == list(tails.LEVELS)
    assert rules["slo"]["limit"] == slo.LIMIT and rules["slo"]["default"] == slo.DEFAULT_SPEC
    assert rules["higher"] == {"total": True, "per_gpu": True, "per_request": True,
                               "ttft": False, "cost": False}
