#!/usr/bin/env bash
# On a GPU machine (no network): build a CUDA llama-server from the carried
# source, serve the tiny test model on the GPU, and run the collector
# against it, so that GPU provenance (NVML, nvidia-smi) and the stream
# client at GPU token rates are checked on real parts.
#
# Here first: bash scripts/device/prepare_gpu_check.sh   (fills .device/)
# There:      bash scripts/device/gpu_check.sh           (carry [".device"])
# Everything it learns goes under $OUT (logs, provenance.json, the run
# directory); the last lines printed are a short summary.
set -uo pipefail

OUT="${OUT:-/tmp/gpu-check-out}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEV="$REPO/.device"
ARCH="${CUDA_ARCH:-90}"          # Hopper; 89 Ada, 100/120 Blackwell
JOBS="${JOBS:-$(nproc)}"
BUILD_LIMIT="${BUILD_LIMIT:-300}"  # seconds; the device lends 15 minutes in all
# Defaults: the matrix of the second H200 run (scripts/device/README.md).
CONTEXTS="${CONTEXTS:-1k}" CONCURRENCY="${CONCURRENCY:-1,8,64}"
DURATION="${DURATION:-6}" MAX_OUTPUT="${MAX_OUTPUT:-1024}"
KV_TOKENS="${KV_TOKENS:-163840}"  # the server's -c, shared by its 64 slots
PORT="${PORT:-18181}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
say() { echo "gpu_check: $*" | tee -a "$OUT/summary.txt"; }
for f in llama-src.tar.gz tiny.gguf; do
    [ -s "$DEV/$f" ] || { say "missing .device/$f: run prepare_gpu_check.sh here and carry .device"; exit 2; }
done

# 1. What the machine says about its GPUs, and what our provenance makes of it.
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits \
    > "$OUT/nvidia-smi.csv" 2>&1
python3 - "$OUT/provenance.json" <<'PY'
import dataclasses, json, sys
from bench import provenance
nvml = provenance.gpu_hardware()
smi = provenance.nvidia_smi_hardware()
full = provenance.detect_hardware()
out = {k: dataclasses.asdict(v) if v else None for k, v in
       (("nvml", nvml), ("nvidia_smi", smi), ("detected", full))}
json.dump(out, open(sys.argv[1], "w"), indent=1)
agree = nvml and smi and all(getattr(nvml, f) == getattr(smi, f)
                             for f in ("gpu_name", "gpu_count", "vram_gb_per_gpu", "driver"))
print(f"gpu_check: provenance {full.gpu_name} x{full.gpu_count} {full.vram_gb_per_gpu} GB, "
      f"driver {full.driver}, CUDA {full.cuda}; NVML and nvidia-smi agree: {bool(agree)}")
PY
[ $? -eq 0 ] || say "provenance check failed (see above)"

# 2. A CUDA llama-server from the pinned llama.cpp commit. LLAMA_SERVER=path
#    skips the build: a dry run of the rest on a machine without a GPU.
#    FlashAttention kernels are compiled out (their template instances are
#    most of the build) and the server runs with -fa off: the check is about
#    the collector, not attention speed.
build_server() {
    local src=/tmp/llama-src build=/tmp/llama-build start=$SECONDS
    rm -rf "$src" "$build"; mkdir -p "$src"
    tar -xzf "$DEV/llama-src.tar.gz" -C "$src"
    if ! cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
            -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF \
            -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DGGML_CUDA_FA=OFF \
            -DLLAMA_BUILD_COMMIT="$(cat "$DEV/llama-commit")" > "$OUT/build.log" 2>&1 \
       || ! timeout "$BUILD_LIMIT" cmake --build "$build" --target llama-server -j"$JOBS" \
                >> "$OUT/build.log" 2>&1; then
        say "llama-server CUDA build failed after $((SECONDS - start)) s; tail of build.log:"
        tail -n 30 "$OUT/build.log"
        exit 1
    fi
    say "built CUDA llama-server (sm_$ARCH) in $((SECONDS - start)) s"
    server_bin="$build/bin/llama-server"
}
if [ -n "${LLAMA_SERVER:-}" ]; then server_bin="$LLAMA_SERVER"; else build_server; fi

# 3. Serve the tiny model on the GPU: 64 slots sharing one KV cache.
"$server_bin" -m "$DEV/tiny.gguf" --host 127.0.0.1 --port "$PORT" \
    -c "$KV_TOKENS" -np 64 -kvu -ngl 99 -fa off -t 4 --metrics --alias tiny --no-webui \
    > "$OUT/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 120); do
    python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$PORT/health', timeout=2)" \
        >/dev/null 2>&1 && break
    kill -0 $server 2>/dev/null || { say "llama-server exited; tail of server.log:"; tail -n 30 "$OUT/server.log"; exit 1; }
    sleep 0.5
done
grep -i -m3 -E "offload|CUDA0|ggml_cuda_init" "$OUT/server.log" | tee -a "$OUT/summary.txt"

# 4. The collector, as a user runs it, on a small matrix.
start=$SECONDS
# Interrupted (like Ctrl-C) at BENCH_LIMIT, the collector keeps what it measured.
timeout -s INT -k 30 "${BENCH_LIMIT:-120}" \
    python3 -c "from bench.cli import main; main()" run --base-url "http://127.0.0.1:$PORT" \
    --contexts "$CONTEXTS" --concurrency "$CONCURRENCY" --duration "$DURATION" \
    --max-output "$MAX_OUTPUT" --warmup-stable 2 \
    --out "$OUT/run" > "$OUT/bench.log" 2>&1
rc=$?
say "bench run exited $rc after $((SECONDS - start)) s"
tail -n 25 "$OUT/bench.log"

# 5. What was measured, and whether the client kept up.
python3 - "$OUT/run" <<'PY' | tee -a "$OUT/summary.txt"
import sys
from rundir.io import read_run
run = read_run(sys.argv[1])
hw = run.info.hardware
print(f"run.yaml hardware: {hw.gpu_name} x{hw.gpu_count} {hw.vram_gb_per_gpu} GB, cuda {hw.cuda}")
for c in run.cells.to_pylist():
    print(c["phase"], c["context"], c["concurrency"], c["status"], "client_bound" if c["client_bound"] else "",
          (c["reason"] or "")[:120])
rows = run.requests.to_pylist()
multi = sum(1 for r in rows for a, b in zip([0] + r["chunk_tokens"], r["chunk_tokens"]) if b - a > 1)
print(f"requests {len(rows)}, chunks {sum(len(r['chunk_ns']) for r in rows)}, multi-token chunks {multi}")
PY
