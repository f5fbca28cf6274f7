#!/usr/bin/env bash
# Regenerates tests/data/import/sglang/: SGLang 0.5.23 `python -m sglang.benchmark.serving`
# (the module `sglang.bench_serving` forwards to) against the reference server and llama-server.
# Not run by CI; run by hand from the repository root:  bash scripts/peers/sglang.sh
# SGLang's full install wants CUDA; the benchmark client alone was installed with
#   python -m venv ~/.cache/peer-tools/sglang/venv
#   venv/bin/pip install --no-deps sglang==0.5.23
#   venv/bin/pip install aiohttp numpy transformers tqdm requests orjson zstandard psutil pybase64 \
#     torch pillow starlette msgspec pyzmq IPython datasets torchvision apache-tvm-ffi \
#     sentencepiece compressed_tensors gguf
# (each one a module serving.py's imports reach). `--dataset-name random` downloads ShareGPT
# from HuggingFace (unreachable here); `random-ids` draws token ids and needs no download.
# Files written:
#   ref-details.jsonl   --output-details, reference server (scenario ../vllm/ref-scenario.json)
#   ref-truth.jsonl     the reference server's truth log of that run (its first record is the
#                       tool's warm-up request, which the result file does not keep)
#   ref-aggregate.jsonl without --output-details, a second run against the same server
#   llama-details.jsonl / llama-aggregate.jsonl   the same against llama-server on the tiny GGUF
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$REPO/tests/data/import/sglang
CACHE=${SPEED_MATRIX_CACHE:-$HOME/.cache/speed-matrix}
SPY=${SGLANG_PYTHON:-$HOME/.cache/peer-tools/sglang/venv/bin/python}
LLAMA=$(ls -d "$CACHE"/llama-server-*/llama-server | head -1)
TOK=$CACHE/models/tiny-hf
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
export PYTHONPATH=$REPO HF_HUB_OFFLINE=1

bench() {  # bench BASE_URL OUTFILE [extra args...]
  local url=$1 out=$2; shift 2
  rm -f "$out"  # the tool appends one line per run
  "$SPY" -m sglang.benchmark.serving --backend vllm --base-url "$url" --model tiny --tokenizer "$TOK" \
    --dataset-name random-ids --random-input-len 64 --random-output-len 32 --random-range-ratio 1 \
    --num-prompts 12 --max-concurrency 3 --seed 0 --output-file "$out" "$@" \
    > "$WORK/$(basename "$out").log" 2>&1
}

wait_port() { for _ in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.1; done; exit 1; }

python "$REPO/tests/refserver/server.py" --scenario "$REPO/tests/data/import/vllm/ref-scenario.json" \
  --truth "$WORK/truth.jsonl" --port-file "$WORK/port" > "$WORK/ref.log" 2>&1 &
PIDS+=($!)
wait_port "$WORK/port"
bench "http://127.0.0.1:$(cat "$WORK/port")" "$OUT/ref-details.jsonl" --output-details
cp "$WORK/truth.jsonl" "$OUT/ref-truth.jsonl"
bench "http://127.0.0.1:$(cat "$WORK/port")" "$OUT/ref-aggregate.jsonl"

PORT=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$LLAMA" -m "$CACHE/models/tiny.gguf" --host 127.0.0.1 --port "$PORT" -c 8192 -np 4 -kvu -t 2 \
  --alias tiny > "$WORK/llama.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break; sleep 0.2; done
bench "http://127.0.0.1:$PORT" "$OUT/llama-details.jsonl" --output-details
bench "http://127.0.0.1:$PORT" "$OUT/llama-aggregate.jsonl"
echo "wrote $OUT"
