"""`build-site` under faults (issue 9): bad runs are skipped in one line while
the good ones publish; the build never touches files outside --out; the cache
is not published; overlapping folders are refused."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from rundir import contract
from site_builder import load
from site_builder.aggregate import code_salt
from site_builder.cli import main
from site_builder.pages import Pages
from site_builder.serve import serve_in_thread
from site_builder.sitewriter import default_cache_dir
from tests.support.synthetic_runs import make_imported_run, make_measured_run


def _run(data: Path, run_id: str, seed: int = 0) -> Path:
    return make_measured_run(data / run_id, run_id=run_id, contexts=[1024], concurrency=[1, 2],
                             duration_s=0.5, seed=seed)


def _build(data: Path, out: Path, *extra: str):
    return CliRunner().invoke(main, ["--data", str(data), "--out", str(out), "--quiet", *extra])


def _lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def _tree_digest(root: Path) -> dict[str, str]:
    """Every file under root (symlinks not followed) with a hash of its bytes."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            if not p.is_symlink():
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# --------------------------------------------------------------------------
# A bad run is skipped in one line; the good one publishes
# --------------------------------------------------------------------------


def _yaml(path: str, value: object) -> Callable[[Path], None]:
    def apply(run_dir: Path) -> None:
        data = yaml.safe_load((run_dir / contract.RUN_YAML).read_text())
        *parents, last = path.split(".")
        node = data
        for p in parents:
            node = node[p]
        node[last] = value
        (run_dir / contract.RUN_YAML).write_text(yaml.safe_dump(data))
    return apply


def _raw_yaml(transform: Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def apply(run_dir: Path) -> None:
        path = run_dir / contract.RUN_YAML
        path.write_bytes(transform(path.read_bytes()))
    return apply


def _rows(name: str, change: Callable[[list[dict]], None]) -> Callable[[Path], None]:
    """Rewrite a Parquet file of the run with pyarrow directly (not the contract's writer)."""
    def apply(run_dir: Path) -> None:
        table = pq.read_table(run_dir / name)
        rows = table.to_pylist()
        change(rows)
        pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), run_dir / name)
    return apply


def _decrease_tokens(rows: list[dict]) -> None:
    """The issue's crafted file: a count drops by 490 inside one request."""
    row = next(r for r in rows if r["purpose"] == "measure" and len(r["chunk_tokens"]) > 3)
    counts = [t + 500 for t in row["chunk_tokens"]]
    counts[2] = counts[1] - 490
    row["chunk_tokens"] = counts


def _ns_back(rows: list[dict]) -> None:
    row = next(r for r in rows if len(r["chunk_ns"]) > 3)
    row["chunk_ns"][2] = row["chunk_ns"][0] - 1


def _dup_request(rows: list[dict]) -> None:
    rows[1]["request_id"] = rows[0]["request_id"]


def _dup_cell(rows: list[dict]) -> None:
    rows.append(dict(rows[-1]))


def _warmup_nan(rows: list[dict]) -> None:
    next(r for r in rows if r["phase"] == "decode")["warmup_s"] = float("nan")


def _set_first(column: str, value: float) -> Callable[[list[dict]], None]:
    def change(rows: list[dict]) -> None:
        rows[0][column] = value
    return change


def _escaping_symlink(run_dir: Path) -> None:
    """requests.parquet replaced by a link to a (valid) file outside the data folder."""
    outside = run_dir.parents[1] / "elsewhere.parquet"
    (run_dir / contract.REQUESTS_FILE).rename(outside)
    (run_dir / contract.REQUESTS_FILE).symlink_to(outside)


def _run_dir_linked_outside(run_dir: Path) -> None:
    """The run directory itself replaced by a link to a (valid) run outside the data folder."""
    outside = run_dir.parents[1] / "elsewhere-run"
    run_dir.rename(outside)
    run_dir.symlink_to(outside, target_is_directory=True)


def _run_dir_dangling(run_dir: Path) -> None:
    """The run directory replaced by a link to a folder that is gone (a drive unmounted)."""
    shutil.rmtree(run_dir)
    run_dir.symlink_to(run_dir.parents[1] / "gone", target_is_directory=True)


def _drop_cell(phase: str, concurrency: int) -> Callable[[list[dict]], None]:
    """A cell's row deleted by hand; its raw rows stay in requests.parquet."""
    def change(rows: list[dict]) -> None:
        rows[:] = [r for r in rows if (r["phase"], r["concurrency"]) != (phase, concurrency)]
    return change


BAD_RUNS = [
    # (id, imported?, mutation, file, what the line says after the file)
    ("yaml-duration-nan", False, _yaml("parameters.duration_s", float("nan")), contract.RUN_YAML,
     "field parameters.duration_s: expected a finite number, got nan"),
    ("yaml-vram-inf", False, _yaml("hardware.vram_gb_per_gpu", float("inf")), contract.RUN_YAML,
     "field hardware.vram_gb_per_gpu: expected a finite number, got inf"),
    ("yaml-gpu-count-overflow", False, _yaml("hardware.gpu_count", 2**64), contract.RUN_YAML,
     "field hardware.gpu_count: expected an integer that fits in 64 bits"),
    ("yaml-measured-at-not-iso", False, _yaml("measured_at", "Nov 29, 2025"), contract.RUN_YAML,
     "field measured_at: expected an ISO 8601 date-time"),
    ("yaml-not-utf8", False, _raw_yaml(lambda b: b.replace(b"tester", b"t\xe9ster")),
     contract.RUN_YAML, "not UTF-8 text"),
    ("yaml-duplicate-key", False, _raw_yaml(lambda b: b + b"run_id: other\n"), contract.RUN_YAML,
     "key 'run_id' appears twice"),
    ("requests-tokens-decrease", False, _rows(contract.REQUESTS_FILE, _decrease_tokens),
     contract.REQUESTS_FILE, "column chunk_tokens: decreases in request"),
    ("requests-ns-back-in-time", False, _rows(contract.REQUESTS_FILE, _ns_back), contract.REQUESTS_FILE,
     "column chunk_ns: goes back in time in request"),
    ("requests-duplicate-id", False, _rows(contract.REQUESTS_FILE, _dup_request), contract.REQUESTS_FILE,
     "column request_id:"),
    ("cells-duplicate-row", False, _rows(contract.CELLS_FILE, _dup_cell), contract.CELLS_FILE,
     "columns phase, context, concurrency: cell"),
    ("cells-warmup-nan", False, _rows(contract.CELLS_FILE, _warmup_nan), contract.CELLS_FILE,
     "column warmup_s: expected a finite number, got nan"),
    ("imported-pub-nan", True, _rows(contract.CELLS_FILE, _set_first("pub_total_tok_s", float("nan"))),
     contract.CELLS_FILE, "column pub_total_tok_s: expected a finite number, got nan"),
    ("imported-pub-negative", True,
     _rows(contract.CELLS_FILE, _set_first("pub_total_tok_s", -18786.9)), contract.CELLS_FILE,
     "column pub_total_tok_s: expected >= 0, got -18786.9"),
    ("symlink-out-of-data", False, _escaping_symlink, contract.REQUESTS_FILE,
     "a symlink leading outside the data folder"),
    # the run directory itself a symlink: "" names the folder, not a file in it
    ("run-dir-symlink-out-of-data", False, _run_dir_linked_outside, "",
     "a symlinked folder leading outside the data folder (to "),
    ("run-dir-symlink-dangling", False, _run_dir_dangling, "", "a symlink that leads nowhere"),
    ("cells-row-deleted", False, _rows(contract.CELLS_FILE, _drop_cell("decode", 2)),
     contract.REQUESTS_FILE, "columns phase, context, concurrency: cell (decode, 1024, 2) has "),
]


def _imported(data: Path, run_id: str) -> Path:
    return make_imported_run(data / run_id, run_id=run_id, cells=[
        {"phase": "decode", "context": 1024, "concurrency": 1, "status": "valid",
         "total_tok_s": 100.0, "ttft_ms": 50.0},
    ])


@pytest.mark.parametrize("imported,mutate,file,says", [b[1:] for b in BAD_RUNS],
                         ids=[b[0] for b in BAD_RUNS])
def test_bad_run_is_one_line_and_the_good_one_publishes(tmp_path: Path, imported: bool,
                                                        mutate, file: str, says: str) -> None:
    data, out = tmp_path / "data", tmp_path / "site"
    _run(data, "good")
    bad = _imported(data, "zz-bad") if imported else _run(data, "zz-bad", seed=1)
    mutate(bad)
    res = _build(data, out, "--skip-invalid")
    assert res.exit_code == 0, res.output
    assert _lines(res.stderr) == [f"warning: skipped {bad / file}: {_rest(res.stderr, bad, file)}"]
    assert says in res.stderr and "Traceback" not in res.output
    index = (out / "index.html").read_text(encoding="utf-8")
    assert "runs/good/index.html" in index and "zz-bad" not in index
    assert not (out / "runs" / "zz-bad").exists()
    res = _build(data, out)  # without --skip-invalid: the same line as an error, exit 1
    assert res.exit_code == 1
    assert len(_lines(res.stderr)) == 1 and _lines(res.stderr)[0].startswith(f"error: {bad / file}")


def _rest(stderr: str, bad: Path, file: str) -> str:
    return stderr.strip().split(f"{bad / file}: ", 1)[1]


def test_issue_repro_nan_in_one_run_yaml_subprocess(cli, tmp_path: Path) -> None:
    """The issue: one NaN in any run.yaml crashed the whole build, even with --skip-invalid."""
    _run(tmp_path / "data", "good")
    bad = _run(tmp_path / "data", "nan-run", seed=1)
    text = (bad / contract.RUN_YAML).read_text().replace("duration_s: 0.5", "duration_s: .nan")
    (bad / contract.RUN_YAML).write_text(text)
    res = cli("build-site", "--data", "data", "--out", "site", "--skip-invalid", cwd=tmp_path)
    assert res.returncode == 0 and "Traceback" not in res.stderr
    assert "warning: skipped data/nan-run/run.yaml: field parameters.duration_s" in res.stderr
    assert (tmp_path / "site" / "runs" / "good" / "index.html").is_file()


# --------------------------------------------------------------------------
# A run that fails to render is skipped like one that fails to load
# --------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["run_page", "cell_pages"])
def test_render_failure_skips_that_run_only(tmp_path: Path, monkeypatch, where: str) -> None:
    data, out = tmp_path / "data", tmp_path / "site"
    _run(data, "good")
    _run(data, "boom", seed=1)
    assert _build(data, out).exit_code == 0  # first published fine
    assert (out / "runs" / "boom" / "index.html").is_file()
    original = getattr(Pages, where)

    def failing(self, run, *a, **kw):  # noqa: ANN001, ANN202
        if run.run_id == "boom":
            raise RuntimeError("template exploded")
        return original(self, run, *a, **kw)

    monkeypatch.setattr(Pages, where, failing)
    monkeypatch.setenv("SPEED_MATRIX_JOBS", "1")
    _run(data, "boom", seed=2)  # new content: its pages must be rendered again
    res = _build(data, out, "--skip-invalid")
    assert res.exit_code == 0, res.output
    assert _lines(res.stderr) == [f"warning: skipped {data / 'boom'}: could not render its "
                                  "pages (RuntimeError: template exploded)"]
    index = (out / "index.html").read_text(encoding="utf-8")
    assert "runs/good/index.html" in index and "runs/boom/" not in index
    assert not (out / "runs" / "boom").exists()  # no half-published run, old pages gone
    res = _build(data, out)
    assert res.exit_code == 1 and len(_lines(res.stderr)) == 1
    assert _lines(res.stderr)[0].startswith(f"error: {data / 'boom'}: could not render")
    assert "Traceback" not in res.output


# --------------------------------------------------------------------------
# Folders: refused clearly when they overlap dangerously
# --------------------------------------------------------------------------


def _folders(tmp: Path, case: str) -> tuple[list[str], str]:
    data = tmp / "data"
    if case == "out-is-data":
        return ["--data", str(data), "--out", str(data)], "is the --data folder"
    if case == "out-is-data-spelled-differently":
        return ["--data", str(data), "--out", f"{data}/./"], "is the --data folder"
    if case == "out-inside-data":
        return ["--data", str(data), "--out", str(data / "site")], "is inside --data"
    if case == "out-symlink-into-data":
        (tmp / "link").symlink_to(data)
        return ["--data", str(data), "--out", str(tmp / "link" / "site")], "is inside --data"
    if case in ("data-inside-out-runs", "data-inside-out-static", "data-inside-out-data"):
        sub = case.rsplit("-", 1)[1]
        inner = tmp / "site" / sub / "src"
        _run(inner, "inner")
        return ["--data", str(inner), "--out", str(tmp / "site")], f"under {sub}/"
    if case == "cache-inside-out":
        return ["--data", str(data), "--out", str(tmp / "site"), "--cache",
                str(tmp / "site" / "cache")], "--cache"
    if case == "cache-is-out":
        return ["--data", str(data), "--out", str(tmp / "site"), "--cache",
                str(tmp / "site")], "must not be published"
    raise AssertionError(case)


FOLDER_CASES = ["out-is-data", "out-is-data-spelled-differently", "out-inside-data",
                "out-symlink-into-data", "data-inside-out-runs", "data-inside-out-static",
                "data-inside-out-data", "cache-inside-out", "cache-is-out"]


@pytest.mark.parametrize("case", FOLDER_CASES)
def test_overlapping_folders_refused(tmp_path: Path, case: str) -> None:
    _run(tmp_path / "data", "r0")
    args, says = _folders(tmp_path, case)
    before = _tree_digest(tmp_path)
    res = CliRunner().invoke(main, [*args, "--quiet"])
    assert res.exit_code == 1 and "Traceback" not in res.output
    lines = _lines(res.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: --") and says in lines[0], lines
    assert _tree_digest(tmp_path) == before  # nothing written, nothing deleted


def test_data_elsewhere_inside_out_builds_and_is_never_deleted(tmp_path: Path) -> None:
    """--data inside --out where the builder writes nothing is allowed; a manifest
    naming its files does not delete them."""
    out = tmp_path / "site"
    data = out / "sources"
    _run(data, "r0")
    assert _build(data, out).exit_code == 0
    manifest = default_cache_dir(out) / "manifest.json"
    entries = json.loads(manifest.read_text())
    entries["sources/r0/run.yaml"] = "x"
    entries["sources/r0/cells.parquet"] = "y"
    manifest.write_text(json.dumps(entries))
    res = _build(data, out)
    assert res.exit_code == 0
    assert (data / "r0" / contract.RUN_YAML).is_file() and (data / "r0" / contract.CELLS_FILE).is_file()
    assert "ignored 2 path(s)" in res.stderr


# --------------------------------------------------------------------------
# The cache: never published, never able to reach outside --out
# --------------------------------------------------------------------------


def _built(tmp: Path) -> tuple[Path, Path, Path]:
    data, out = tmp / "data", tmp / "site"
    _run(data, "r0")
    _run(data, "r1", seed=1)
    res = _build(data, out)
    assert res.exit_code == 0, res.output
    return data, out, default_cache_dir(out)


def test_cache_outside_the_published_tree_and_no_local_paths(tmp_path: Path) -> None:
    data, out, cache = _built(tmp_path)
    assert cache.parent == out.parent and cache.name == ".site-build-cache"
    assert (cache / "manifest.json").is_file() and (cache / "digests.json").is_file()
    assert not any(p.name.startswith(".") for p in out.rglob("*"))
    local = [str(tmp_path), str(tmp_path.resolve()), str(data.resolve())]
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", "replace")
            assert not any(s in text for s in local), path
    assert str(data) in (cache / "digests.json").read_text()  # the cache keeps them


def _victim(tmp: Path) -> Path:
    victim = tmp / "victim.txt"
    victim.write_text("precious")
    return victim


MANIFEST_ATTACKS = [
    # (id, manifest names; `V` is replaced by the victim's absolute path)
    ("parent-relative", ["../victim.txt"]),
    ("absolute", ["V"]),
    ("climbs-from-inside", ["runs/../../victim.txt"]),
    ("dot-then-parent", ["./../victim.txt"]),
    ("through-symlinked-folder", ["link/victim.txt"]),
    ("symlinked-file", ["runs/r0/leak.txt"]),
    ("backslashes", ["..\\victim.txt"]),
    ("many-at-once", ["../victim.txt", "V", "link/victim.txt", "../../etc/passwd"]),
]


@pytest.mark.parametrize("names", [m[1] for m in MANIFEST_ATTACKS],
                         ids=[m[0] for m in MANIFEST_ATTACKS])
def test_crafted_manifest_cannot_delete_outside_out(tmp_path: Path, names: list[str]) -> None:
    data, out, cache = _built(tmp_path)
    victim = _victim(tmp_path)
    (out / "link").symlink_to(tmp_path, target_is_directory=True)
    (out / "runs" / "r0" / "leak.txt").symlink_to(victim)
    manifest = cache / "manifest.json"
    entries = json.loads(manifest.read_text())
    for name in names:
        entries[str(victim) if name == "V" else name] = "crafted"
    manifest.write_text(json.dumps(entries))
    res = _build(data, out)
    assert res.exit_code == 0, res.output
    assert victim.read_text() == "precious"
    lines = _lines(res.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"warning: {manifest}: ignored ")
    assert "outside --out" in lines[0]
    assert json.loads(manifest.read_text()).keys().isdisjoint(names)  # forgotten afterwards
    assert _build(data, out).stderr == ""  # so the next build is quiet


@pytest.mark.parametrize("content", [
    "[\"../victim.txt\"]", "{\"../victim.txt\": 5, \"index.html\": 7}", "\"text\"", "{not json",
    "{\"\": \"x\", \"\\u0000\": \"y\"}",
], ids=["a-list", "non-string-keys-values", "a-string", "not-json", "empty-and-nul-names"])
def test_malformed_manifest_is_never_trusted(tmp_path: Path, content: str) -> None:
    data, out, cache = _built(tmp_path)
    victim = _victim(tmp_path)
    (cache / "manifest.json").write_text(content)
    res = _build(data, out)
    assert res.exit_code == 0 and "Traceback" not in res.output
    assert victim.read_text() == "precious" and (out / "index.html").is_file()
    assert len(_lines(res.stderr)) <= 1


def test_legacy_cache_inside_out_is_confined_adopted_and_removed(tmp_path: Path) -> None:
    """A site folder built before the cache moved (and shared with a crafted
    `.cache/manifest.json`): nothing outside is deleted and the old cache goes."""
    data, out = tmp_path / "data", tmp_path / "site"
    _run(data, "r0")
    victim = _victim(tmp_path)
    legacy = out / ".cache"
    (legacy / "aggregates").mkdir(parents=True)
    (legacy / "aggregates" / "x.json").write_text("{}")
    (legacy / "digests.json").write_text(json.dumps({str(data / "r0"): ["sig", "0" * 64]}))
    (out / "runs" / "gone").mkdir(parents=True)
    (out / "runs" / "gone" / "index.html").write_text("stale")
    (legacy / "manifest.json").write_text(json.dumps(
        {"../victim.txt": "a", str(victim): "b", "runs/gone/index.html": "c"}))
    res = _build(data, out)
    assert res.exit_code == 0, res.output
    assert victim.read_text() == "precious"
    assert not (out / "runs" / "gone").exists()  # the old build's own stale page is cleaned
    assert not legacy.exists()
    assert "ignored 2 path(s)" in res.stderr


def test_symlinked_folder_in_out_refused_in_one_line(tmp_path: Path) -> None:
    """A site folder whose runs/ leads elsewhere: the build writes nothing there."""
    data, out = tmp_path / "data", tmp_path / "site"
    _run(data, "r0")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir()
    (out / "runs").symlink_to(elsewhere, target_is_directory=True)
    res = _build(data, out)
    assert res.exit_code == 1 and "Traceback" not in res.output
    lines = _lines(res.stderr)
    assert len(lines) == 1 and "leads outside --out" in lines[0], lines
    assert list(elsewhere.iterdir()) == []


def test_crafted_digest_cannot_write_outside_the_cache(tmp_path: Path) -> None:
    """digests.json names aggregate files: a digest like ../../victim is recomputed."""
    data, out, cache = _built(tmp_path)
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    digests = json.loads((cache / "digests.json").read_text())
    run0 = str(data / "r0")
    digests[run0] = [load.file_signature(data / "r0", code_salt()), "../../victim", []]
    (cache / "digests.json").write_text(json.dumps(digests))
    _run(data, "r0", seed=5)  # force re-aggregation of r0 under the crafted digest
    digests[run0][0] = load.file_signature(data / "r0", code_salt())
    (cache / "digests.json").write_text(json.dumps(digests))
    res = _build(data, out)
    assert res.exit_code == 0, res.output
    assert victim.read_text() == "precious"
    assert not (tmp_path / "victim.details.json").exists()


def test_planted_temporary_names_are_never_written_through(tmp_path: Path) -> None:
    """Symlinks planted at the temporary names a write would use: skipped, not followed."""
    from rundir import io as rundir_io

    data, out, _cache = _built(tmp_path)
    victim = _victim(tmp_path)
    _run(data, "r2", seed=2)  # so index.html has to be written again
    start = int(repr(rundir_io._SEQUENCE)[6:-1])  # itertools.count(N) -> N
    for n in range(start, start + 500):
        (out / f".index.html.{os.getpid()}.{n}.tmp").symlink_to(victim)
    res = _build(data, out)
    assert res.exit_code == 0, res.output
    assert victim.read_text() == "precious"
    assert "runs/r2/index.html" in (out / "index.html").read_text(encoding="utf-8")


# --------------------------------------------------------------------------
# `build-site serve` never serves hidden files or what lies outside the folder
# --------------------------------------------------------------------------


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_serve_hides_cache_and_escaping_links(tmp_path: Path) -> None:
    data, out, _cache = _built(tmp_path)
    (out / ".cache").mkdir()
    (out / ".cache" / "digests.json").write_text(json.dumps({str(data): 1}))
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the web")
    (out / "leak.txt").symlink_to(secret)
    (out / "inside.html").symlink_to(out / "index.html")
    server, base = serve_in_thread(out)
    try:
        assert _status(base + "index.html") == 200
        assert _status(base + "inside.html") == 200  # a link that stays inside is fine
        assert _status(base + ".cache/digests.json") == 404
        assert _status(base + "%2ecache/digests.json") == 404
        assert _status(base + "leak.txt") == 404
        assert _status(base + "runs/r0/../../leak.txt") == 404
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------
# Symlinked run folders: followed inside --data, refused in one line otherwise
# --------------------------------------------------------------------------


def test_symlinked_run_folders_followed_inside_refused_outside_subprocess(
        cli, tmp_path: Path) -> None:
    """Before: every symlinked folder under --data was dropped without a word (exit 0)."""
    data = tmp_path / "data"
    _run(data, "good")
    _run(data / ".stash", "stashed", seed=1)  # hidden: searched only through the link below
    outside = _run(tmp_path / "elsewhere", "outsider", seed=2)
    (data / "alias").symlink_to(data / "good", target_is_directory=True)  # published once
    (data / "linked").symlink_to(data / ".stash" / "stashed", target_is_directory=True)
    (data / "loop").symlink_to(data, target_is_directory=True)  # no endless search
    (data / "zz-out").symlink_to(outside, target_is_directory=True)
    (data / "zz-gone").symlink_to(tmp_path / "gone", target_is_directory=True)
    res = cli("build-site", "--data", "data", "--out", "site", "--skip-invalid", cwd=tmp_path)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert _lines(res.stderr)[:2] == [
        "warning: skipped data/zz-gone: a symlink that leads nowhere",
        f"warning: skipped data/zz-out: a symlinked folder leading outside the data folder "
        f"(to {outside.resolve()}); refused",
    ]
    assert "Published 2 run(s)" in res.stderr
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "runs/good/index.html" in index and "runs/stashed/index.html" in index
    assert "outsider" not in index and not (tmp_path / "site" / "runs" / "outsider").exists()
    res = cli("build-site", "--data", "data", "--out", "site", cwd=tmp_path)
    assert res.returncode == 1
    assert [ln.split(":")[1] for ln in _lines(res.stderr) if ln.startswith("error:")] == [
        " data/zz-gone", " data/zz-out"]


def test_search_follows_no_link_into_the_output_folder(tmp_path: Path) -> None:
    """--out holds raw copies of runs: a link into it is never a way back in."""
    for rel in ("a", "site/runs/x/raw"):
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / contract.RUN_YAML).write_text("x")
    (tmp_path / "raw-link").symlink_to(tmp_path / "site" / "runs", target_is_directory=True)
    found, refused = load.search(tmp_path, exclude=tmp_path / "site")
    assert [p.name for p in found] == ["a"] and refused == []


def test_hand_deleted_cell_row_is_one_line_subprocess(cli, tmp_path: Path) -> None:
    """The issue: a cell's row deleted from cells.parquet published the run without
    that cell, exit 0, though requests.parquet still held its requests."""
    _run(tmp_path / "data", "good")
    bad = _run(tmp_path / "data", "edited", seed=1)
    _rows(contract.CELLS_FILE, _drop_cell("decode", 1))(bad)
    res = cli("build-site", "--data", "data", "--out", "site", cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert [ln for ln in _lines(res.stderr) if ln.startswith("error:")] == [
        "error: data/edited/requests.parquet: columns phase, context, concurrency: cell "
        "(decode, 1024, 1) has 2 request row(s) but no row in cells.parquet "
        "(each request belongs to a cell of the run)"]


def test_a_pending_cell_row_with_raw_rows_still_publishes(tmp_path: Path) -> None:
    """Only a missing cell row is refused: a pending one holding rows of an attempt
    cut short is a state the collector leaves (and resumes), not a broken run."""
    run = _run(tmp_path / "data", "paused")

    def pend(rows: list[dict]) -> None:
        for r in rows:
            if (r["phase"], r["concurrency"]) == ("decode", 2):
                r.update(status=contract.PENDING, window_start_ns=None, window_end_ns=None)
    _rows(contract.CELLS_FILE, pend)(run)
    res = _build(tmp_path / "data", tmp_path / "site")
    assert res.exit_code == 0, res.output


# --------------------------------------------------------------------------
# `build-site serve` answers hostile paths; never a traceback
# --------------------------------------------------------------------------


HOSTILE_PATHS = [
    # (request line, status); before, the NUL and surrogate cases got no answer
    ("GET /index.html HTTP/1.1", 200),
    ("GET /index.html%00.png HTTP/1.1", 400),
    ("HEAD /index.html%00 HTTP/1.1", 400),
    ("GET /runs%00/ HTTP/1.1", 400),
    ("GET /%ed%a0%80 HTTP/1.1", 400),  # a lone surrogate: no file name holds it
    ("GET /%2e%2e/%2e%2e/secret.txt HTTP/1.1", 404),
    ("GET /..%2f..%2fsecret.txt HTTP/1.1", 404),
    ("GET /..\\..\\secret.txt HTTP/1.1", 404),
    ("GET //etc/passwd HTTP/1.1", 404),
    ("GET http://127.0.0.1/../../secret.txt HTTP/1.1", 404),
    ("GET /%2Fetc%2Fpasswd HTTP/1.1", 404),
    ("GET /%zz HTTP/1.1", 404),
    ("GET /% HTTP/1.1", 404),
    ("GET /%ff%fe HTTP/1.1", 404),
    ("GET /" + "a" * 1000 + " HTTP/1.1", 404),  # a name longer than the OS allows
    ("GET /" + "a/" * 2000 + " HTTP/1.1", 404),  # 4 KB; past 64 KB the stdlib answers 414
]


def _ask(port: int, line: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"{line}\r\nHost: x\r\nConnection: close\r\n\r\n".encode("latin-1"))
        answer = b""
        while block := sock.recv(65536):
            answer += block
    return answer


def test_serve_answers_hostile_paths_without_a_traceback(tmp_path: Path) -> None:
    out = tmp_path / "site"
    (out / "runs").mkdir(parents=True)
    (out / "index.html").write_text("<p>site</p>")
    (tmp_path / "secret.txt").write_text("not for the web")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from site_builder.cli import main; sys.exit(main())",
         "--out", "site", "serve", "--port", "0"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()  # "Serving site at http://127.0.0.1:PORT/ ..."
        assert "http://127.0.0.1:" in first, proc.stderr.read() if proc.poll() is not None else first
        port = int(first.split("http://127.0.0.1:", 1)[1].split("/", 1)[0])
        for line, status in HOSTILE_PATHS:
            answer = _ask(port, line)
            assert answer.startswith(f"HTTP/1.0 {status} ".encode()), (line[:60], answer[:80])
            assert b"not for the web" not in answer
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err and "Exception occurred" not in err, err[-2000:]
    assert err.count("code 400") == 4  # each request logged as usual


def test_an_unforeseen_request_failure_is_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    """Whatever else fails inside a request (here: a handler bug) is one log line,
    not socketserver's 25-line traceback."""
    from site_builder import serve as serve_mod

    def broken(self):  # noqa: ANN001, ANN202
        raise RuntimeError("handler bug")
    monkeypatch.setattr(serve_mod._Handler, "send_head", broken)
    (tmp_path / "index.html").write_text("x")
    server = serve_mod.make_server(tmp_path, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _ask(server.server_address[1], "GET /index.html HTTP/1.1")
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [ln for ln in err.splitlines() if "failed" in ln] == [
        "serve: a request from 127.0.0.1 failed (RuntimeError: handler bug)"]
