#!/usr/bin/env bash
# Turn llama.cpp (the reference oracle) into stoker's per-architecture parity
# fixtures, executor/tests/fixtures/arch_parity/ (the test is
# executor/tests/llama_cpp/arch_parity.rs). Needs scripts/build-llama-cpp.sh to
# have run (llama-quantize and our llama-oracle in .tools/) and the venv
# .tools/arch-venv (python3 -m venv .tools/arch-venv &&
# .tools/arch-venv/bin/pip install gguf==0.19.0 numpy). Makes:
#   models/arch_parity/sources/<arch>.F32.gguf   (ignored by git; CI writes the
#       same bytes with scripts/make-arch-parity-sources.sh) random-weight
#       models (scripts/make_arch_parity_fixtures.py says how)
#   executor/tests/fixtures/arch_parity/text.txt   the text scored
#   models/arch_parity/<arch>.<TYPE>.gguf   (ignored by git) llama-quantize's
#       files from each, no imatrix, for every TYPE below
#   executor/tests/fixtures/arch_parity/manifest.json   per architecture the
#       source's sha256, the KLD baseline KL(F16 || Q4_K_M) (llama-oracle kld),
#       and per type every tensor's name, ggml type and data sha256
#   executor/tests/fixtures/arch_parity/<arch>.<TYPE>.json   llama-oracle score
#       on text.txt: tokens and top-64 log-probs at every third position
# The oracle runs with ORACLE_EXTRA_BUFTS=0 (ggml's portable kernels, no
# repacked or AMX weight layouts) on one thread. Deterministic: re-running
# reproduces every fixture byte for byte. Takes under a minute on 2 cores.
# Never run in CI.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/.tools/llama.cpp/build/bin"
ORACLE="$ROOT/.tools/llama-oracle/llama-oracle"
PY="$ROOT/.tools/arch-venv/bin/python"
FIX="$ROOT/executor/tests/fixtures/arch_parity"
QUANT="$ROOT/models/arch_parity"
ARCHS=(llama llama3 qwen2 qwen3 phi3 gemma2 gemma3)
TYPES=(Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K F16 BF16)
THREADS="${THREADS:-2}"

for t in "$BIN/llama-quantize" "$ORACLE"; do
    [[ -x "$t" ]] || { echo "missing $t: run scripts/build-llama-cpp.sh" >&2; exit 1; }
done
[[ -x "$PY" ]] || { echo "missing $PY: python3 -m venv .tools/arch-venv && .tools/arch-venv/bin/pip install gguf==0.19.0 numpy" >&2; exit 1; }

echo "sources" >&2
"$PY" "$ROOT/scripts/make_arch_parity_fixtures.py" sources

mkdir -p "$QUANT"
for arch in "${ARCHS[@]}"; do
    for ty in "${TYPES[@]}"; do
        out="$QUANT/$arch.$ty.gguf"
        echo "quantize $arch $ty" >&2
        nice -n 5 "$BIN/llama-quantize" "$ROOT/models/arch_parity/sources/$arch.F32.gguf" "$out.tmp" "$ty" "$THREADS" \
            >"$QUANT/quantize-$arch-$ty.log" 2>&1 || { tail -20 "$QUANT/quantize-$arch-$ty.log" >&2; exit 1; }
        mv "$out.tmp" "$out"
    done
done

# One thread: the oracle's output does not depend on the thread count, and
# ggml's spin-waiting threads crawl on a loaded machine.
echo "oracle fixtures" >&2
ORACLE_EXTRA_BUFTS=0 ORACLE_THREADS=1 nice -n 5 "$PY" "$ROOT/scripts/make_arch_parity_fixtures.py" \
    oracle "$ORACLE" "$QUANT"
echo "done: executor/tests/fixtures/arch_parity/" >&2
