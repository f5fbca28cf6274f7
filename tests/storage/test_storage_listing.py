"""benchmarks/storage_listing.py's core at N=3 against moto: the benchmark cannot rot unnoticed."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import storage_listing
from rundir import storage
from rundir.storage import UPLOAD_MANIFEST

REPO = Path(__file__).resolve().parents[2]
SMALL = {"contexts": [1024], "concurrency": [1], "prefill_contexts": [1024], "duration_s": 0.5}


def test_three_stored_runs_are_listed_mirrored_once_and_then_not_fetched_again(
        bucket: str, s3_env: dict[str, str], tmp_path: Path) -> None:
    env = {**s3_env, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    said: list[str] = []
    rows = storage_listing.measure(bucket, 3, tmp_path, env, repeats=1, shape=SMALL,
                                   say=lambda text, **_: said.append(text))
    fs, root = storage.open_url(bucket)
    keys = sorted(p.rsplit("/", 2)[-2] for p in fs.find(root) if p.endswith(UPLOAD_MANIFEST))
    # one uploaded run, two copies, and the add-one run
    assert keys == ["copy-00001", "copy-00002", "many-0000", "many-0001"]
    copy = json.loads(fs.cat_file(f"{root}/copy-00002/{UPLOAD_MANIFEST}"))
    first = json.loads(fs.cat_file(f"{root}/many-0000/{UPLOAD_MANIFEST}"))
    assert (copy["run_id"], copy["key"]) == ("copy-00002", "copy-00002")
    assert copy["files"] == first["files"] and copy != first

    listing, cold, noop, add = rows["listing"], rows["cold"], rows["no-op"], rows["add-one"]
    assert listing["runs"] == 3 and listing["requests"]["ListObjectsV2"] == 1
    assert listing["requests"]["keys listed"] == 3 * (len(first["files"]) + 1)
    assert cold["fetched"] == 3 and cold["files"] == 3 * len(first["files"]) and cold["mb"] > 0
    assert (noop["runs"], noop["fetched"], noop["files"]) == (3, 0, 0)
    # nothing read beyond the listing
    assert {op for op in noop["requests"] if op[0].isupper()} == {"ListObjectsV2"}
    assert noop["requests"]["list wait ms"] >= 0 and noop["requests"]["list parse ms"] >= 0
    assert (add["runs"], add["fetched"]) == (4, 1)
    assert all(rows[s]["rss_mb"] > 0 and rows[s]["process_s"] >= rows[s]["call_s"]
               for s in ("listing", "cold", "no-op", "add-one"))
    text = storage_listing.table(3, rows)
    assert "no-op listing <= 10 s" in text and "memory < 4 GB" in text
    assert said[0].startswith("3 stored runs made in")
