"""The explorer's data as a reader's browser loads it: an index first, then only the
points the view on screen draws.

Why: `data/explore.js` holds every point of the site (4.2 MB, 773 KB gzip at 1,000
runs: each point carries its figures at every percentile, with their texts), and the
explorer loaded all of it for any view (issue 30, item 14). A view is one family (or
all runs) at one context, so the points are also written one file per family and
context, `data/explore/<context>/<family>.js`, and the explorer loads

* the index, inline in explore.html (`<script type="application/json"
  id="explore-index">`): every run (only the fields the page reads), the families,
  contexts, frontiers, default view, chart templates and, per file of points, where
  its points lie in the site's list (`chunks`: family, context, start, count, src).
  Its weight grows with the number of runs, not of points (268 KB, 19 KB gzip at
  1,000 runs); in the page, it needs no address of its own to keep in step with;
* then, with `<script>` tags (a page opened from file:// cannot fetch() a JSON file,
  which is why the site's data are scripts), the files of the view's runs at its
  context: a family's view loads that family's file, "All runs" (or a filter by GPU,
  engine, ...) the files of the families it keeps.

`explore.explore_data` orders the points by family, then context, so each file is one
slice of the site's list and the frontiers' point indices hold in the index as in
the whole file. In a file, a point's run is its place in the family's run list (the
index's `families[].runs` maps it back), so a run added to one family leaves every
other family's files as they were, byte for byte, and a browser's cached copies with
them. Each file's address carries its content's digest (`?v=`), so a cached file
never meets a newer page.

`data/explore.js` (everything in one file) is still written: the A/B page draws its
two runs' curves from it (templates/static/compare.js), and it is the explorer's data
as a download.
"""

from __future__ import annotations

import hashlib
from itertools import groupby
from typing import Any

from site_builder.render import json_script

FOLDER = "data/explore"
WHOLE = "data/explore.js"
GLOBAL = "SPEED_MATRIX_EXPLORE"  # the whole data lands here (the A/B page)
INDEX_ID = "explore-index"  # explore.html's element holding the index
CHUNKS = "SPEED_MATRIX_EXPLORE_CHUNKS"  # each file of points: its points, by the file's id
# What explore.js reads of a run (the name and key of its line, the per-GPU view's
# GPU count, the filters' fields); the whole file keeps every field.
RUN_FIELDS = ("slug", "name", "gpus", "gpu", "engine", "quantization", "date")


def _tag(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def chunk_rel(family: str, context: int) -> str:
    """A file of points' path in the site: one folder per context (family slugs hold
    no slash, so no two (family, context) pairs share a path)."""
    return f"{FOLDER}/{int(context)}/{family}.js"


def split(data: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(the index, [(path, script text)] of each file of points) of explore_data's
    data (points grouped by family, then context). The index is `data` less its
    points, its runs cut to RUN_FIELDS, plus `chunks` and `total` (how many points)."""
    family_of = {i: f["slug"] for f in data["families"] for i in f["runs"]}
    place = {i: k for f in data["families"] for k, i in enumerate(f["runs"])}
    chunks: list[dict[str, Any]] = []
    files: list[tuple[str, str]] = []
    start = 0
    points = data["points"]
    for (family, context), group in groupby(points, key=lambda p: (family_of[p[0]], p[1])):
        rows = [[place[p[0]], *p[1:]] for p in group]
        rel = chunk_rel(family, context)
        text = (f"(window.{CHUNKS} = window.{CHUNKS} || {{}})[{json_script(rel)}] = "
                f"{json_script(rows)};\n")
        if any(c["id"] == rel for c in chunks):
            raise ValueError(f"explorer points of {family} at {context} are not one slice")
        chunks.append({"id": rel, "family": family, "context": context, "start": start,
                       "count": len(rows), "src": f"{rel}?v={_tag(text)}"})
        files.append((rel, text))
        start += len(rows)
    index = {key: value for key, value in data.items() if key != "points"}
    index["runs"] = [{k: run[k] for k in RUN_FIELDS} for run in data["runs"]]
    index["chunks"] = chunks
    index["total"] = len(points)
    return index, files


def scripts(data: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(the index, for explore.html; [(path, text)] of every file to write: each file
    of points, and the whole data)."""
    index, files = split(data)
    return index, [*files, (WHOLE, f"window.{GLOBAL} = {json_script(data)};\n")]


def joined(index: dict[str, Any], chunks: dict[str, list[list[Any]]]) -> list[list[Any]]:
    """The site's points again from the index and its files' points (by id): what
    explore.js puts together in the page. The tests' reference."""
    runs_of = {f["slug"]: f["runs"] for f in index["families"]}
    points: list[list[Any]] = [[] for _ in range(index["total"])]
    for c in index["chunks"]:
        for k, row in enumerate(chunks[c["id"]]):
            points[c["start"] + k] = [runs_of[c["family"]][row[0]], *row[1:]]
    return points
