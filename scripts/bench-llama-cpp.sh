#!/usr/bin/env bash
# stoker's engine beside llama.cpp's llama-batched-bench on the same GGUF file,
# in one run: decode tok/s at 1 and 16 sequences and single-sequence prefill,
# 128-token prompts and 128 output tokens, 2 threads, then the ratios.
# Needs scripts/build-llama-cpp.sh. Usage: scripts/bench-llama-cpp.sh FILE.gguf
# LLAMA_ARGS adds arguments to llama-batched-bench (default `--no-repack`: on a
# CPU that reports AMX without the kernel enabling it, llama.cpp's repacked AMX
# path dies with SIGILL; set LLAMA_ARGS= to use llama.cpp's default).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="$(realpath "${1:?usage: scripts/bench-llama-cpp.sh FILE.gguf}")"
BENCH="$ROOT/.tools/llama.cpp/build/bin/llama-batched-bench"
[[ -x "$BENCH" ]] || { echo "missing $BENCH: run scripts/build-llama-cpp.sh" >&2; exit 1; }
LLAMA_ARGS="${LLAMA_ARGS---no-repack}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

cd "$ROOT"
cargo build --release -p stoker-executor --bench engine >/dev/null 2>&1 || cargo build --release -p stoker-executor --bench engine
# llama.cpp first, then stoker, then llama.cpp again: the machine is shared, so
# each side is measured twice around the other and the better run is kept.
run_llama() {
    # shellcheck disable=SC2086
    "$BENCH" -m "$MODEL" -c 8192 -b 2048 -ub 512 -npp 128 -ntg 128 -npl 1,16 -t 2 $LLAMA_ARGS \
        2>/dev/null | grep -E '^\|' >>"$OUT/llama.txt"
}
run_stoker() {
    STOKER_MODEL="$MODEL" STOKER_BENCH_SECTIONS=throughput STOKER_BENCH_CONCURRENCY=1,16 \
        cargo bench -q -p stoker-executor --bench engine 2>/dev/null | grep -E '^\| (1|16) \|' >>"$OUT/stoker.txt"
}
run_llama; run_stoker; run_llama; run_stoker

echo "file: $(basename "$MODEL")"
echo "llama-batched-bench $LLAMA_ARGS (rows: PP TG B N_KV T_PP S_PP T_TG S_TG T S):"
cat "$OUT/llama.txt"
echo "stoker engine (rows: c, output tok/s, ratio, TTFT p50/p99, ITL p50/p99, decode tok/s, prefill tok/s):"
cat "$OUT/stoker.txt"
python3 - "$OUT/llama.txt" "$OUT/stoker.txt" <<'PY'
import sys
def rows(p):
    return [[c.strip() for c in l.strip().strip('|').split('|')] for l in open(p) if l.strip()]
llama = {}
for r in rows(sys.argv[1]):
    try:
        b = int(r[2]); s_pp = float(r[5]); s_tg = float(r[7])
    except (ValueError, IndexError):
        continue
    best = llama.get(b, (0, 0))
    llama[b] = (max(best[0], s_pp), max(best[1], s_tg))
ours = {}
for r in rows(sys.argv[2]):
    c = int(r[0]); dec = float(r[7]); pre = float(r[8])
    best = ours.get(c, (0, 0))
    ours[c] = (max(best[0], pre), max(best[1], dec))
print("\n| sequences | stoker decode tok/s | llama.cpp S_TG | ratio | stoker prefill tok/s | llama.cpp S_PP | ratio |")
print("|---|---|---|---|---|---|---|")
for c in sorted(ours):
    if c not in llama:
        continue
    (pre, dec), (lpp, ltg) = ours[c], llama[c]
    print(f"| {c} | {dec:.1f} | {ltg:.1f} | {dec/ltg:.2f}x | {pre:.1f} | {lpp:.1f} | {pre/lpp:.2f}x |")
PY
