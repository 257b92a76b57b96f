#!/usr/bin/env bash
# Writes the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf, from
# scripts/fetch-model.sh) as Hugging Face model directories (F16 and BF16
# safetensors, config.json, tokenizer.json, ...) and as F16 and Q8_0 GGUF
# files, into models/hf/ (ignored by git; about 1 GB, so made rather than
# committed): what executor/tests/hf_smollm2.rs loads and the safetensors
# speed benchmark compares. See scripts/export_hf_smollm2.py.
# Deterministic: gguf, numpy and safetensors are pinned in .venv by
# scripts/setup-venv.sh, and the outputs are checked against the sizes and
# sha256 in executor/tests/fixtures/hf_smollm2.json. Takes about half a
# minute. A no-op when every file is already there with the right hash.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
MANIFEST="$ROOT/executor/tests/fixtures/hf_smollm2.json"
[[ -x "$PY" ]] || { echo "missing $PY: run scripts/setup-venv.sh" >&2; exit 1; }
[[ -f "$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]] \
    || { echo "missing models/SmolLM2-135M-Instruct.Q4_1.gguf: run scripts/fetch-model.sh" >&2; exit 1; }

start=$SECONDS
if "$PY" - "$MANIFEST" "$ROOT" <<'PY'
import hashlib, json, sys
from pathlib import Path
m = json.load(open(sys.argv[1])); out = Path(sys.argv[2]) / m["dir"]
for rel, f in m["files"].items():
    p = out / rel
    if not p.is_file() or p.stat().st_size != f["size"]:
        sys.exit(1)
    h = hashlib.sha256()
    with open(p, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    if h.hexdigest() != f["sha256"]:
        sys.exit(1)
PY
then
    echo "Hugging Face SmolLM2 exports already present: models/hf ($((SECONDS - start)) s to check)"
    exit 0
fi
"$PY" "$ROOT/scripts/export_hf_smollm2.py"
echo "wrote the Hugging Face SmolLM2 exports into models/hf in $((SECONDS - start)) s"
