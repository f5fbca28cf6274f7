"""Values the contract no longer names still read: old run directories stay readable.

`token_counting` once listed `tokenizer` (the client re-tokenizing the
streamed text), a method no code ever produced; it is gone from
rundir.contract and docs/data-format.md. A run directory that carries it
anyway must still load, aggregate and publish, showing the value as written.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from rundir import contract
from rundir.io import read_run, write_table
from site_builder.aggregate import aggregate_run
from site_builder.publish import build_site
from tests.site.test_repeats_site import with_windows
from tests.support.synthetic_runs import make_measured_run


def test_a_run_with_tokenizer_counting_still_publishes(tmp_path: Path) -> None:
    assert "tokenizer" not in contract.TOKEN_COUNTING
    run = tmp_path / "data" / "old"
    make_measured_run(run, run_id="old", contexts=[1024], concurrency=[1], duration_s=0.5)
    cells = read_run(run).cells
    column = cells.schema.get_field_index("token_counting")
    old = pc.if_else(pc.equal(cells["phase"], contract.DECODE),
                     pa.scalar("tokenizer"), cells["token_counting"])
    write_table(run, contract.CELLS_FILE, cells.set_column(column, "token_counting", old))
    assert "tokenizer" in read_run(run).cells["token_counting"].to_pylist()
    report = build_site(tmp_path / "data", tmp_path / "site")
    assert report.errors == [] and report.published == ["old"]
    pages = [p.read_text(encoding="utf-8") for p in (tmp_path / "site").rglob("*.html")]
    assert any("Tokens counted by" in p and "tokenizer" in p for p in pages)


def test_a_repeated_cell_without_its_windows_file_reads_as_one_window(tmp_path: Path) -> None:
    """A reader that knows nothing of windows.parquet (or a run copied without it) sees a
    repeated cell as one window over the union of its windows: the figures of that span."""
    run = make_measured_run(tmp_path / "r", run_id="r", contexts=[1024], concurrency=[2],
                            duration_s=3.0, prefill_contexts=[],
                            info={"parameters": {"repeats": 3, "duration_s": 1.0}})
    whole = aggregate_run(read_run(run)).decode()[0]
    with_windows(run)
    repeated = aggregate_run(read_run(run)).decode()[0]
    assert repeated.windows == 3 and repeated.intervals
    (run / contract.WINDOWS_FILE).unlink()
    plain = aggregate_run(read_run(run)).decode()[0]
    assert plain.windows == 1 and plain.intervals == {}
    assert plain.total_tok_s == whole.total_tok_s and plain.output_tokens == whole.output_tokens
