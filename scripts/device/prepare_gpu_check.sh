#!/usr/bin/env bash
# Prepare, on this machine, what scripts/device/gpu_check.sh needs on a GPU
# machine that cannot download anything: llama.cpp's source (the same pinned
# commit the CPU tests build, trimmed to what a CUDA llama-server needs) and
# the tiny test model, both under .device/ (git-ignored; `carry` it).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${SPEED_MATRIX_CACHE:-$HOME/.cache/speed-matrix}"
OUT="$REPO/.device"
# The pins live in one place: the CPU setup script.
pin() { sed -n "s/^$1=\"\\([^\"]*\\)\".*/\\1/p" "$REPO/scripts/engines/setup_llama_server.sh"; }
VERSION="$(pin LLAMA_CPP_PYTHON_VERSION)"
COMMIT="$(pin LLAMA_CPP_COMMIT)"
[ -n "$VERSION" ] && [ -n "$COMMIT" ] || { echo "prepare: cannot read the llama.cpp pins" >&2; exit 1; }

mkdir -p "$OUT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet "llama-cpp-python==$VERSION" --no-deps --no-binary :all: -d "$work" >&2
tar -xzf "$work"/llama_cpp_python-*.tar.gz -C "$work"
src="$work/llama_cpp_python-$VERSION/vendor/llama.cpp"
# Models, docs, tests and the other GPU backends are not needed to build llama-server.
tar -czf "$OUT/llama-src.tar.gz.tmp" -C "$src" \
    --exclude=./models --exclude=./docs --exclude=./tests --exclude=./benches \
    --exclude=./examples --exclude=./media --exclude=./gguf-py \
    --exclude='./ggml/src/ggml-vulkan' --exclude='./ggml/src/ggml-sycl' \
    --exclude='./ggml/src/ggml-opencl' --exclude='./ggml/src/ggml-cann' \
    --exclude='./ggml/src/ggml-musa' --exclude='./ggml/src/ggml-metal' \
    --exclude='./ggml/src/ggml-webgpu' --exclude='./ggml/src/ggml-hexagon' .
mv -f "$OUT/llama-src.tar.gz.tmp" "$OUT/llama-src.tar.gz"
echo "$COMMIT" > "$OUT/llama-commit"

model="$CACHE/models/tiny.gguf"
[ -s "$model" ] || bash "$REPO/scripts/engines/setup_llama_server.sh" >/dev/null
cp "$model" "$OUT/tiny.gguf"
grep -qx '/.device/' "$REPO/.gitignore" || echo '/.device/' >> "$REPO/.gitignore"
du -sh "$OUT"/* >&2
echo "prepared $OUT: run scripts/device/gpu_check.sh there with carry [\".device\"]" >&2
