"""PublishedPage -> run directory, through ``rundir.io`` only.

Why so careful: an import must be all or nothing and repeatable. The run is
written into a temporary sibling folder, validated with ``read_run`` and
renamed into place only when whole. Its id is derived from the measurements
only (:mod:`rundir.identity`), so importing the same source again, from any
file or folder, lands on the same id; and before writing, the folder is
searched for the same source under any id (:mod:`.existing`), so a run an
earlier importer wrote is recognised rather than duplicated. A folder holding
a different run is never overwritten.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from importer.existing import Existing, already_line, find_same_source, match
from importer.parse import PageError, PublishedPage, parse_page
from rundir.contract import (
    CELLS_FILE,
    CELLS_SCHEMA,
    SCHEMA_VERSION,
    SOURCE_IMPORTED,
    Imported,
    RunInfo,
)
from rundir.identity import source_key, source_key_of
from rundir.io import atomic_write_bytes, is_run_dir, read_run, write_run_info, write_table
from rundir.manifest import seal
from rundir.redact import redact, redact_tree
from rundir.slugs import slugify

NOTES = (
    "Imported from a published Speed test matrix page: only its published numbers "
    "exist, no raw measurements.\n\n"
    "Contexts are precise to their labels only: pages print whole K rounded down, "
    "so a label of nK is stored as n × 1,024 tokens (251K → 257,024)."
)


class TargetError(Exception):
    """The run cannot be written where asked; the message names the folder."""


@dataclass
class ImportResult:
    path: Path
    run_id: str
    created: bool  # False: the same source was already there (nothing written)
    existing: Existing | None = None  # how it was recognised, when not created

    def message(self) -> str | None:
        """The line saying it was already there (None when the run was written)."""
        return None if self.existing is None else already_line(self.existing)


def content_digest(page: PublishedPage) -> str:
    """The page's source key: its published numbers by cell and when it was measured
    (rundir.identity), so the title, byline, notes, whitespace or table style of a
    page saved again, and fields the parser gains later, leave its id alone."""
    return source_key_of(page.measured_at, cells_table(page).to_pylist())


def run_id_for(page: PublishedPage) -> str:
    """``kimi-k2.6-h200-sxm-x8-vllm-0.29.0-1a2b3c4d``: readable, then the source key."""
    hw, eng = page.hardware, page.engine
    parts = [
        page.model.name,
        hw.gpu_name,
        f"x{hw.gpu_count}" if hw.gpu_count else None,
        eng.name,
        eng.version,
    ]
    # 120, not the site's 80: the ids of pages imported before the slug rule was
    # shared were cut at 120, and the same page must keep landing on the same id.
    slug = slugify("-".join(p for p in parts if p), "imported", max_len=120)
    return f"{slug}-{content_digest(page)[:8]}"


def run_info(page: PublishedPage, run_id: str, source_file: str, sha256: str) -> RunInfo:
    """The run.yaml of an imported page: every published value, nothing invented."""
    notes = NOTES
    if page.extra:
        listed = "\n".join(f"- {block} / {key}: {value}" for block, key, value in page.extra)
        notes += f"\n\nPublished values with no field in run.yaml:\n\n{listed}"
    return RunInfo(
        schema_version=SCHEMA_VERSION,
        run_id=run_id,
        source=SOURCE_IMPORTED,
        measured_at=page.measured_at,
        submitter=page.submitter,
        hardware=dataclasses.replace(page.hardware),
        engine=dataclasses.replace(page.engine),
        model=dataclasses.replace(page.model),
        parameters=dataclasses.replace(
            page.parameters,
            contexts=list(page.parameters.contexts),
            concurrency=list(page.parameters.concurrency),
            prefill_contexts=list(page.parameters.prefill_contexts),
        ),
        launch_command=page.launch_command,
        notes=notes,
        imported=Imported(source_file=source_file, source_sha256=sha256, format=page.format,
                          byline_label=page.byline_label),
    )


def cells_table(page: PublishedPage) -> pa.Table:
    """cells.parquet rows: status from the page, published aggregates in ``pub_*``."""
    rows = [
        {
            "phase": c.phase,
            "context": c.context,
            "concurrency": c.concurrency,
            "status": c.status,
            "reason": c.reason,
            "pub_total_tok_s": c.total_tok_s,
            "pub_per_request_tok_s": c.per_request_tok_s,
            "pub_ttft_ms": c.ttft_ms,
            "pub_tbt_ms": c.tbt_ms,
            "pub_avg_active": c.avg_active,
            "pub_completed": c.completed,
            "pub_output_tokens": c.output_tokens,
            "pub_measured_s": c.measured_s,
        }
        for c in page.cells
    ]
    return pa.Table.from_pylist(rows, schema=CELLS_SCHEMA)


def write_run(page: PublishedPage, out: Path, source_file: str, sha256: str) -> ImportResult:
    """Write ``out/<run_id>/`` whole or not at all; the same run again is a no-op.

    Every string of the page (launch command, notes, extra values, names) and
    the source file's name are redacted first: published pages come from
    other tools, and a key in them must not reach the run directory.
    """
    page = redact_tree(page)
    source_file = redact(source_file)
    run_id = run_id_for(page)
    info = run_info(page, run_id, source_file, sha256)
    return write_run_dir(out, run_id, info, cells_table(page))


def write_run_dir(
    out: Path, run_id: str, info: RunInfo, cells: pa.Table,
    files: dict[str, bytes] | None = None, tables: dict[str, pa.Table] | None = None,
) -> ImportResult:
    """Write ``out/<run_id>/`` whole or not at all; the same source again is a no-op.

    The same source is recognised at ``out/<run_id>`` and, under another id,
    in any imported run directly under ``out`` (see :mod:`.existing`). Shared
    by every importer (pages, llm-inference-bench JSON). ``files`` are extra
    raw files by relative path (e.g. ``raw/source.json``), already redacted by
    the caller, written inside the temporary folder too; ``tables`` further contract
    tables by file name (a peer tool's requests.parquet), checked as they are written.
    """
    out = Path(out)
    if is_run_dir(out):
        raise TargetError(
            f"{out}: is a run directory; --out takes the folder that receives <run_id>/"
        )
    if out.exists() and not out.is_dir():
        raise TargetError(f"{out}: is not a folder")
    target = out / run_id
    key = source_key(info, cells) or ""
    sha = info.imported.source_sha256 if info.imported else None
    if target.exists() or target.is_symlink():
        if not is_run_dir(target):
            raise TargetError(f"{target}: exists and is not a run directory; not overwritten")
        found = match(target, key, None, info, cells)
        if found is None:
            raise TargetError(f"{target}: already holds a different run; not overwritten")
        return ImportResult(target, run_id, created=False, existing=found)
    found = find_same_source(out, key, sha, info, cells)
    if found is not None:
        return ImportResult(found.path, found.run_id, created=False, existing=found)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{run_id}.", suffix=".tmp", dir=out))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it private; a run directory is for sharing
        write_run_info(tmp, info)
        write_table(tmp, CELLS_FILE, cells)
        for name, table in (tables or {}).items():
            write_table(tmp, name, table)
        for rel, data in (files or {}).items():
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(dest, data)
        seal(tmp)  # last: the sha256 of every file written (rundir/manifest.py)
        read_run(tmp)  # the contract's own check, before anything has a real name
        try:
            tmp.rename(target)  # atomic; fails if target appeared meanwhile and is not empty
        except OSError:
            found = match(target, key, None, info, cells) if is_run_dir(target) else None
            if found is not None:  # a concurrent import of the same source won
                return ImportResult(target, run_id, created=False, existing=found)
            raise TargetError(f"{target}: appeared while importing; not overwritten") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return ImportResult(target, run_id, created=True)


def read_page_text(path: Path) -> tuple[str, str]:
    """(text, sha256 of the bytes) of a saved page; PageError when it is not text."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PageError(line, "not a Speed test matrix page (not UTF-8 text)") from None
    return text, hashlib.sha256(data).hexdigest()


def import_file(path: Path, out: Path) -> ImportResult:
    """Parse the page at path and write its run directory under out."""
    text, sha = read_page_text(path)
    page = parse_page(text)
    return write_run(page, out, Path(path).name, sha)
