"""Prompt sources against a real llama.cpp llama-server (tiny model, CPU): a real tokenizer
sizes natural prose, random strings and a user's file to the matrix's contexts."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from bench.workload.prompts import tolerance
from tests.conftest import run_cli

pytestmark = pytest.mark.engine_llama


@pytest.mark.parametrize("source", ["natural", "adversarial", "file"])
def test_each_source_is_sized_to_the_context_by_the_engines_tokenizer(llama_server, tmp_path: Path,
                                                                       source: str) -> None:
    args = ["--prompt-source", source]
    if source == "file":
        f = tmp_path / "chats.json"
        f.write_text(json.dumps([{"conversations": [
            {"from": "human", "value": f"Question {i}: how do tides work near a long, shallow bay?"},
            {"from": "gpt", "value": "The moon pulls the water."}]} for i in range(20)]))
        args = ["--prompts", str(f)]
    run = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", llama_server.base_url, "--contexts", "1k,2k",
                  "--concurrency", "1", "--duration", "2", "--max-output", "2000", "--prefill-repeats", "1",
                  *args, "--out", str(run))
    assert res.returncode == 0, res.stderr
    info = yaml.safe_load((run / "run.yaml").read_text())
    want = "file:chats.json" if source == "file" else source
    assert info["parameters"]["prompt_source"] == want
    requests = pq.read_table(run / "requests.parquet").to_pylist()
    counted = [(r["context"], r["prompt_tokens"]) for r in requests if r["prompt_tokens"] is not None]
    assert counted and all(abs(n - ctx) <= tolerance(ctx) for ctx, n in counted), counted
    assert all(r["prompt_index"] is not None for r in requests)
