"""What looking for the same source costs ``bench import`` in a folder of many runs.

Why: before writing, the importer compares the page with every imported run
directly under --out (importer/existing.py). A folder of imported runs
with no measurement date cannot be ruled out from run.yaml's text, so each is
keyed from its raw cells first (``quick_key``) and validated whole only on a
match. This prints, side by side in one process, the import into an empty
folder, into N dated runs, into N undated runs, and the same with the quick
key turned off (every candidate validated whole), best of 3 each.

    PYTHONPATH=$PWD python3 benchmarks/import_existing.py [N]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from importer import existing
from importer.write import import_file
from rundir.contract import CELLS_FILE, CELLS_SCHEMA
from rundir.io import read_run, write_run_info, write_table

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "tests" / "data" / "import" / "seeds" / "qwen3.5-4b-bf16-rtxpro6000.txt"


def make_folder(root: Path, n: int, dated: bool) -> Path:
    """n imported runs, each another source (another date, or other numbers)."""
    first = import_file(SEED, root / "first")
    run = read_run(first.path)
    out = root / ("dated" if dated else "undated")
    for i in range(n):
        d = out / f"run-{i:05d}"
        shutil.copytree(first.path, d)
        run.info.run_id = d.name
        run.info.imported.source_sha256 = "0" * 64  # not from the seed's file
        if dated:
            run.info.measured_at = f"2025-{1 + i % 12:02d}-{1 + i % 28:02d}T00:00:00Z"
        else:
            rows = run.cells.to_pylist()
            rows[0]["pub_total_tok_s"] = 1000.0 + i
            write_table(d, CELLS_FILE, pa.Table.from_pylist(rows, schema=CELLS_SCHEMA))
        write_run_info(d, run.info)
    return out


def best_import(out: Path) -> float:
    """Best of 3 imports of the seed into out (the new run removed after each)."""
    times = []
    for _ in range(3):
        t = time.perf_counter()
        got = import_file(SEED, out)
        times.append(time.perf_counter() - t)
        assert got.created
        shutil.rmtree(got.path)
    return min(times)


def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        empty = root / "empty"
        dated, undated = make_folder(root, n, True), make_folder(root, n, False)
        rows = [("empty folder", best_import(empty)),
                (f"{n} dated imported runs", best_import(dated)),
                (f"{n} undated imported runs", best_import(undated))]
        quick = existing.quick_key
        existing.quick_key = lambda run_dir, text: None  # every candidate validated whole
        try:
            rows.append((f"{n} undated, no quick key", best_import(undated)))
        finally:
            existing.quick_key = quick
    for name, seconds in rows:
        print(f"{name:32} {seconds:8.3f} s")
    print(f"quick key: {rows[3][1] / rows[2][1]:.1f}x faster on {n} undated runs")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
