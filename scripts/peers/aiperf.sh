#!/usr/bin/env bash
# Regenerate the AIPerf import fixtures under tests/data/import/aiperf/ (not run by CI).
#
# Why: the AIPerf readers (importer/peers/aiperf.py) are tested against files the real
# tool wrote, and the reference-server run against the server's truth log. AIPerf is not
# installed for CI; this script is how the fixtures were made, so anyone can redo them.
#
# Needs: AIPerf 0.13.0 in ~/.cache/peer-tools/aiperf/venv (python3 -m venv ...; pip install
# aiperf==0.13.0), the local tokenizer ~/.cache/speed-matrix/models/tiny-hf (HuggingFace is
# not reachable here) and, for the real-engine run, llama-server + tiny.gguf
# (scripts/engines/setup_llama_server.sh). Run from the repository root:
#     scripts/peers/aiperf.sh            # both runs
#     scripts/peers/aiperf.sh refserver  # only the reference-server run
#     scripts/peers/aiperf.sh errors     # only the reference-server run with faults
#     scripts/peers/aiperf.sh llama      # only the llama-server run
# Each run: chat endpoint, streaming, concurrency 3, 12 requests, synthetic prompts of
# 64 tokens, max 32 output tokens, --export-level raw (writes profile_export_raw.jsonl
# beside profile_export.jsonl and profile_export_aiperf.json), fixed seed. The reference run
# adds --per-chunk-usage (cumulative usage on every chunk: tokens per chunk) and
# --use-server-token-count (the server's token counts, which are the truth log's); the
# llama-server run keeps AIPerf's defaults (its own tokenizer counts the output).
set -euo pipefail

AIPERF="${AIPERF:-$HOME/.cache/peer-tools/aiperf/venv/bin/aiperf}"
TOKENIZER="${TOKENIZER:-$HOME/.cache/speed-matrix/models/tiny-hf}"
CACHE="${SPEED_MATRIX_CACHE:-$HOME/.cache/speed-matrix}"
OUT_ROOT="${OUT_ROOT:-tests/data/import/aiperf}"  # another folder: try the script without touching the fixtures
WORK="$(mktemp -d)"
PIDS=()
cleanup() { for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
export PYTHONPATH="$PWD"

wait_port_file() {  # $1: file the server writes its port to
    for _ in $(seq 1 100); do [ -s "$1" ] && return 0; sleep 0.1; done
    echo "aiperf.sh: server did not write $1" >&2; exit 1
}

profile() {  # $1: base URL, $2: model, $3: artifact dir, then extra flags
    local url="$1" model="$2" dir="$3"; shift 3
    "$AIPERF" profile --url "$url" --endpoint-type chat --streaming -m "$model" \
        --tokenizer "$TOKENIZER" --concurrency 3 --request-count 12 \
        --isl 64 --osl 32 --extra-inputs ignore_eos:true --random-seed 7 \
        --export-level raw --ui-type none --artifact-dir "$dir" "$@" >"$WORK/aiperf.log" 2>&1 \
        || { tail -30 "$WORK/aiperf.log" >&2; exit 1; }
}

keep() {  # $1: artifact dir, $2: fixture dir
    mkdir -p "$2"
    for f in profile_export_raw.jsonl profile_export.jsonl profile_export_aiperf.json; do
        cp "$(find "$1" -name "$f" | head -1)" "$2/$f"
    done
}

refserver_run() {  # $1: fixture name, $2: extra scenario JSON fields (faults)
    local name="$1" faults="${2:-}"
    # A known schedule: 4 slots, 100 tokens/s global step clock, 10 ms TTFT, chunks of
    # 1 and 2 tokens in turn (so tokens per chunk is visible), usage in every chunk.
    cat >"$WORK/scenario.json" <<JSON
{"model": "ref", "engine": "vllm", "slots": 4, "tokens_per_s": 100, "ttft_ms": 10,
 "tokens_per_chunk": [1, 2], "usage_mode": "continuous"$faults}
JSON
    rm -f "$WORK/truth.jsonl" "$WORK/port"
    python tests/refserver/server.py --scenario "$WORK/scenario.json" --host 127.0.0.1 --port 0 \
        --truth "$WORK/truth.jsonl" --port-file "$WORK/port" >"$WORK/server.log" 2>&1 &
    PIDS+=($!)
    wait_port_file "$WORK/port"
    profile "http://127.0.0.1:$(cat "$WORK/port")" ref "$WORK/art-$name" \
        --per-chunk-usage --use-server-token-count
    kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true
    keep "$WORK/art-$name" "$OUT_ROOT/$name"
    cp "$WORK/truth.jsonl" "$OUT_ROOT/$name/truth.jsonl"
    cp "$WORK/scenario.json" "$OUT_ROOT/$name/scenario.json"
}

llama_run() {
    local bin port
    bin="$(ls "$CACHE"/llama-server-*/llama-server | head -1)"
    port=$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$bin" -m "$CACHE/models/tiny.gguf" --host 127.0.0.1 --port "$port" -c 8192 -np 4 -kvu -t 2 \
        --alias tiny --no-webui >"$WORK/llama.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 300); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
    profile "http://127.0.0.1:$port" tiny "$WORK/art-llama"
    kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true
    keep "$WORK/art-llama" "$OUT_ROOT/llama-server"
}

# The error run: every 4th request answered HTTP 500, every 5th cut off (connection reset)
# after 10 tokens, so the exports hold AIPerf's error records.
ERRORS=', "status_every": {"n": 4, "code": 500}, "reset_after_tokens": 10, "fault_every": 5'

case "${1:-all}" in
    refserver) refserver_run refserver ;;
    errors) refserver_run refserver-errors "$ERRORS" ;;
    llama) llama_run ;;
    all) refserver_run refserver; refserver_run refserver-errors "$ERRORS"; llama_run ;;
    *) echo "usage: $0 [refserver|errors|llama|all]" >&2; exit 2 ;;
esac
ls -l "$OUT_ROOT"/*/
