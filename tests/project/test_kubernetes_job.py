"""deploy/kubernetes/indexed-job.yaml: an Indexed Job whose command line `bench run` takes.

No cluster here: the manifest parses, is an Indexed Job with one pod per
shard, names the coordinator through the headless Service, every flag it
passes is one `bench run` has (the --shard and --coordinator values as the
CLI parses them), and every pod gets the shard secret `bench run --shard`
requires from the same Secret as the API key, never optional.
"""

from __future__ import annotations

import shlex

import yaml

from bench.cli import run_cmd
from bench.distributed.peer_auth import SECRET_ENV
from bench.params import Address, ShardSpec
from tests.conftest import REPO

JOB = REPO / "deploy" / "kubernetes" / "indexed-job.yaml"


def test_the_indexed_job_runs_one_shard_per_pod() -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all(JOB.read_text())}
    svc, job = docs["Service"], docs["Job"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    n = spec["completions"]
    assert spec["parallelism"] == n >= 2
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["selector"] == {
        "job-name": job["metadata"]["name"]}
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == svc["metadata"]["name"]
    (container,) = pod["containers"]
    words = shlex.split(" ".join(container["args"]))
    assert words[:3] == ["exec", "bench", "run"]
    flags = [w for w in words if w.startswith("--")]
    known = {opt for p in run_cmd.params for opt in p.opts}
    assert set(flags) <= known, set(flags) - known
    value = dict(zip(words, words[1:], strict=False))
    assert value["--shard"] == "${JOB_COMPLETION_INDEX}/" + str(n)
    assert ShardSpec().convert(value["--shard"].replace("${JOB_COMPLETION_INDEX}", "0"),
                               None, None) == (0, n)
    host, port = Address().convert(value["--coordinator"], None, None)
    assert host == f"{job['metadata']['name']}-0.{svc['metadata']['name']}"
    assert port == svc["spec"]["ports"][0]["port"] == container["ports"][0]["containerPort"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert any(value["--out"].strip('"').startswith(m) for m in mounts)


def test_every_pod_gets_the_shard_secret_from_the_api_keys_secret() -> None:
    job = {d["kind"]: d for d in yaml.safe_load_all(JOB.read_text())}["Job"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    secret = env[SECRET_ENV]["valueFrom"]["secretKeyRef"]
    key = env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert secret["name"] == key["name"]  # one Secret holds both
    assert secret["key"] != key["key"] and not secret.get("optional", False)
    assert "value" not in env[SECRET_ENV]  # never written into the manifest
    assert f"--from-literal={secret['key']}=" in JOB.read_text()  # how to create it is said
