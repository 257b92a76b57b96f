#!/usr/bin/env bash
# Does the routing simulator agree with the real distributed mode? Runs one
# API instance and two executors behind tansu on this machine, offers them
# Poisson arrivals of fixed-length requests with `stoker bench serve`, reads
# each executor's fitted step cost (stoker_engine_step_cost_ms) and the
# requests each ran, then runs the simulator (bench sim_agreement) on the
# same rate, lengths and step cost, and prints both side by side: TTFT p50
# and p99, and the load split between the executors (BENCHMARKS.md,
# "Routing at scale").
#
#   scripts/bench-sim-agreement.sh      # RATE=4 INPUT=128 OUTPUT=32 REQUESTS=300
#
# Needs Postgres on 127.0.0.1:5432 (trust auth) and .tools/tansu
# (scripts/fetch-broker.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/benchmarks/sim-agreement}"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
STOKER="$ROOT/target/release/stoker"
RATE="${RATE:-4}"
INPUT="${INPUT:-128}"
OUTPUT="${OUTPUT:-32}"
REQUESTS="${REQUESTS:-300}"
PG="${PG:-postgres://postgres@127.0.0.1:5432}"
mkdir -p "$OUT"
"$ROOT/scripts/fetch-model.sh" >/dev/null
"$ROOT/scripts/fetch-broker.sh" >/dev/null
[ -x "$STOKER" ] || cargo build --release --locked -p stoker --bin stoker

. "$ROOT/scripts/lib/servers.sh"

DATA="$(mktemp -d)"
DB="stoker_simagree_$$"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    psql "$PG/postgres" -q -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$DATA"
}
trap cleanup EXIT
psql "$PG/postgres" -q -c "CREATE DATABASE $DB"

BROKER_PORT="$(free_port)"
.tools/tansu broker --listener-url "tcp://127.0.0.1:$BROKER_PORT" \
    --advertised-listener-url "tcp://127.0.0.1:$BROKER_PORT" \
    --storage-engine memory://tansu/ >>"$DATA/tansu.log" 2>&1 &
PIDS+=($!)

DIST=(--brokers "127.0.0.1:$BROKER_PORT" --database-url "$PG/$DB" --model "$MODEL")
EXEC_URLS=()
for id in agree-ex0 agree-ex1; do
    port="$(free_port)"
    "$STOKER" executor "${DIST[@]}" --id "$id" --listen "127.0.0.1:$port" \
        --data-dir "$DATA/$id" >"$DATA/$id.log" 2>&1 &
    PIDS+=($!)
    wait_up "http://127.0.0.1:$port/health/ready" "${PIDS[-1]}"
    EXEC_URLS+=("http://127.0.0.1:$port")
done
API_PORT="$(free_port)"
"$STOKER" api "${DIST[@]}" --id agree-api --listen "127.0.0.1:$API_PORT" \
    --data-dir "$DATA/api" >"$DATA/api.log" 2>&1 &
PIDS+=($!)
wait_up "http://127.0.0.1:$API_PORT/health/ready" "${PIDS[-1]}"
API="http://127.0.0.1:$API_PORT"

# Both executors report ready to the API before the run.
for _ in $(seq 1 600); do
    live="$(curl -fsS "$API/admin/v1/executors" 2>/dev/null | python3 -c \
        'import json,sys; print(sum(1 for e in json.load(sys.stdin)["data"] if (e.get("live") or {}).get("ready")))' \
        2>/dev/null || echo 0)"
    [ "$live" = 2 ] && break
    sleep 0.5
done

served() { # URL: interactive requests the executor finished
    curl -fsS "$1/metrics" | python3 -c '
import sys
print(sum(float(l.rsplit(" ", 1)[1]) for l in sys.stdin
          if l.startswith("stoker_request_success_total{") and "lane=\"interactive\"" in l))'
}
# A short closed-loop warm-up fits the executors' step-cost models to this
# machine's load before the measured run.
"$STOKER" bench serve --url "$API" --tokenizer "$MODEL" --input "$INPUT" --output "$OUTPUT" \
    --ignore-eos --seed 7 --concurrency 4 --requests 40 --quiet >/dev/null
before=("$(served "${EXEC_URLS[0]}")" "$(served "${EXEC_URLS[1]}")")
"$STOKER" bench serve --url "$API" --tokenizer "$MODEL" --input "$INPUT" --output "$OUTPUT" \
    --ignore-eos --seed 1 --rate "$RATE" --requests "$REQUESTS" --quiet --save "$OUT/real.json" >/dev/null
after=("$(served "${EXEC_URLS[0]}")" "$(served "${EXEC_URLS[1]}")")
for i in 0 1; do curl -fsS "${EXEC_URLS[$i]}/metrics" >"$OUT/ex$i.metrics"; done

COST="$(python3 - "$OUT" <<'PY'
import sys
terms = {}
for i in (0, 1):
    for l in open(f"{sys.argv[1]}/ex{i}.metrics"):
        if l.startswith("stoker_engine_step_cost_ms{"):
            term = l.split('term="', 1)[1].split('"', 1)[0]
            terms.setdefault(term, []).append(float(l.rsplit(" ", 1)[1]))
mean = lambda t: sum(terms[t]) / len(terms[t])
print(",".join(f"{mean(t):.4f}" for t in ("fixed", "per_token", "per_sampled_row", "per_1k_attention_pairs")))
PY
)"
STOKER_SIM_RATE="$RATE" STOKER_SIM_INPUT="$INPUT" STOKER_SIM_OUTPUT="$OUTPUT" STOKER_SIM_COST="$COST" \
    cargo bench --locked -q -p stoker-api --bench sim_agreement 2>/dev/null | tail -1 >"$OUT/sim.json"

python3 - "$OUT" "$COST" "$RATE" "$INPUT" "$OUTPUT" "${before[@]}" "${after[@]}" <<'PY' | tee "$OUT/summary.txt"
import json, sys
out, cost, rate, inp, outp = sys.argv[1:6]
b0, b1, a0, a1 = map(float, sys.argv[6:10])
real = json.load(open(f"{out}/real.json"))["levels"][0]
sim = json.load(open(f"{out}/sim.json"))
rs = [a0 - b0, a1 - b1]
share = lambda v: 100.0 * max(v) / max(sum(v), 1)
print(f"1 API instance, 2 executors, Poisson {rate} req/s, {inp} tokens in / {outp} out;")
print(f"step cost fitted by the executors (fixed, per token, per sampled row, per 1k attention pairs; ms): {cost}")
print(f"{'':>10} {'TTFT p50':>10} {'TTFT p99':>10} {'busier executor':>16}")
print(f"{'real':>10} {real['ttft_ms']['p50']:>8.1f}ms {real['ttft_ms']['p99']:>8.1f}ms {share(rs):>15.1f}%  ({rs[0]:.0f} / {rs[1]:.0f} requests)")
print(f"{'simulated':>10} {sim['ttft_p50_ms']:>8.1f}ms {sim['ttft_p99_ms']:>8.1f}ms {share(sim['served']):>15.1f}%  ({sim['served'][0]} / {sim['served'][1]} requests)")
print(f"TTFT p50 simulated / real: {sim['ttft_p50_ms'] / real['ttft_ms']['p50']:.2f}; "
      f"load split difference: {abs(share(rs) - share(sim['served'])):.1f} points")
PY
