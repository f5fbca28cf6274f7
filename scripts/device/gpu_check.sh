#!/usr/bin/env bash
# On a GPU machine (no network): build a CUDA llama-server from the carried
# source, serve the tiny test model on the GPU, and run the collector
# against it, so that GPU provenance (NVML, nvidia-smi) and the stream
# client at GPU token rates are checked on real parts.
#
# Here first: bash scripts/device/prepare_gpu_check.sh   (fills .device/)
# There:      bash scripts/device/gpu_check.sh           (carry [".device"])
# Everything it learns goes under $OUT (logs, provenance.json, the run
# directory); the last lines printed are a short summary, GPU telemetry last.
# Only the telemetry reading of a finished run directory (a fetched $OUT/run):
#             bash scripts/device/gpu_check.sh --telemetry-summary RUN_DIR
# Only the collector's scale-out on this host's cores (no GPU, no .device needed):
#             bash scripts/device/gpu_check.sh --scale-out
# (SCALE_OUT=1 runs it as step 7 of the whole check, after the server is stopped.)
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

# Idle and loaded watts, J/token per decode cell, and whether the driver's
# energy counter and the integral of power agree, from the run directory's
# gpu_metrics.parquet (rundir/energy.py, the builder's own arithmetic).
telemetry_summary() {
    python3 - "$1" <<'PY'
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

from rundir import contract
from rundir.contract import ContractError
from rundir.energy import cell_energy
from rundir.io import read_table

AGREE = 0.05  # counter and integral within 5% of each other: "agree"
run = Path(sys.argv[1])
try:
    gm = read_table(run, contract.GPU_METRICS_FILE, required=False)
    cells = read_table(run, contract.CELLS_FILE)
    req = read_table(run, contract.REQUESTS_FILE)
except ContractError as exc:
    sys.exit(f"telemetry: {exc}")
if not gm.num_rows:
    sys.exit(f"telemetry: no {contract.GPU_METRICS_FILE} in {run} (no GPU seen; see bench.log)")
t = gm.column("t_ns").to_numpy().astype(np.int64)
gpu = gm.column("gpu").to_numpy().astype(np.int64)
w = gm.column("power_w").to_numpy(zero_copy_only=False).astype(np.float64)
names = sorted({(g, n) for g, n in zip(gpu.tolist(), gm.column("gpu_name").to_pylist())})
have_counter = gm.column("energy_mj").null_count < gm.num_rows
print(f"telemetry: {len(np.unique(t))} samples of {len(names)} GPU(s) "
      f"({', '.join(f'{g}: {n}' for g, n in names)}) over {(t.max() - t.min()) / 1e9:.1f} s; "
      f"energy counter {'present' if have_counter else 'absent (power integral only)'}")
# Idle: samples before the first request was sent, or over 1 s after the last
# one ended (NVML's power reading may average over up to a second).
sends = req.column("send_ns").to_numpy()
busy0 = int(sends.min()) if len(sends) else int(t.max()) + 1
ends = req.column("end_ns").to_numpy(zero_copy_only=False)
busy1 = int(np.nanmax(ends)) + 1_000_000_000 if len(ends) else int(t.min())
idle = ((t < busy0) | (t > busy1)) & ~np.isnan(w)
if idle.any():
    per = [float(np.median(w[idle & (gpu == g)])) for g, _ in names if (idle & (gpu == g)).any()]
    print(f"idle power: {sum(per):.0f} W in all (median per GPU: "
          f"{', '.join(f'{x:.0f}' for x in per)} W; {int(idle.sum())} readings)")
else:
    print("idle power: no sample outside the requests (the sampler ran only while loaded)")
no_counter = gm.set_column(gm.schema.get_field_index("energy_mj"), "energy_mj",
                           pa.nulls(gm.num_rows, pa.int64()))
worst, loaded = None, []
for c in cells.to_pylist():
    s, e = c["window_start_ns"], c["window_end_ns"]
    if c["phase"] != contract.DECODE or s is None or e is None or e <= s:
        continue
    mine = req.filter(pa.compute.and_(
        pa.compute.equal(req.column("phase"), contract.DECODE),
        pa.compute.and_(pa.compute.equal(req.column("context"), c["context"]),
                        pa.compute.equal(req.column("concurrency"), c["concurrency"]))))
    tokens = 0  # output tokens that arrived inside the window
    for ns, cum in zip(mine.column("chunk_ns").to_pylist(), mine.column("chunk_tokens").to_pylist()):
        prev = 0
        for a, k in zip(ns, cum):
            tokens += k - prev if s <= a <= e else 0
            prev = k
    got = cell_energy(gm, s, e, tokens or None)
    integ = cell_energy(no_counter, s, e, tokens or None)
    name = f"decode {c['context']}x{c['concurrency']} {c['status']}"
    if got is None or got.avg_w is None:
        print(f"{name}: no telemetry over its window")
        continue
    loaded.append(got.avg_w)
    jpt = f"{got.j_per_token:.4f} J/token ({tokens} tokens)" if got.j_per_token else "no tokens"
    line = (f"{name}: {got.avg_w:.0f} W avg, {got.peak_w or float('nan'):.0f} W peak, {jpt}, "
            f"energy {got.energy_j:.1f} J from the {got.energy_source}")
    if got.energy_source == "counter" and integ is not None and integ.energy_j:
        diff = (got.energy_j - integ.energy_j) / integ.energy_j
        worst = diff if worst is None or abs(diff) > abs(worst) else worst
        line += f"; power integral {integ.energy_j:.1f} J ({diff:+.1%})"
    flags = f"; throttled: {', '.join(got.throttle_flags)}" if got.throttle_flags else ""
    print(line + flags)
if loaded:
    print(f"loaded power: {min(loaded):.0f}-{max(loaded):.0f} W (decode windows' averages)")
if worst is None:
    print("energy counter vs power integral: not compared (no counter, or no decode window)")
else:
    verdict = "agree" if abs(worst) <= AGREE else "DISAGREE"
    print(f"energy counter vs power integral: {verdict} (largest difference {worst:+.1%}, "
          f"threshold {AGREE:.0%})")
PY
}
if [ "${1:-}" = "--telemetry-summary" ]; then
    [ -n "${2:-}" ] || { echo "gpu_check: --telemetry-summary needs a run directory" >&2; exit 2; }
    telemetry_summary "$2"; exit $?
fi

mkdir -p "$OUT"
say() { echo "gpu_check: $*" | tee -a "$OUT/summary.txt"; }

# The collector's scale-out where there are cores for it (docs/performance.md,
# "Scale-out: CPU an event"): each process's CPU a million events with the
# parent and every shard on a core of its own and the stub on others
# (benchmarks/scale_out_cpu.py), then the events/s recorded and on time as
# workers grow (benchmarks/scale_out.py). Each under SCALE_LIMIT seconds.
scale_out() {
    local n stub top cpu_w events_w
    n=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
    stub="${SCALE_STUB_PROCS:-$(( n / 4 > 1 ? n / 4 : 1 ))}"
    top=$(( n - stub - 1 ))  # the parent keeps a core, each shard gets one
    if [ "$top" -ge 4 ]; then cpu_w="4,$top" events_w="1,4,$top"; else cpu_w="1,2" events_w="1,2"; fi
    local limit="${SCALE_LIMIT:-200}" start=$SECONDS
    say "scale-out on $n cores: stub $stub processes, workers $cpu_w (CPU) and $events_w (events/s)"
    timeout -s INT -k 20 "$limit" python3 "$REPO/benchmarks/scale_out_cpu.py" \
        --streams "${SCALE_STREAMS:-1024,4096}" --workers "${SCALE_CPU_WORKERS:-$cpu_w}" \
        --rate "${SCALE_RATE:-200000}" --stub-procs "$stub" --duration 5 \
        > "$OUT/scale_out_cpu.txt" 2>&1
    say "scale_out_cpu.py exited $? after $((SECONDS - start)) s"
    grep -v '^{' "$OUT/scale_out_cpu.txt" | tail -n 12 | tee -a "$OUT/summary.txt"
    start=$SECONDS
    timeout -s INT -k 20 "$limit" python3 "$REPO/benchmarks/scale_out.py" \
        --workers "${SCALE_WORKERS:-$events_w}" --streams "${SCALE_EVENT_STREAMS:-4096}" \
        --tok-per-s "$(python3 -c "print(${SCALE_RATE:-200000} / ${SCALE_EVENT_STREAMS:-4096})")" \
        --stub-procs "$stub" --duration 5 > "$OUT/scale_out.txt" 2>&1
    say "scale_out.py exited $? after $((SECONDS - start)) s"
    grep -v '^{' "$OUT/scale_out.txt" | tail -n 6 | tee -a "$OUT/summary.txt"
}
if [ "${1:-}" = "--scale-out" ]; then
    scale_out; exit 0
fi
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
    --max-output "$MAX_OUTPUT" --warmup-stable 2 --gpu-telemetry auto \
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

# 6. GPU telemetry of the same run: watts idle and loaded, J/token, counter vs integral.
telemetry_summary "$OUT/run" 2>&1 | tee -a "$OUT/summary.txt"

# 7. With SCALE_OUT=1: the collector's scale-out on this host's cores, the
#    server stopped first so that it takes none of them.
if [ "${SCALE_OUT:-0}" = 1 ]; then
    kill $server 2>/dev/null; wait $server 2>/dev/null
    scale_out
fi
