"""Building from object storage beside building from a local folder (issue 37, item 6).

    python benchmarks/storage_scale.py [--runs N] [--workdir DIR]
    python benchmarks/storage_scale.py --runs 10000 --workdir /big/disk   # the goal's size

N light measured runs (benchmarks/_site_scale.py's shape, ~40 KB of raw data
each) are generated once per --workdir, uploaded with `bench upload`'s code
to moto's S3 server (tests/support/s3server.py; in memory: 10,000 runs hold
~0.5 GB there), then timed, each build as `build-site` in a fresh process
(imports included), from outside:

- local:  --data FOLDER: cold, no-op, add-one (one more run moved in);
- s3:     --data s3://...: cold (the mirror fills), no-op (one listing),
          add-one (one more run uploaded), all with the cache kept;
  each step by local then by s3, alternated; the no-op three times (best kept);
- empty:  --data s3://... with an empty cache and an empty --out after the
          add-one: what a CI runner without a cache step pays;
- restored: the s3 add-one again on copies of --cache and --out taken just
          before it (new inodes, same paths and mtimes): a CI runner whose
          cache step restored both folders;
- pulled: `build-site cache push` of both folders just before the add-one
          (timed), then, at the end, a runner that starts empty at the same
          paths: `build-site cache pull` then the add-one build, each timed;
          what the CI template's publish job does.

Printed: the seconds, peak RSS (the child's ru_maxrss) and each s3 figure's
ratio to the local one. Goals (issue 37): s3 add-one <= 2x local add-one,
no-op listing <= 10 s, memory < 4 GB. The upload time of the N runs is
printed too (one `upload()` call per run, sequential).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._site_scale import SHAPE  # noqa: E402
from rundir import upload  # noqa: E402
from rundir.storage import open_url  # noqa: E402
from tests.support.many_runs import make_many_runs  # noqa: E402
from tests.support.s3server import s3_server  # noqa: E402

CACHE_URL = "s3://runs/.site-build-cache"


def build(data: str, out: Path, cache: Path, env: dict[str, str],
          command: tuple[str, ...] = ()) -> tuple[float, float, str]:
    """(seconds, peak RSS in MB, last line of stderr) of one `build-site` in a fresh
    process (`command`: a subcommand such as ("cache", "pull", URL) instead of a build)."""
    code = "import sys; from site_builder.cli import main; sys.exit(main())"
    where = ("--data", data) if not command else ()
    args = [sys.executable, "-c", code, *where, "--out", str(out), "--cache", str(cache), *command]
    log = out.parent / f"{out.name}.{command[1] if command else 'build'}.log"
    t = time.perf_counter()
    with open(log, "w") as err:
        child = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - t
    child.returncode = os.waitstatus_to_exitcode(status)
    lines = log.read_text().strip().splitlines()
    if child.returncode != 0:
        raise SystemExit(f"build-site {data} failed: {lines[-1] if lines else child.returncode}")
    return seconds, usage.ru_maxrss / 1024, " | ".join(lines[-2:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/storage-scale"))
    a = ap.parse_args()
    n, work = a.runs, a.workdir
    data, extra_dir = work / f"runs-{n}" / "data", work / f"runs-{n}" / "extra"
    t = time.perf_counter()
    if not data.is_dir():
        make_many_runs(data, n + 1, seed=21, measured=n + 1, measured_shape=SHAPE)
        extra_dir.mkdir(parents=True)
        shutil.move(data / f"many-{n:04d}", extra_dir / f"many-{n:04d}")
    extra = extra_dir / f"many-{n:04d}"
    if (data / extra.name).exists():
        shutil.move(data / extra.name, extra)
    print(f"{n} runs ready in {time.perf_counter() - t:.1f} s", flush=True)
    for name in ("local", "s3", "empty", "restored", "pushed"):
        shutil.rmtree(work / name, ignore_errors=True)
        (work / name).mkdir()
    rows: dict[str, dict[str, tuple[float, float]]] = {"local": {}, "s3": {}}
    with s3_server() as server:
        env = {**os.environ, **server.env(), "PYTHONPATH": str(REPO)}
        os.environ.update(server.env())
        fs, _ = open_url("s3://runs")
        fs.mkdir("runs")
        t = time.perf_counter()
        for run in sorted(data.iterdir()):
            upload.upload(run, "s3://runs")
        print(f"uploaded {n} runs in {time.perf_counter() - t:.1f} s", flush=True)
        sources = (("local", str(data)), ("s3", "s3://runs"))
        # Alternated step by step (local, then s3), so both meet the same load on a
        # shared machine; the no-op (which changes nothing) is repeated, best kept.
        for step, repeats in (("cold", 1), ("no-op", 3), ("add-one", 1)):
            for _ in range(repeats):
                for kind, src in sources:
                    if step == "add-one":
                        if kind == "local":
                            shutil.move(extra, data / extra.name)
                        else:
                            upload.upload(data / extra.name, "s3://runs")
                            # what a CI cache step restores: both folders copied (new
                            # inodes and ctimes, the same mtimes and paths)
                            for name in ("site", "cache"):
                                shutil.copytree(work / "s3" / name, work / "restored" / name,
                                                symlinks=True)
                            p_secs, p_rss, p_line = build("", work / "s3" / "site",
                                                          work / "s3" / "cache", env,
                                                          ("cache", "push", CACHE_URL))
                            print(f"s3     push     {p_secs:7.1f} s  {p_rss:7.0f} MB  {p_line}",
                                  flush=True)
                    base = work / kind
                    secs, rss, line = build(src, base / "site", base / "cache", env)
                    best = rows[kind].get(step)
                    rows[kind][step] = (secs, rss) if best is None or secs < best[0] else best
                    print(f"{kind:6s} {step:8s} {secs:7.1f} s  {rss:7.0f} MB  {line}", flush=True)
        shutil.move(data / extra.name, extra)
        secs, rss, line = build("s3://runs", work / "empty" / "site", work / "empty" / "cache", env)
        print(f"empty  add-one  {secs:7.1f} s  {rss:7.0f} MB  {line}", flush=True)
        for name in ("site", "cache"):  # the restored copies take the s3 build's paths
            shutil.rmtree(work / "s3" / name)
            shutil.move(work / "restored" / name, work / "s3" / name)
        r_secs, r_rss, line = build("s3://runs", work / "s3" / "site", work / "s3" / "cache", env)
        print(f"restored add-one {r_secs:5.1f} s  {r_rss:7.0f} MB  {line}", flush=True)
        # A runner that starts empty at the same paths: pull what was pushed, then build.
        for name in ("site", "cache"):
            shutil.move(work / "s3" / name, work / "pushed" / name)
        u_secs, u_rss, line = build("", work / "s3" / "site", work / "s3" / "cache", env,
                                    ("cache", "pull", CACHE_URL))
        print(f"pulled pull     {u_secs:7.1f} s  {u_rss:7.0f} MB  {line}", flush=True)
        b_secs, b_rss, line = build("s3://runs", work / "s3" / "site", work / "s3" / "cache", env)
        print(f"pulled add-one  {b_secs:7.1f} s  {b_rss:7.0f} MB  {line}", flush=True)
    print(f"\n{n} runs          local s    s3 s   s3/local   peak MB (local, s3)")
    for step in ("cold", "no-op", "add-one"):
        (ls, lm), (ss, sm) = rows["local"][step], rows["s3"][step]
        print(f"{step:12s} {ls:10.1f} {ss:7.1f} {ss / ls:10.2f}   {lm:.0f}, {sm:.0f}")
    print(f"{'empty runner':12s} {'':10s} {secs:7.1f} {secs / rows['local']['add-one'][0]:10.2f}"
          f"   -, {rss:.0f}   (add-one from an empty cache and --out, vs local add-one)")
    print(f"{'restored':12s} {'':10s} {r_secs:7.1f} {r_secs / rows['local']['add-one'][0]:10.2f}"
          f"   -, {r_rss:.0f}   (add-one with --cache and --out copied in, as a CI cache step does)")
    total = u_secs + b_secs
    print(f"{'pulled':12s} {'':10s} {total:7.1f} {total / rows['local']['add-one'][0]:10.2f}"
          f"   -, {max(u_rss, b_rss):.0f}   (an empty runner: cache pull {u_secs:.1f} s + add-one "
          f"{b_secs:.1f} s; the push before it took {p_secs:.1f} s)")


if __name__ == "__main__":
    main()
