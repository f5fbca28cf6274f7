#!/usr/bin/env bash
# Regenerate the guidellm import fixtures under tests/data/import/guidellm/.
#
# Not run by CI (guidellm is not installed there). Needs:
#   - guidellm 0.8.1 in ~/.cache/peer-tools/guidellm/venv
#       python3.11 -m venv ~/.cache/peer-tools/guidellm/venv
#       ~/.cache/peer-tools/guidellm/venv/bin/pip install guidellm==0.8.1
#   - the tiny HF tokenizer at ~/.cache/speed-matrix/models/tiny-hf (HuggingFace is not reachable)
#   - llama-server and tiny.gguf in ~/.cache/speed-matrix (scripts/engines/setup_llama_server.sh)
# Two runs, each concurrency 4, 20 requests, synthetic 64-token prompts (tiny-hf tokens), 32 out:
#   refserver-c4.benchmarks.json (+ refserver-c4.truth.jsonl, the server's CLOCK_MONOTONIC log)
#     against tests/refserver (ttft 20 ms, 200 tok/s, 4 slots, one token per chunk);
#   llama-c4.benchmarks.json against llama-server (tiny.gguf, -np 4, 2 threads).
# Run from the repository root: scripts/peers/guidellm.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$ROOT/tests/data/import/guidellm
GL=${GUIDELLM:-$HOME/.cache/peer-tools/guidellm/venv/bin/guidellm}
TOK=$HOME/.cache/speed-matrix/models/tiny-hf
LLAMA=$(ls -d "$HOME"/.cache/speed-matrix/llama-server-*/llama-server | head -n 1)
WORK=$(mktemp -d)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH=$ROOT
mkdir -p "$OUT"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

wait_port() { for _ in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.2; done; echo "no port in $1" >&2; exit 1; }

run_gl() {  # target model out.json
  "$GL" run --backend "kind=openai_http,target=$1,model=$2" \
    --profile kind=concurrent,streams=4 --constraint kind=max_requests,count=20 \
    --tokenizer "kind=huggingface_auto,model=$TOK" \
    --data kind=synthetic_text,prompt_tokens=64,output_tokens=32 \
    --output "kind=json,path=$3" --disable-console-interactive > "$WORK/gl.log" 2>&1 \
    || { tail -n 30 "$WORK/gl.log" >&2; exit 1; }
}

# (a) the reference server, its truth log beside the tool's file
echo '{"model": "ref", "engine": "vllm", "ttft_ms": 20.0, "tokens_per_s": 200.0, "slots": 4, "seed": 0}' \
  > "$WORK/scenario.json"
python -m tests.refserver.server --scenario "$WORK/scenario.json" --port 0 \
  --truth "$WORK/truth.jsonl" --port-file "$WORK/port" > "$WORK/refserver.log" 2>&1 &
pids+=($!)
wait_port "$WORK/port"
run_gl "http://127.0.0.1:$(cat "$WORK/port")" ref "$OUT/refserver-c4.benchmarks.json"
cp "$WORK/truth.jsonl" "$OUT/refserver-c4.truth.jsonl"

# (b) llama-server on the tiny GGUF
PORT=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$LLAMA" -m "$HOME/.cache/speed-matrix/models/tiny.gguf" --host 127.0.0.1 --port "$PORT" -c 8192 -np 4 -kvu \
  -t 2 --metrics --alias tiny --no-webui > "$WORK/llama.log" 2>&1 &
pids+=($!)
for _ in $(seq 150); do curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break; sleep 0.2; done
run_gl "http://127.0.0.1:$PORT" tiny "$OUT/llama-c4.benchmarks.json"
ls -l "$OUT"
