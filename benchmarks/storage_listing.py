"""The object-storage listing and mirror pass at the bucket's full size (issue 37, item 6).

    python benchmarks/storage_listing.py [--runs N] [--workdir DIR]
    python benchmarks/storage_listing.py --runs 10000     # the goal's size (the default)

Why not whole builds: benchmarks/storage_scale.py times `build-site` from a
bucket, but a cold build of 10,000 runs takes most of an hour per source on a
small host. What grows with the bucket on a rebuild is the listing and the
mirror pass (site_builder/remote.py), and those are timed here at full size.

How the bucket is filled, cheaply: two real light runs are generated
(benchmarks/_site_scale.py's SHAPE, tests/support/many_runs.py), one is
uploaded with `bench upload`'s code to moto's S3 server
(tests/support/s3server.py), and the other N-1 stored runs are server-side
copies of its files (s3fs copy, in batches) under new keys, each with its own
upload-manifest.json (key and run_id rewritten, the same file list). The
stored runs are thus copies: the listing and the mirror read nothing of a run
beyond its manifest, so they pay the same as for distinct runs, but a build
would refuse the duplicates, so this benchmark builds nothing. The second real
run is kept for the add-one step.

Timed, each in a fresh process (imports included in "process s", not in
"call s"; peak RSS is the child's ru_maxrss):
- listing:  site_builder.remote.listing() of the bucket alone;
- cold:     a first mirror pass into an empty cache folder (all N runs fetched);
- no-op:    the mirror pass again, nothing changed (best of 3);
- add-one:  one more real run uploaded (its own id), then the mirror pass.

Printed: how long filling the bucket took, then a table of the seconds, peak
RSS, runs listed, files and MB fetched, and the S3 requests each step sent by
operation (counted on botocore's before-call event in the child, so the
listing's pages are counted too), and for the listing's pages the keys they
held, the time waited on the server and the time their XML took to parse
here; beside the goals: no-op listing <= 10 s, memory < 4 GB.

Against moto the wait dominates and grows with the bucket: moto's server
scans and sorts every key of the bucket for each page it answers (its
list_objects_v2), so each page costs more the bigger the bucket. At 10,000
runs (50,000 keys, 50 pages) the listing took ~22 s here, ~18 s of it waited
on moto and ~3.5 s parsing; a real bucket's page times were not measured.
Filling 10,000 runs took ~9 minutes on a shared 2-core host; the cold pass ~10.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._site_scale import SHAPE  # noqa: E402
from rundir import upload  # noqa: E402
from rundir.storage import UPLOAD_MANIFEST, manifest_bytes, open_url, run_key  # noqa: E402
from tests.support.many_runs import make_many_runs  # noqa: E402

GOALS = {"noop_s": 10.0, "peak_rss_mb": 4096.0}
BATCH = 500  # stored runs copied per s3fs call (its own concurrency runs inside one call)


def fill(url: str, n: int, work: Path, shape: dict[str, Any] | None = None) -> Path:
    """Store n runs under url (one uploaded, n-1 server-side copies, see the module doc);
    return the extra real run kept apart for the add-one step."""
    shutil.rmtree(work / "runs", ignore_errors=True)
    base, extra = make_many_runs(work / "runs", 2, seed=21, measured=2,
                                 measured_shape=SHAPE if shape is None else shape)
    upload.upload(base, url)
    fs, root = open_url(url)
    key = run_key(base.name)
    manifest = json.loads(fs.cat_file(f"{root}/{key}/{UPLOAD_MANIFEST}"))
    names = sorted(manifest["files"])
    for start in range(1, n, BATCH):
        ids = [f"copy-{i:05d}" for i in range(start, min(start + BATCH, n))]
        fs.copy([f"{root}/{key}/{name}" for _ in ids for name in names],
                [f"{root}/{run_key(i)}/{name}" for i in ids for name in names])
        # the manifests last, as an upload writes them
        fs.pipe({f"{root}/{run_key(i)}/{UPLOAD_MANIFEST}":
                 manifest_bytes({**manifest, "run_id": i, "key": run_key(i)}) for i in ids})
    return extra


def count_requests(fs: Any) -> Counter:
    """{S3 operation: requests sent} through fs from now on, and of the listing's pages:
    "keys listed", "list wait ms" (request sent to answer received: the server's time and
    the transfer) and "list parse ms" (the answer's XML parsed by botocore). From botocore's
    call and parse events, which a paginator's pages pass through too; the pages come one
    after another, so the sums are time the listing spent."""
    counts: Counter = Counter()
    fs.connect()
    marks: list[float] = []

    def sent(model: Any = None, **_: Any) -> None:
        counts[model.name] += 1
        if model.name == "ListObjectsV2":
            marks.append(time.perf_counter())

    def answered(**_: Any) -> None:
        now = time.perf_counter()
        counts["list wait ms"] += round((now - marks.pop()) * 1000)
        marks.append(now)

    def parsed(parsed: Any = None, **_: Any) -> None:
        counts["keys listed"] += int((parsed or {}).get("KeyCount") or 0)
        counts["list parse ms"] += round((time.perf_counter() - marks.pop()) * 1000)

    events = fs.s3.meta.events
    events.register("before-call.s3", sent)
    events.register("before-parse.s3.ListObjectsV2", answered)
    events.register("after-call.s3.ListObjectsV2", parsed)
    return counts


def child(step: str, url: str, cache: str) -> dict[str, Any]:
    """One step, in this (fresh) process: what the parent prints."""
    from site_builder import remote

    fs, root = open_url(url)
    counts = count_requests(fs)
    t = time.perf_counter()
    if step == "listing":
        runs = len(remote.listing(fs, root))
        out: dict[str, Any] = {"runs": runs}
    else:
        done = remote.mirror(url, Path(cache), fs=fs, root=root)
        out = {"runs": len(done.fetched) + len(done.unchanged), "fetched": len(done.fetched),
               "files": done.files, "removed": len(done.removed)}
    out["call_s"] = time.perf_counter() - t
    out["requests"] = dict(counts)
    return out


def timed(step: str, url: str, cache: Path, env: dict[str, str]) -> dict[str, Any]:
    """child(step) in a fresh process, with its wall time and peak RSS."""
    args = [sys.executable, str(Path(__file__).resolve()), "--child", step, url, str(cache)]
    out_path, err_path = cache.parent / f"{step}.out", cache.parent / f"{step}.err"
    t = time.perf_counter()
    with open(out_path, "w") as out_file, open(err_path, "w") as err_file:
        child_proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=out_file, stderr=err_file)
        _, status, usage = os.wait4(child_proc.pid, 0)  # wait4 for the child's ru_maxrss
    seconds = time.perf_counter() - t
    stdout = out_path.read_text()
    if os.waitstatus_to_exitcode(status) != 0:
        lines = err_path.read_text().strip().splitlines()
        raise SystemExit(f"{step} failed: {lines[-1] if lines else status}")
    out = json.loads(stdout.strip().splitlines()[-1])
    return {**out, "process_s": seconds, "rss_mb": usage.ru_maxrss / 1024}


def measure(url: str, n: int, work: Path, env: dict[str, str], *, repeats: int = 3,
            shape: dict[str, Any] | None = None, say: Any = print) -> dict[str, Any]:
    """Fill the bucket with n runs and time the four steps; {step: child's figures}."""
    t = time.perf_counter()
    extra = fill(url, n, work, shape)
    rows: dict[str, Any] = {"fill_s": time.perf_counter() - t}
    say(f"{n} stored runs made in {rows['fill_s']:.1f} s", flush=True)
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    folder = cache / "runs-mirror"

    def step(name: str, kind: str) -> dict[str, Any]:
        got = timed(kind, url, cache, env)
        say(f"{name:8s} {json.dumps(got, sort_keys=True)}", flush=True)
        return got

    rows["listing"] = step("listing", "listing")
    rows["cold"] = step("cold", "mirror")
    rows["cold"]["mb"] = _size(folder) / 1e6
    for _ in range(repeats):
        got = step("no-op", "mirror")
        if "no-op" not in rows or got["process_s"] < rows["no-op"]["process_s"]:
            rows["no-op"] = got
    upload.upload(extra, url)
    rows["add-one"] = step("add-one", "mirror")
    rows["add-one"]["mb"] = _size(folder) / 1e6 - rows["cold"]["mb"]
    return rows


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def table(n: int, rows: dict[str, Any]) -> str:
    lines = [f"{n} runs   process s  call s  peak MB  runs listed  files  MB fetched  S3 requests "
             "(list pages: waited on the server, parsed here, summed)"]
    for step in ("listing", "cold", "no-op", "add-one"):
        r = rows[step]
        req = r["requests"]
        mb = f"{r['mb']:.2f}" if "mb" in r else "-"
        sent = ", ".join(f"{op} {k}" for op, k in sorted(req.items()) if op[0].isupper())
        sent += (f"; {req.get('keys listed', 0)} keys listed; pages: {req.get('list wait ms', 0)} ms "
                 f"waited, {req.get('list parse ms', 0)} ms parsed")
        lines.append(f"{step:8s} {r['process_s']:11.2f} {r['call_s']:7.2f} {r['rss_mb']:8.0f} "
                     f"{r['runs']:12d} {r.get('files', 0):6d} {mb:>11s}  {sent}")
    peak = max(rows[s]["rss_mb"] for s in ("listing", "cold", "no-op", "add-one"))
    noop = rows["no-op"]["process_s"]
    lines.append(f"goals: no-op listing <= {GOALS['noop_s']:.0f} s: {noop:.2f} s "
                 f"({'met' if noop <= GOALS['noop_s'] else 'MISSED'}); memory < 4 GB: peak "
                 f"{peak:.0f} MB ({'met' if peak < GOALS['peak_rss_mb'] else 'MISSED'})")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        print(json.dumps(child(*sys.argv[2:])))
        return
    from tests.support.s3server import s3_server

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/storage-listing"))
    a = ap.parse_args()
    if a.runs < 1:
        ap.error("--runs: expected a positive number of runs")
    a.workdir.mkdir(parents=True, exist_ok=True)
    with s3_server() as server:
        os.environ.update(server.env())
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        fs, _ = open_url("s3://runs")
        fs.mkdir("runs")
        rows = measure("s3://runs", a.runs, a.workdir, env)
    print("\n" + table(a.runs, rows))


if __name__ == "__main__":
    main()
