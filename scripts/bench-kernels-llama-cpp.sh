#!/usr/bin/env bash
# Every tensor type's matmul kernel beside llama.cpp's on the same shapes, in one
# run: llama.cpp's `test-backend-ops perf -o MUL_MAT` (m=4096, k=14336, n=bs)
# and stoker's `kernel_types` bench on the same product, then the ratios
# (stoker GFLOP/s over llama.cpp's). test-backend-ops gives its CPU backend
# half the hardware threads, so on a 2-core machine both sides run on one
# thread (RAYON_NUM_THREADS is set to match).
# Needs test-backend-ops: configure .tools/llama.cpp with -DLLAMA_BUILD_TESTS=ON
# after scripts/build-llama-cpp.sh and build the target test-backend-ops.
# Usage: scripts/bench-kernels-llama-cpp.sh [BS_LIST, default 1,8,512]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TBO="$ROOT/.tools/llama.cpp/build/bin/test-backend-ops"
[[ -x "$TBO" ]] || { echo "missing $TBO: see this script's header" >&2; exit 1; }
BS="${1:-1,8,512}"
THREADS=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
cd "$ROOT"
cargo build --release -p stoker-executor --bench kernel_types >/dev/null 2>&1 ||
    cargo build --release -p stoker-executor --bench kernel_types

types="F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K"
for ty in $types; do
    lower="$(echo "$ty" | tr 'A-Z' 'a-z' | sed 's/_k$/_K/')"
    "$TBO" perf -o MUL_MAT -b CPU -p "type_a=${lower},type_b=f32,m=4096,n=(${BS//,/|}),k=14336," \
        2>/dev/null | grep -E 'MUL_MAT\(' >>"$OUT/llama.txt" || true
    RAYON_NUM_THREADS=$THREADS STOKER_BENCH_TYPES=$ty STOKER_BENCH_BS=$BS \
        cargo bench -q -p stoker-executor --bench kernel_types 2>/dev/null | grep -E '^\| [A-Z]' >>"$OUT/stoker.txt"
done
echo "test-backend-ops (CPU backend, $THREADS thread(s)):"
cat "$OUT/llama.txt"
echo "stoker (RAYON_NUM_THREADS=$THREADS):"
cat "$OUT/stoker.txt"
python3 - "$OUT/llama.txt" "$OUT/stoker.txt" <<'PY'
import re, sys
llama = {}
for line in open(sys.argv[1]):
    m = re.search(r'type_a=([a-z0-9_A-Z]+),.*?n=(\d+),.*?([0-9.]+) us/run.*?([0-9.]+) ([GT])FLOPS', line)
    if m:
        g = float(m.group(4)) * (1000 if m.group(5) == 'T' else 1)
        llama[(m.group(1).upper(), int(m.group(2)))] = (float(m.group(3)), g)
print("\n| type | bs | stoker µs/run | llama.cpp µs/run | stoker GFLOP/s | llama.cpp GFLOP/s | ratio |")
print("|---|---|---|---|---|---|---|")
for line in open(sys.argv[2]):
    c = [x.strip() for x in line.strip().strip('|').split('|')]
    ty, bs, us, g = c[0], int(c[1]), float(c[2]), float(c[3])
    if (ty, bs) in llama:
        lus, lg = llama[(ty, bs)]
        print(f"| {ty} | {bs} | {us:.0f} | {lus:.0f} | {g:.1f} | {lg:.1f} | {g / lg:.2f}x |")
    else:
        print(f"| {ty} | {bs} | {us:.0f} | - | {g:.1f} | - | - |")
PY
