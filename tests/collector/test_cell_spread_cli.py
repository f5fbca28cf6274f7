"""What measured each cell, through the real `bench run` and `build-site`.

Against the reference server: `--workers 2` records 2 processes on 1 host for
a decode cell it spread over two processes, 1 for a cell with one stream (never
spread wider than its streams) and for the prefill cell, and the cell pages say
so; a resumed session with `--workers 1` records its new cell as it measured it,
keeping the earlier cells' values (why the columns are per cell).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from rundir.contract import CELLS_FILE
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

FAST = ["--duration", "2", "--warmup-stable", "0.5", "--server-wait", "5", "--contexts", "256",
        "--max-output", "300", "--prefill-repeats", "1", "--gpu-telemetry", "off"]


def spread(run_dir: Path) -> dict[tuple[str, int], tuple[int | None, int | None]]:
    rows = pq.read_table(run_dir / CELLS_FILE).to_pylist()
    return {(r["phase"], r["concurrency"]): (r["processes"], r["hosts"]) for r in rows}


def test_the_run_directory_and_the_cell_page_say_how_many_processes(refserver,
                                                                    tmp_path: Path) -> None:
    srv = refserver(tokens_per_s=100, ttft_ms=20, default_max_tokens=300)
    run_dir = tmp_path / "data" / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--out", str(run_dir), *FAST,
                  "--concurrency", "1,2", "--workers", "2")
    assert res.returncode == 0, res.stderr
    assert spread(run_dir) == {("prefill", 1): (1, 1), ("decode", 1): (1, 1),
                               ("decode", 2): (2, 1)}
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--resume", str(run_dir),
                  "--concurrency", "3", "--workers", "1", "--server-wait", "5",
                  "--warmup-stable", "0.5", "--gpu-telemetry", "off")
    assert res.returncode == 0, res.stderr
    assert spread(run_dir)[("decode", 2)] == (2, 1)  # kept as measured
    assert spread(run_dir)[("decode", 3)] == (1, 1)  # this session's --workers 1

    site = tmp_path / "site"
    res = run_cli("build-site", "--data", str(tmp_path / "data"), "--out", str(site),
                  "--cache", str(tmp_path / "cache"))
    assert res.returncode == 0, res.stderr
    (cells,) = site.glob("runs/*/cells")

    def line(name: str) -> str:
        html = (cells / name).read_text(encoding="utf-8")
        start = html.index("Measured by")
        return html[start:html.index("</dd>", start)]

    assert line("decode-256-2.html").endswith("<dd>2 processes on 1 host")
    assert line("decode-256-1.html").endswith("<dd>1 process on 1 host")
    assert line("decode-256-3.html").endswith("<dd>1 process on 1 host")
    assert line("prefill-256-1.html").endswith("<dd>1 process on 1 host")
