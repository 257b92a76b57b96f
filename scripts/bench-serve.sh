#!/usr/bin/env bash
# The serving sweep of BENCHMARKS.md: `stoker bench serve --sweep` against
# `stoker serve` on the default model and, when LLAMA_SERVER names a
# llama.cpp `llama-server` binary, the same sweep against it on the same GGUF,
# one after the other in one run. Writes JSON, SVG and the tables to
# benchmarks/serve/ (or $OUT) and prints both knees side by side.
#
#   scripts/bench-serve.sh                      # stoker only
#   LLAMA_SERVER=/path/to/llama-server scripts/bench-serve.sh
#   LLAMA_SERVER_ARGS=-nr ...                  # extra llama-server flags (-nr: no
#                                               # repacked/extra buffer types, where
#                                               # the CPU's AMX path dies with SIGILL)
#   PLANNER_AB=1 scripts/bench-serve.sh         # also stoker without the step
#                                               # planner's time targets ("stoker-before")
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/benchmarks/serve}"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
STOKER="$ROOT/target/release/stoker"
LEVELS="${LEVELS:-1,2,4,8,16,32}"
REQUESTS="${REQUESTS:-48}"
mkdir -p "$OUT"
"$ROOT/scripts/fetch-model.sh" >/dev/null
[ -x "$STOKER" ] || cargo build --release --locked -p stoker --bin stoker

# One workload for both servers: exact 128-token prompts, exactly 64 output
# tokens, a closed loop stepped through LEVELS clients.
WORKLOAD=(--tokenizer "$MODEL" --input 128 --output 64 --ignore-eos --seed 1
    --concurrency 1 --requests "$REQUESTS" --sweep --sweep-levels "$LEVELS"
    --slo-ttft-ms "${SLO_TTFT_MS:-1000}" --slo-tpot-ms "${SLO_TPOT_MS:-100}" --quiet)

. "$ROOT/scripts/lib/servers.sh"

DATA="$(mktemp -d)"
trap 'kill $SPID $LPID 2>/dev/null || true; rm -rf "$DATA"' EXIT
SPID="" LPID=""

run_stoker() { # NAME [VAR=VALUE ...]: one sweep against a fresh stoker serve
    local name="$1"; shift
    PORT="$(free_port)"
    env "$@" "$STOKER" serve --model "$MODEL" --listen "127.0.0.1:$PORT" \
        --data-dir "$DATA/$name" >"$DATA/$name.log" 2>&1 &
    SPID=$!
    wait_up "http://127.0.0.1:$PORT/health/ready" "$SPID"
    echo "== $name"
    "$STOKER" bench serve --url "http://127.0.0.1:$PORT" "${WORKLOAD[@]}" \
        --save "$OUT/$name.json" --plot "$OUT/$name.svg" | tee "$OUT/$name.txt"
    kill "$SPID"; wait "$SPID" 2>/dev/null || true; SPID=""
}
run_stoker stoker
if [ -n "${PLANNER_AB:-}" ]; then
    run_stoker stoker-before STOKER_ENGINE__ITL_TARGET_FACTOR=0 \
        STOKER_ENGINE__BATCH_STEP_TARGET_MS=0 STOKER_ENGINE__MIN_PREFILL_CHUNK=0
fi

if [ -n "${LLAMA_SERVER:-}" ]; then
    PORT="$(free_port)"
    # As many slots as the highest level, each with the model's 2048-token
    # window; continuous batching is llama-server's default.
    "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -np 32 -c 65536 \
        -t "$(nproc)" --metrics ${LLAMA_SERVER_ARGS:-} >"$DATA/llama.log" 2>&1 &
    LPID=$!
    wait_up "http://127.0.0.1:$PORT/health" "$LPID"
    echo "== llama-server"
    "$STOKER" bench serve --url "http://127.0.0.1:$PORT" --model smollm2 "${WORKLOAD[@]}" \
        --save "$OUT/llama-server.json" --plot "$OUT/llama-server.svg" | tee "$OUT/llama-server.txt"
    kill "$LPID"; wait "$LPID" 2>/dev/null || true; LPID=""
fi

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
rows = []
for name in ("stoker", "stoker-before", "llama-server"):
    p = os.path.join(out, name + ".json")
    if not os.path.exists(p):
        continue
    r = json.load(open(p))
    k = r["knee"]
    if k is None:
        rows.append((name, None, None, None, None))
        continue
    rows.append((name, k["level"], k["ttft_ms"]["p99"], k["output_throughput"], r["knee_bounded"]))
print("\n%-13s %6s %12s %14s" % ("server", "knee", "TTFT p99 ms", "out tok/s"))
for n, lvl, ttft, tok, bounded in rows:
    if lvl is None:
        print("%-13s   none" % n)
    else:
        print("%-13s %6g %12.1f %14.1f%s" % (n, lvl, ttft, tok, "" if bounded else "  (SLOs held at every level)"))
by = {r[0]: r for r in rows}
if "llama-server" in by and by["stoker"][1] and by["llama-server"][1]:
    s, l = by["stoker"], by["llama-server"]
    print("stoker / llama-server at each knee: clients %.1fx, out tok/s %.2fx, TTFT p99 %.2fx"
          % (s[1] / l[1], s[3] / l[3], s[2] / l[2]))
EOF
