#!/usr/bin/env bash
# Regenerate the inference-perf import fixtures under tests/data/import/inference-perf/.
#
# Not run by CI (inference-perf is not installed there). Needs:
#   - inference-perf 0.7.0 (requires Python >= 3.12) in ~/.cache/peer-tools/inference-perf/venv
#       python3.12 -m venv ~/.cache/peer-tools/inference-perf/venv
#       ~/.cache/peer-tools/inference-perf/venv/bin/pip install inference-perf==0.7.0
#   - the tiny HF tokenizer at ~/.cache/speed-matrix/models/tiny-hf (HuggingFace is not reachable)
#   - llama-server and tiny.gguf in ~/.cache/speed-matrix (scripts/engines/setup_llama_server.sh)
# Two runs, each concurrency 4, 20 requests, /v1/completions streaming (its random data generator
# only builds completion prompts), 48-80 prompt tokens (tiny-hf), 32 out, per-request report
# with computed_metrics on and the request/response texts off (keeps the fixtures small):
#   refserver-c4.per_request_lifecycle_metrics.json (+ refserver-c4.truth.jsonl, the server's
#     CLOCK_MONOTONIC log; + refserver-c4.summary_lifecycle_metrics.json, the tool's summary)
#     against tests/refserver (ttft 20 ms, 200 tok/s, 4 slots, one token per chunk);
#   llama-c4.* against llama-server (tiny.gguf, -np 4, 2 threads).
# Run from the repository root: scripts/peers/inference_perf.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$ROOT/tests/data/import/inference-perf
IP=${INFERENCE_PERF:-$HOME/.cache/peer-tools/inference-perf/venv/bin/inference-perf}
TOK=$HOME/.cache/speed-matrix/models/tiny-hf
LLAMA=$(ls -d "$HOME"/.cache/speed-matrix/llama-server-*/llama-server | head -n 1)
WORK=$(mktemp -d)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH=$ROOT
mkdir -p "$OUT"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

run_ip() {  # base_url model name
  cat > "$WORK/$3.yml" <<YAML
load:
  type: concurrent
  stages:
  - num_requests: 20
    concurrency_level: 4
  num_workers: 1
api:
  type: completion
  streaming: true
server:
  type: vllm
  model_name: $2
  base_url: $1
  ignore_eos: true
tokenizer:
  pretrained_model_name_or_path: $TOK
data:
  type: random
  input_distribution: {min: 48, max: 80, mean: 64, total_count: 20}
  output_distribution: {min: 32, max: 32, mean: 32, total_count: 20}
report:
  request_lifecycle:
    summary: true
    per_stage: false
    per_request: true
    per_request_fields: {request: false, response: false, response_chunks: false, computed_metrics: true}
storage:
  local_storage:
    path: $WORK/$3
YAML
  "$IP" --config_file "$WORK/$3.yml" > "$WORK/$3.log" 2>&1 || { tail -n 30 "$WORK/$3.log" >&2; exit 1; }
  cp "$WORK/$3/per_request_lifecycle_metrics.json" "$OUT/$3.per_request_lifecycle_metrics.json"
  cp "$WORK/$3/summary_lifecycle_metrics.json" "$OUT/$3.summary_lifecycle_metrics.json"
  # its configuration dump, beside the reference run only (the llama run is kept without one,
  # to test the path where the load is inferred from the stamps)
  [ "$3" != refserver-c4 ] || cp "$WORK/$3/config.yaml" "$OUT/$3.config.yaml"
}

# (a) the reference server, its truth log beside the tool's files
echo '{"model": "ref", "engine": "vllm", "ttft_ms": 20.0, "tokens_per_s": 200.0, "slots": 4, "seed": 0}' \
  > "$WORK/scenario.json"
python -m tests.refserver.server --scenario "$WORK/scenario.json" --port 0 \
  --truth "$WORK/truth.jsonl" --port-file "$WORK/port" > "$WORK/refserver.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$WORK/port" ] && break; sleep 0.2; done
run_ip "http://127.0.0.1:$(cat "$WORK/port")" ref refserver-c4
cp "$WORK/truth.jsonl" "$OUT/refserver-c4.truth.jsonl"

# (b) llama-server on the tiny GGUF
PORT=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$LLAMA" -m "$HOME/.cache/speed-matrix/models/tiny.gguf" --host 127.0.0.1 --port "$PORT" -c 8192 -np 4 -kvu \
  -t 2 --metrics --alias tiny --no-webui > "$WORK/llama.log" 2>&1 &
pids+=($!)
for _ in $(seq 150); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 0.2; done
run_ip "http://127.0.0.1:$PORT" tiny llama-c4
ls -l "$OUT"
