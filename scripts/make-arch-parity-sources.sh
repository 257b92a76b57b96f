#!/usr/bin/env bash
# Writes the F32 random-weight models the per-architecture parity test
# (executor/tests/llama_cpp/arch_parity.rs) requantizes, into
# models/arch_parity/sources/ (ignored by git; 36 MB, so made rather than
# committed). Deterministic: fixed seeds, gguf and numpy pinned in .venv by
# scripts/setup-venv.sh; the test checks each file's sha256 against the one
# llama.cpp's fixtures were made from. Takes a few seconds. A no-op when every
# file is already there with the right hash.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
SRC="$ROOT/models/arch_parity/sources"
MANIFEST="$ROOT/executor/tests/fixtures/arch_parity/manifest.json"
[[ -x "$PY" ]] || { echo "missing $PY: run scripts/setup-venv.sh" >&2; exit 1; }

if "$PY" - "$MANIFEST" "$SRC" <<'PY'
import hashlib, json, sys
from pathlib import Path
m = json.load(open(sys.argv[1])); src = Path(sys.argv[2])
for a in m["archs"].values():
    p = src / a["source"]
    if not p.exists() or hashlib.sha256(p.read_bytes()).hexdigest() != a["source_sha256"]:
        sys.exit(1)
PY
then
    echo "arch parity sources already present: models/arch_parity/sources"
    exit 0
fi
"$PY" "$ROOT/scripts/make_arch_parity_fixtures.py" sources
echo "wrote the arch parity sources into models/arch_parity/sources"
