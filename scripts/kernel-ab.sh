#!/usr/bin/env bash
# A/B of two builds of the `kernel_types` bench, alternating old and new on
# one pinned core with one compute thread (a 2-core machine's neighbour then
# disturbs both alike), and a summary of new/old time per format and batch.
#
#   cargo bench --locked --no-run -p stoker-executor --bench kernel_types
#   cp target/release/deps/kernel_types-<hash> /tmp/kt_old    # then the new build
#   ROUNDS=12 scripts/kernel-ab.sh /tmp/kt_old /tmp/kt_new
#
# STOKER_BENCH_TYPES and STOKER_BENCH_BS narrow the bench as usual (default
# here: the tiled formats at batch 1, 8 and 64).
set -euo pipefail
OLD="$1" NEW="$2"
ROUNDS="${ROUNDS:-12}"
CORE="${CORE:-1}"
export STOKER_BENCH_TYPES="${STOKER_BENCH_TYPES:-Q4_0,Q5_0,Q4_K,Q6_K}"
export STOKER_BENCH_BS="${STOKER_BENCH_BS:-1,8,64}"
export RAYON_NUM_THREADS=1
RAW="$(mktemp)"
trap 'rm -f "$RAW"' EXIT
for r in $(seq 1 "$ROUNDS"); do
    for side in old new; do
        bin="$OLD"; [ "$side" = new ] && bin="$NEW"
        taskset -c "$CORE" "$bin" 2>/dev/null | grep '^| Q' |
            awk -v s="$side" -v r="$r" -F'|' '{gsub(/ /,"",$2);gsub(/ /,"",$3);gsub(/ /,"",$4); print r, s, $2, $3, $4}' >> "$RAW"
    done
    echo "round $r of $ROUNDS" >&2
done
python3 - "$RAW" <<'PY'
import collections, math, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(dict))
for line in open(sys.argv[1]):
    r, side, t, bs, us = line.split()
    d[(t, int(bs))][side][int(r)] = float(us)
print("| type | batch | new/old, median of pairs | range | new/old of the minima |")
print("|---|---|---|---|---|")
every, minima = [], []
for k in sorted(d):
    o, n = d[k]["old"], d[k]["new"]
    pairs = [n[r] / o[r] for r in o if r in n]
    every += pairs
    m = min(n.values()) / min(o.values())
    minima.append(math.log(m))
    print(f"| {k[0]} | {k[1]} | {statistics.median(pairs):.3f} | {min(pairs):.2f}-{max(pairs):.2f} | {m:.3f} |")
print(f"all {len(every)} pairs: median {statistics.median(every):.3f}; "
      f"geometric mean of the minima's ratios {math.exp(statistics.mean(minima)):.3f}")
PY
