"""The windows of a decode cell: one by default, k with `bench run --repeats k`.

Why a separate, optional table (windows.parquet) and not a row per window in
cells.parquet: a cell stays one row, so every reader of contract v1 reads a
k = 1 run byte for byte as before (the file is not written), an old run
reads as one window per cell (the file is absent), and a reader that does
not know the file still reads a repeated cell correctly as one window
spanning all k (cells.parquet's window is their union: back-to-back windows
on the same streams are themselves one longer window of the same steady
state).

Which window a request belongs to (docs/data-format.md, "Windows"): its
tokens and its time between tokens belong to each window they arrive in
(clipped to the window, as for a single window); its TTFT belongs to the
window its first token falls in, and a first token before window 0 (a stream
started during warm-up) belongs to window 0, so the windows' TTFT samples
together are the cell's.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rundir.checks import KEY

Key = tuple[str, int, int]
Bounds = list[tuple[int, int]]


def by_cell(windows: pa.Table) -> dict[Key, Bounds]:
    """Each cell's windows as (start_ns, end_ns), in window-id order."""
    out: dict[Key, list[tuple[int, int, int]]] = {}
    for row in windows.to_pylist():
        key = (row["phase"], row["context"], row["concurrency"])
        out.setdefault(key, []).append((row["window"], row["start_ns"], row["end_ns"]))
    return {k: [(s, e) for _, s, e in sorted(v)] for k, v in out.items()}


def problem(windows: pa.Table, cells: pa.Table, repeats: int | None = None,
            duration_s: float | None = None) -> str | None:
    """The first rule windows.parquet breaks, as one line naming the cell; None if none.

    Beyond each window's own shape, a cell's windows must be the ones the
    collector cuts (split_span): `repeats` windows of `duration_s` (run.yaml's
    parameters) back to back from the cell's window_start_ns, the last one
    ending at its window_end_ns. Why: the published median and interval are
    taken over these windows, so a window deleted or shrunk by hand would
    move them without a word (issue 30). Without a duration (a hand-made
    run.yaml) every window but the last must be as long as window 0; without
    `repeats` (no run.yaml to compare with) only the windows' own shape is checked.
    """
    spans = {(r["phase"], r["context"], r["concurrency"]): r for r in cells.to_pylist()}
    grouped: dict[Key, list[tuple[int, int, int]]] = {}
    for row in windows.to_pylist():
        key = (row["phase"], row["context"], row["concurrency"])
        grouped.setdefault(key, []).append((row["window"], row["start_ns"], row["end_ns"]))
    for key, rows in sorted(grouped.items()):
        name = f"cell ({', '.join(map(str, key))})"
        if key not in spans:
            return f"column {', '.join(KEY)}: {name} has windows but no row in cells.parquet"
        if key[0] != "decode":
            return f"column phase: {name}: only decode cells have windows"
        if why := _rows_problem(sorted(rows), spans[key]):
            return f"{why} in {name}"
        if repeats is not None and (
                why := _tiling_problem(sorted(rows), spans[key], repeats, duration_s, name)):
            return why
    return None


def _rows_problem(rows: list[tuple[int, int, int]], cell: dict) -> str | None:
    ids = [w for w, _, _ in rows]
    if ids != list(range(len(ids))):
        return f"column window: expected ids 0..{len(ids) - 1} once each, got {ids}"
    for w, s, e in rows:
        if e <= s:
            return f"column end_ns: window {w} ends at or before its start"
    for (w, _, e), (_, s, _) in zip(rows, rows[1:], strict=False):
        if s < e:
            return f"column start_ns: window {w + 1} starts before window {w} ends"
    lo, hi = cell.get("window_start_ns"), cell.get("window_end_ns")
    if lo is None or hi is None:
        return "column window: windows of a cell with no measurement window"
    if rows[0][1] < lo or rows[-1][2] > hi:
        return "column start_ns/end_ns: a window outside the cell's window_start_ns..window_end_ns"
    return None


def _tiling_problem(rows: list[tuple[int, int, int]], cell: dict, k: int,
                    duration_s: float | None, name: str) -> str | None:
    """How the windows differ from those the collector cuts from the cell's span
    (rundir.windows.split_span), or None. Called once _rows_problem passed."""
    lo, hi = int(cell["window_start_ns"]), int(cell["window_end_ns"])
    got = [(s, e) for _, s, e in rows]
    if duration_s is not None:
        step = int(duration_s * 1e9)  # as the collector computes it (bench/measure/cells.py)
        plan = f"{k} × {duration_s:g} s (run.yaml parameters.repeats × duration_s)"
    else:
        step = got[0][1] - got[0][0]
        plan = f"{k} windows as long as window 0 (run.yaml has no parameters.duration_s)"
    plan += (" back to back from its window_start_ns, the last cut at its window_end_ns, "
             "as the collector cuts them")
    want = split_span(lo, hi, k, step)
    if len(got) != len(want):
        return f"column window: {name} has {len(got)} windows, expected {len(want)}: {plan}"
    for w, (have, should) in enumerate(zip(got, want, strict=True)):
        if have != should:
            return (f"columns start_ns, end_ns: {name} window {w} spans {_span(have, lo)} of "
                    f"the cell's window, expected {_span(should, lo)}: {plan}")
    return None


def _span(bounds: tuple[int, int], origin: int) -> str:
    """A window as seconds from the cell's window_start_ns, to the nanosecond."""
    def at(ns: int) -> str:
        whole, frac = divmod(abs(ns - origin), 1_000_000_000)
        text = f"{'-' if ns < origin else ''}{whole}.{frac:09d}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    return f"{at(bounds[0])}–{at(bounds[1])} s"


def first_token_window(first_token_ns: np.ndarray, bounds: Bounds) -> np.ndarray:
    """Per request, the window id its TTFT belongs to (-1: no first token).

    The window its first token falls in; before window 0 counts as window 0
    and after the last as the last (the streams stop at the last window's end).
    """
    first = np.asarray(first_token_ns, dtype=np.int64)
    starts = np.asarray([s for s, _ in bounds[1:]], dtype=np.int64)
    ids = np.searchsorted(starts, first, side="right").astype(np.int64)
    return np.where(first >= 0, ids, -1)


def split_span(start_ns: int, end_ns: int, k: int, window_ns: int) -> Bounds:
    """Back-to-back windows of window_ns from start_ns, the last cut at end_ns
    (a window that would start at or after end_ns is not one)."""
    out = []
    for i in range(k):
        s = start_ns + i * window_ns
        if s >= end_ns:
            break
        out.append((s, min(end_ns, s + window_ns)))
    return out
