"""A run's rate cells as its page shows them: the Request rate tables (one per
curve: context, cap and reuse level), the curve charts with each knee marked,
and the download columns (site_builder/rate.py has the figures).

The knee is judged under the build's SLO (site_builder/slo.py), the one the
run page's SLO table starts from; the charts' x is the offered rate, their y
what the server did (completed requests/s, TTFT p90), so a curve that bends
shows where the server stopped keeping up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rundir import contract, statuses, words
from site_builder import cellcurves, formats, trafficpage
from site_builder import slo as slo_mod
from site_builder.chartkit import Chart, Look
from site_builder.rate import KNEE_SHARE, Judged, RateCell, curves, judge, knee

THROUGHPUT = Look("Offered rate (requests/s)", "Completed requests/s", "Curve")
TTFT_P90 = Look("Offered rate (requests/s)", "TTFT p90 (ms)", "Curve")
QUEUEING_NOTE = ("A request due while the client could not send it (the cap full, or the client "
                 "behind) waits in the client: that wait is its send lag, and it counts in its TTFT "
                 "from schedule; TTFT runs from the request's send, as everywhere on this site.")
# The rate status's entry under the methodology's Statuses.
STATUS_ANCHORS = {contract.LOAD_NOT_DELIVERED: "load-not-delivered"}


def status_anchor(code: str) -> str | None:
    """Its entry; a cell at a reuse level may be off its reuse target, as a prefix cell."""
    return STATUS_ANCHORS.get(code) or trafficpage.status_anchor(code)


def rate(value: float | None) -> str:
    """Requests per second: ``0.5/s``, ``12.3/s``, ``1,000/s``; ``—`` for none."""
    if value is None:
        return words.MISSING
    digits = 2 if value < 10 else 1 if value < 100 else 0
    text = f"{words.round_half_up(value, digits):,.{digits}f}"
    if digits:
        text = text.rstrip("0").rstrip(".")
    return f"{text}/s"


def achieved(cell: RateCell) -> str:
    """``3.95/s ± 0.26`` (the schedule's chance spread), ``—`` without a window."""
    if cell.rate_achieved is None:
        return words.MISSING
    if not cell.rate_uncertainty:  # a constant schedule has no chance spread
        return rate(cell.rate_achieved)
    return f"{rate(cell.rate_achieved)} ± {rate(cell.rate_uncertainty)[:-2]}"


def lag(value: float | None) -> str:
    """A send lag: two decimals below 1 ms (a client on time lags tenths of one)."""
    return formats.tbt(value, 2 if value is not None and value < 1 else 1)


@dataclass
class RateTable:
    """One curve: its heading, its cells under the SLO (by offered rate), its knee."""

    heading: str
    rows: list[Judged] = field(default_factory=list)
    knee: Judged | None = None
    series: str = ""
    reuse: int | None = None  # the curve's --rate-reuse level: its table gains a reuse column

    @property
    def knee_text(self) -> str:
        if self.knee is None:
            return "no offered rate sustained"
        return f"knee {rate(self.knee.cell.rate_target)}"


def _heading(context: int, cap: int, reuse: int | None) -> str:
    head = f"{words.context_label(context)} context, "
    head += f"at most {cap} in flight" if cap else "no cap on requests in flight"
    return head + (f", {reuse}% prefix reuse" if reuse is not None else "")


def _series(context: int, cap: int, reuse: int | None) -> str:
    out = words.context_label(context) + (f" × cap {cap}" if cap else "")
    return out + (f" · {reuse}% reuse" if reuse is not None else "")


def tables(cells: list[RateCell], slo: slo_mod.Slo) -> list[RateTable]:
    """Per curve its cells judged against the SLO and its knee."""
    out = []
    for (ctx, cap, reuse), group in curves(cells).items():
        judged = [judge(c, slo) for c in group]
        out.append(RateTable(_heading(ctx, cap, reuse), judged, knee(judged), _series(ctx, cap, reuse),
                             reuse))
    return out


def _chart(chart_id: str, title: str, caption: str, look: Look, curves_: list[RateTable],
           y_of: Any, y_text: Any) -> Chart | None:
    rows = []
    names = {}
    for t in curves_:
        name = f"{t.series} ({t.knee_text})"
        for j in t.rows:
            c = j.cell
            y = y_of(c)
            if y is None or not statuses.carries_numbers(c.status):
                continue
            names[t.series] = name
            rows.append({"series": name, "x": c.rate_target, "y": y, "X": rate(c.rate_target),
                         "Y": y_text(c), "Status": words.status_label(c.status),
                         "Knee": cellcurves.KNEE if j is t.knee else ""})
    if not rows:
        return None
    hi = max(r["x"] for r in rows)
    return cellcurves.chart(chart_id, title, caption, look, rows, _ticks(hi), (0.0, hi),
                            whole_x=False, knee=True)


def _ticks(hi: float) -> list[float]:
    step = hi / 4 if hi > 0 else 1.0
    for nice in (0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000):
        if nice >= step:
            step = nice
            break
    n = int(hi / step + 1e-9)
    return [round(i * step, 6) for i in range(n + 1)]


def page_charts(curves_: list[RateTable]) -> list[Chart | None]:
    """The run page's rate charts: completed requests/s and TTFT p90 against the
    offered rate, one line per curve, its knee a diamond (and named in the legend)."""
    return [
        _chart("chart-rate-throughput", "Completed requests/s by offered rate",
               "Requests the schedule put in the window that finished, per second of the span "
               "they took, against the rate offered; the diamond marks each curve's knee",
               THROUGHPUT, curves_, lambda c: c.completed_rps, lambda c: rate(c.completed_rps)),
        _chart("chart-rate-ttft", "TTFT p90 by offered rate",
               f"The 90th percentile of time to first token (from send) against the rate "
               f"offered; the knee: the highest rate completing ≥ {KNEE_SHARE:.0%} of it and "
               f"meeting the SLO", TTFT_P90, curves_, lambda c: c.tail("ttft_ms", "p90"),
               lambda c: words.ttft(c.tail("ttft_ms", "p90"))),
    ]


# cells.csv / cells.json's rate columns (names fixed by issue 34), after every other
# (runs with rate cells only).
DOWNLOAD_COLUMNS = ["rate_target", "rate_achieved", "send_lag_ms_p50", "send_lag_ms_p99", "arrivals"]


def download_extra(cell: RateCell | None) -> dict[str, Any]:
    """The rate columns of a row (None on any other cell's row)."""
    if cell is None:
        return dict.fromkeys(DOWNLOAD_COLUMNS)
    return {"rate_target": cell.rate_target, "rate_achieved": cell.rate_achieved,
            "send_lag_ms_p50": cell.send_lag_ms_p50, "send_lag_ms_p99": cell.send_lag_ms_p99,
            "arrivals": cell.arrivals}
