"""Everything the site builder checks or re-checks about one run, as problems.

Why: a run is published by `build-site`, and a contributor (or a CI job) must
learn before that whether the builder will take it, in the builder's own
words. `bench validate` and `build-site` call the same functions here, so a
run that validates builds, and one that does not is refused with the same
line. Nothing is aggregated: only the checks.

Two levels:

- **error**: build-site refuses the run and prints `error: <text>`, the very
  text of the problem: a contract file that is a symlink leading outside the
  data folder (or, for a run validated alone, outside the run's folder);
  files that differ from the run's manifest (unless edited runs are
  allowed); anything rundir.io.read_run refuses (run.yaml, every Parquet
  schema, request rows without their cell, windows, clock offsets); and
  secret-shaped text left in run.yaml or a Parquet string column.
- **warning**: build-site publishes the run, but not as stored: a measured
  decode cell whose own rows contradict its stored status is published with
  the status they support (rundir/crosscheck.py), and one whose window's
  figures fail the collector's checks (stalls, figures that disagree, token
  counting it cannot trust: rundir/recheck.py) as an Error naming them; an
  edited run allowed by `--allow-edited` is published marked as edited after
  measurement.

Problem texts never hold a secret: the secret check names the file, field
and row, never the value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from rundir import contract, crosscheck, identity, manifest, recheck, words
from rundir.contract import ContractError
from rundir.io import RunData, load_yaml, read_run, read_run_info
from rundir.redact import redact, redact_tree
from rundir.runsearch import (
    CHECKED_FILES,
    DATA_FOLDER,
    RUN_FOLDER,
    escaping_file,
    folder_problem,
    no_runs,
    search,
)

ERROR = "error"  # build-site refuses the run
WARNING = "warning"  # build-site publishes the run, differently than stored
ALLOW_EDITED_FLAG = "--allow-edited"
RECHECK = "the site builder's re-check of the raw data"
SECRET = ("holds secret-shaped text (an API key, token, password or private key); a run "
          "directory is published whole, so remove it (the collector writes such text redacted)")
# The model's answer, as the collector keeps it: only the run's own key is removed from
# it there (rundir.redact.redact_literals), and a model may well write `api_key = "..."`;
# judging it by shape would refuse runs for what the model said.
MODEL_TEXT = frozenset({"content_tail", "reasoning_tail"})
_WHERE = re.compile(r"(?P<file>.+?)(?::\d+)?:(?: line \d+:)? (?P<rest>.*)", re.DOTALL)
_FIELD = re.compile(r"(?P<field>(?:field|column|columns) [^:]+): (?P<message>.*)", re.DOTALL)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a run: `text` is the one line as build-site words it
    (after its `error: `), which names the file and, where there is one, the field."""

    level: str  # ERROR or WARNING
    text: str
    file: str | None = None  # when the text does not open with it

    @property
    def line(self) -> str:
        """`LEVEL: FILE: field: message`, as printed."""
        return f"{self.level}: {self.text}"

    def parts(self) -> tuple[str, str | None, str]:
        """(file, field or None, message), read back from the text."""
        if self.file is not None:
            return self.file, None, self.text
        where = _WHERE.fullmatch(self.text)
        if where is None:
            return "", None, self.text
        rest = where["rest"]
        named = _FIELD.fullmatch(rest)
        if named is None:
            return where["file"], None, rest
        return where["file"], named["field"], named["message"]

    def to_dict(self) -> dict[str, Any]:
        file, fld, message = self.parts()
        return {"level": self.level, "file": file, "field": fld, "message": message}


@dataclass
class RunReport:
    """What validating one run (or one refused symlink) found."""

    path: Path
    run_id: str | None = None
    problems: list[Problem] = field(default_factory=list)
    source_key: str | None = None  # an imported run's (rundir.identity), for duplicates

    def ok(self, strict: bool = False) -> bool:
        """No error (and, when strict, no warning either)."""
        return not any(p.level == ERROR or strict for p in self.problems)

    def to_dict(self, strict: bool = False) -> dict[str, Any]:
        return {"path": str(self.path), "run_id": self.run_id, "ok": self.ok(strict),
                "problems": [p.to_dict() for p in self.problems]}


# -- the manifest --------------------------------------------------------------


def survey(run_dir: Path) -> tuple[list[manifest.Edit], dict[str, manifest.Hash]]:
    """(files that differ from the run's manifest, {name: hash} of the checked files),
    from one read of each: the builder keys its cache on the same hashes."""
    return manifest.survey(run_dir, CHECKED_FILES, CHECKED_FILES[:-1])  # the manifest lists not itself


# How build-site and `bench validate` end the line; `bench upload`, which has no such
# flag and stores runs only as measured, ends it otherwise (rundir/upload.py).
EDITED_HINT = f"; {ALLOW_EDITED_FLAG} publishes it marked as edited after measurement"


def edited_line(run_dir: Path, edits: Sequence[manifest.Edit]) -> str:
    """The one line refusing a run edited after measurement."""
    more = f" (and {len(edits) - 1} more file{'s' if len(edits) > 2 else ''})" \
        if len(edits) > 1 else ""
    return f"{edits[0].line(run_dir)}{more}{EDITED_HINT}"


def edited_warnings(run_dir: Path, edits: Sequence[manifest.Edit]) -> list[Problem]:
    """An allowed edited run: what its page will say, file by file."""
    return [Problem(WARNING, f"{e.line(run_dir)}; published marked as edited after measurement "
                             f"({ALLOW_EDITED_FLAG})") for e in edits]


# -- secrets -------------------------------------------------------------------


def _leaves(value: Any, path: str = "") -> Iterable[tuple[str, str, Any]]:
    """(dotted field path, last key, value) of every scalar in parsed YAML."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}[{i}]")
    else:
        yield path, path.rpartition(".")[2].partition("[")[0], value


def _secret(key: str, value: Any) -> bool:
    if not isinstance(value, str):
        return False
    if redact(value) != value:
        return True
    return bool(key) and redact_tree({key: value}) != {key: value}


def secret_problems(data: RunData) -> list[str]:
    """One line per field of run.yaml and per Parquet string column holding
    secret-shaped text (rundir.redact's shapes), naming it but never the text."""
    run_dir = Path(data.path)
    found = []
    yaml_path = run_dir / contract.RUN_YAML
    for path, key, value in _leaves(load_yaml(yaml_path)):
        if _secret(key, value):
            found.append(f"{yaml_path}: field {path}: {SECRET}")
    tables = ((contract.CELLS_FILE, data.cells), (contract.REQUESTS_FILE, data.requests),
              (contract.SERVER_METRICS_FILE, data.server_metrics),
              (contract.GPU_METRICS_FILE, data.gpu_metrics), (contract.WINDOWS_FILE, data.windows),
              (contract.CLOCK_OFFSETS_FILE, data.clock_offsets))
    for name, table in tables:
        for col in table.schema:
            if col.name in MODEL_TEXT or not (pa.types.is_string(col.type)
                                              or pa.types.is_large_string(col.type)):
                continue
            values = table.column(col.name)
            bad = [v for v in pc.unique(values).to_pylist() if _secret("", v)]
            if bad:
                row = values.to_pylist().index(bad[0])
                found.append(f"{run_dir / name}: column {col.name}: row {row}: {SECRET}")
    return found


# -- the cross-check of statuses -----------------------------------------------


def recheck_reason(stored: str, problems: list[str], reason: str | None) -> str:
    """The reason of a cell the builder's re-check demoted: the checks that
    refuse it first (the Error legend reads the causes from them), then that
    the collector stored another status, and the collector's own reason."""
    said = f"; collector's reason: {reason}" if reason else ""
    label = words.status_label(stored)
    return f"{'; '.join(problems)} (found by {RECHECK}, stored as {label} by the collector){said}"


def checked_run(run_dir: Path) -> tuple[RunData, list[str], dict[crosscheck.Key, crosscheck.Finding]]:
    """(the run read under the contract, its secret problems, its cross-check findings).

    ContractError (one line) for anything read_run refuses. No findings for a
    run with secrets (refused anyway) or an imported one without per-request rows
    (nothing to judge)."""
    data = read_run(run_dir)
    secrets = secret_problems(data)
    if secrets or (data.imported and not data.peer_requests):
        return data, secrets, {}
    peer = data.peer_requests  # another tool's run: its queue check (rundir/crosscheck.py)
    return data, secrets, crosscheck.run_findings(data.cells, data.requests, data.server_metrics, peer)


def rechecked_cells(data: RunData, found: dict[crosscheck.Key, crosscheck.Finding]) -> pa.Table:
    """cells.parquet with each measured decode cell whose rows contradict its stored
    status given the status they support, the reason saying what the re-check
    found and what the collector had stored (the Error legend reads the cause)."""
    if not found:
        return data.cells
    rows = data.cells.to_pylist()
    for row in rows:
        hit = found.get((row["phase"], row["context"], row["concurrency"]))
        if hit is not None:
            row["reason"] = recheck_reason(row["status"], [hit.problem], row.get("reason"))
            row["status"] = hit.status
    return pa.Table.from_pylist(rows, schema=data.cells.schema)


def demoted_line(run_dir: Path, key: crosscheck.Key, stored: str, published: str,
                 problems: list[str]) -> str:
    """A re-check finding as one line: the cell, what is published instead, why."""
    phase, ctx, conc = key
    return (f"{Path(run_dir) / contract.CELLS_FILE}: field status: {phase} cell context {ctx} "
            f"concurrency {conc}: stored as {words.status_label(stored)}, published as "
            f"{words.status_label(published)}: {'; '.join(problems)} (found by {RECHECK})")


# -- one run, many runs --------------------------------------------------------


def one_line(exc: BaseException, where: Path) -> str:
    """A single error line for a failed run: the contract's message, or where + what."""
    text = " ".join(str(exc).split())
    if isinstance(exc, ContractError) and text:
        return text
    return f"{where}: {type(exc).__name__}: {text}" if text else f"{where}: {type(exc).__name__}"


def validate_run(run_dir: Path, root: Path | None = None, folder: str = RUN_FOLDER,
                 allow_edited: bool = False) -> RunReport:
    """Every problem build-site would find with the run, in the order it looks.

    `root`: the folder its contract files must not lead out of (default: the
    run's own; `folder` names it in the line). A refusal stops the checks
    where build-site stops reading the run.
    """
    run_dir = Path(run_dir)
    report = RunReport(run_dir)
    try:
        report.run_id = read_run_info(run_dir).run_id
    except Exception:  # noqa: BLE001 - read again below, where its problem is reported
        pass
    problem = escaping_file(run_dir, (root or run_dir).resolve(), folder)
    if problem is not None:
        report.problems.append(Problem(ERROR, problem))
        return report
    edits, _ = survey(run_dir)
    if edits and not allow_edited:
        report.problems.append(Problem(ERROR, edited_line(run_dir, edits)))
        return report
    report.problems += edited_warnings(run_dir, edits)
    try:
        data, secrets, found = checked_run(run_dir)
    except Exception as exc:  # noqa: BLE001 - one line, as build-site reports it
        report.problems.append(Problem(ERROR, one_line(exc, run_dir)))
        return report
    report.problems += [Problem(ERROR, s) for s in secrets]
    report.source_key = identity.source_key(data.info, data.cells)
    stored = {(r["phase"], r["context"], r["concurrency"]): r["status"]
              for r in data.cells.select(["phase", "context", "concurrency", "status"]).to_pylist()}
    report.problems += [Problem(WARNING, demoted_line(run_dir, key, stored[key], f.status, [f.problem]))
                        for key, f in sorted(found.items())]
    if (data.imported and not data.peer_requests) or secrets:
        return report
    try:  # the figures' checks, on the cells as published after the cross-check
        figures = recheck.run_figure_problems(data, rechecked_cells(data, found))
    except Exception as exc:  # noqa: BLE001 - one line, as build-site reports it
        report.problems.append(Problem(ERROR, one_line(exc, run_dir)))
        return report
    report.problems += [Problem(WARNING, demoted_line(run_dir, key, stored[key], contract.ERROR,
                                                     problems))
                        for key, problems in sorted(figures.items())]
    return report


def same_source_line(path: Path, first: Path) -> str:
    """build-site's warning for an imported run whose source an earlier run holds."""
    return (f"skipped {path}: the same source as {first} (the same published numbers), "
            "which is published")


def duplicate_id_line(path: Path, run_id: str, first: Path) -> str:
    """build-site's refusal of a run whose id an earlier run of the build has."""
    return f"{Path(path) / contract.RUN_YAML}: field run_id: {run_id!r} is also used by {first}"


def across_runs(reports: list[RunReport]) -> None:
    """build-site's checks across the runs of one data folder, in its order: of
    the runs it would publish, an imported source held twice is published once
    (a warning) and a run id used twice is refused the second time (an error)."""
    sources: dict[str, Path] = {}
    ids: dict[str, Path] = {}
    for r in reports:
        if not r.ok() or r.run_id is None:
            continue
        if r.source_key is not None:
            if r.source_key in sources:
                r.problems.append(Problem(WARNING, same_source_line(r.path, sources[r.source_key]),
                                          file=str(r.path)))
                continue
            sources[r.source_key] = r.path
        if r.run_id in ids:
            r.problems.append(Problem(ERROR, duplicate_id_line(r.path, r.run_id, ids[r.run_id])))
            continue
        ids[r.run_id] = r.path


def validate_paths(paths: Iterable[Path], allow_edited: bool = False) -> list[RunReport]:
    """Validate each path: a run directory as itself, any other folder as build-site
    searches --data (every run below it, each symlink the search refuses, and the
    checks across its runs)."""
    reports: list[RunReport] = []
    for path in paths:
        path = Path(path)
        if (path / contract.RUN_YAML).is_file():
            reports.append(validate_run(path, allow_edited=allow_edited))
            continue
        problem = folder_problem(path)
        if problem is not None:
            reports.append(RunReport(path, None, [Problem(ERROR, problem)]))
            continue
        dirs, refused = search(path)
        if not dirs and not refused:
            reports.append(RunReport(path, None, [Problem(ERROR, no_runs(path))]))
        reports += [RunReport(link, None, [Problem(ERROR, why)]) for link, why in refused]
        found = [validate_run(d, path, DATA_FOLDER, allow_edited) for d in dirs]
        across_runs(found)
        reports += found
    return reports
