#!/usr/bin/env bash
# Build llama.cpp's llama-server from the llama-cpp-python sdist and cache it.
#
# Why the sdist: Debian has no llama.cpp package and only PyPI is reachable;
# llama-cpp-python's sdist vendors a pinned llama.cpp. Only the llama-server
# target is built (about 8 min on 2 idle cores), cached outside the clone and keyed
# by the llama.cpp commit so reruns and later CI jobs reuse it.
# Also writes the tiny test model to $CACHE/models/tiny.gguf if missing, and the
# draft model that disagrees with it (speculative decoding tests) to tiny-draft.gguf.
# Progress goes to stderr; the last line of stdout is the binary path.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="0.3.36"
LLAMA_CPP_COMMIT="0c1e57098"   # llama.cpp vendored by llama-cpp-python 0.3.36
CACHE="${SPEED_MATRIX_CACHE:-$HOME/.cache/speed-matrix}"
PYTHON="${PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN_DIR="$CACHE/llama-server-$LLAMA_CPP_COMMIT"
BIN="$BIN_DIR/llama-server"
MODEL="$CACHE/models/tiny.gguf"
DRAFT_MODEL="$CACHE/models/tiny-draft.gguf"
JOBS="${JOBS:-2}"

log() { echo "setup_llama_server: $*" >&2; }
die() { log "error: $*"; exit 1; }

ensure_toolchain() {
    if command -v cmake >/dev/null && command -v g++ >/dev/null && command -v make >/dev/null; then
        return
    fi
    command -v apt-get >/dev/null || die "cmake/g++/make missing and no apt-get to install them"
    log "installing cmake g++ make with apt-get"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq cmake g++ make >&2
}

build_server() {
    local work
    work="$(mktemp -d "${TMPDIR:-/tmp}/llama-build.XXXXXX")"
    # shellcheck disable=SC2064  # expand $work now: it is local
    trap "rm -rf '$work'" EXIT
    log "downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist"
    "$PYTHON" -m pip download --quiet "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" \
        --no-deps --no-binary :all: -d "$work" >&2
    tar -xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
    local src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
    grep -q "llama.cpp@$LLAMA_CPP_COMMIT" "$src/CHANGELOG.md" \
        || die "sdist does not vendor llama.cpp@$LLAMA_CPP_COMMIT; update LLAMA_CPP_COMMIT"
    local llama="$src/vendor/llama.cpp"
    [ -f "$llama/CMakeLists.txt" ] || die "no vendor/llama.cpp in the sdist"

    log "configuring llama.cpp@$LLAMA_CPP_COMMIT"
    cmake -S "$llama" -B "$work/build" \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=OFF \
        -DLLAMA_BUILD_COMMIT="$LLAMA_CPP_COMMIT" >&2
    log "building llama-server with -j$JOBS (several minutes)"
    local start=$SECONDS
    cmake --build "$work/build" --target llama-server -j"$JOBS" >&2
    log "built in $((SECONDS - start)) s"

    local built="$work/build/bin/llama-server"
    [ -x "$built" ] || die "build finished but $built is missing"
    "$built" --version >&2 || die "built llama-server does not run"
    mkdir -p "$BIN_DIR"
    # Copy then rename so an interrupted copy never looks like a finished build.
    cp "$built" "$BIN.tmp.$$"
    mv -f "$BIN.tmp.$$" "$BIN"
    rm -rf "$work"
    trap - EXIT
}

# ensure_model PATH FLAG: write one GGUF with make_tiny_models.py FLAG unless cached.
ensure_model() {
    local path="$1" flag="$2"
    [ -s "$path" ] && return
    if ! "$PYTHON" -c "import gguf, numpy" 2>/dev/null; then
        log "installing gguf numpy into $("$PYTHON" -c 'import sys; print(sys.prefix)')"
        "$PYTHON" -m pip install --quiet gguf numpy >&2
    fi
    mkdir -p "$(dirname "$path")"
    "$PYTHON" "$HERE/make_tiny_models.py" "$flag" "$path.tmp.$$" >&2
    mv -f "$path.tmp.$$" "$path"
    log "wrote $path"
}

if [ -x "$BIN" ]; then
    log "using cached $BIN"
else
    ensure_toolchain
    build_server
fi
ensure_model "$MODEL" --gguf
ensure_model "$DRAFT_MODEL" --gguf-draft
echo "$BIN"
