#!/usr/bin/env bash
# Two builds of stoker side by side over HTTP: the same closed-loop workload
# (exact 128-token prompts, exactly 64 output tokens) against a fresh
# `stoker serve` of build A, then of build B, alternating, for ROUNDS rounds
# at each level of LEVELS clients. Prints each run and, per level, B/A output
# tokens per second for each round and their median. A run in which the
# server refused requests (admission's TTFT objective) is reported and left out
# of the ratio: it measures the refusal, not the build.
#
#   scripts/bench-ab.sh OLD_BINARY NEW_BINARY
#   ROUNDS=3 LEVELS="1 16" scripts/bench-ab.sh /tmp/stoker-a target/release/stoker
#
# Copy build A's binary away before building B: both runs need both files.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
A="${1:?usage: scripts/bench-ab.sh BINARY_A BINARY_B}"
B="${2:?usage: scripts/bench-ab.sh BINARY_A BINARY_B}"
ROUNDS="${ROUNDS:-3}"
LEVELS="${LEVELS:-1 16}"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
"$ROOT/scripts/fetch-model.sh" >/dev/null
. "$ROOT/scripts/lib/servers.sh"

OUT="$(mktemp -d)"
trap 'kill $PID 2>/dev/null || true; rm -rf "$OUT"' EXIT
PID=""

run() { # NAME BINARY CLIENTS ROUND
    local name="$1" bin="$2" clients="$3" round="$4" port requests
    port="$(free_port)"
    requests=$((clients == 1 ? 12 : clients * 6))
    "$bin" serve --model "$MODEL" --listen "127.0.0.1:$port" \
        --data-dir "$OUT/data-$name-$clients-$round" >"$OUT/$name-$clients-$round.log" 2>&1 &
    PID=$!
    wait_up "http://127.0.0.1:$port/health/ready" "$PID"
    # One client binary (A's) drives both servers.
    "$A" bench serve --url "http://127.0.0.1:$port" --tokenizer "$MODEL" --input 128 \
        --output 64 --ignore-eos --seed "$round" --concurrency "$clients" \
        --requests "$requests" --quiet --save "$OUT/$name-$clients-$round.json" >/dev/null
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}

for round in $(seq 1 "$ROUNDS"); do
    for clients in $LEVELS; do
        run a "$A" "$clients" "$round"
        run b "$B" "$clients" "$round"
    done
done

python3 - "$OUT" "$ROUNDS" "$LEVELS" <<'EOF'
import json, os, statistics, sys
out, rounds, levels = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
print(f"{'run':<10} {'out tok/s':>10} {'TTFT p50':>9} {'TPOT p50':>9} {'refused':>8}")
for clients in levels:
    ratios = []
    for r in range(1, rounds + 1):
        got = {}
        for name in ("a", "b"):
            lvl = json.load(open(os.path.join(out, f"{name}-{clients}-{r}.json")))["levels"][0]
            got[name] = lvl
            print(f"{name}-{clients}-{r:<6} {lvl['output_throughput']:>10.1f} "
                  f"{lvl['ttft_ms']['p50']:>7.0f}ms {lvl['tpot_ms']['p50']:>7.1f}ms "
                  f"{lvl['failed']:>8}")
        if got["a"]["failed"] or got["b"]["failed"]:
            print(f"  round {r} at {clients} clients left out: a server refused requests")
            continue
        ratios.append(got["b"]["output_throughput"] / got["a"]["output_throughput"])
    if ratios:
        print(f"{clients} clients: B/A output tok/s per round "
              f"{', '.join(f'{x:.3f}' for x in ratios)}; median {statistics.median(ratios):.3f}")
EOF
