#!/usr/bin/env bash
# Does the routing simulator agree with the real distributed mode? Runs one
# API instance and two executors behind tansu on this machine, offers them
# Poisson arrivals of fixed-length requests with `stoker bench serve`, reads
# from each executor's metrics, over the measured run, the requests it ran,
# the time it spent stepping and its own time to first token, and at the
# end its fitted step cost (stoker_engine_step_cost_ms). Then it runs the
# simulator (bench sim_agreement) on the same rate and lengths, its step
# cost shaped by the fit and levelled to the measured busy time per
# request, the reply's trip set to the client's TTFT less the engines', on
# the very send times the real run used (several seeds of the rest). Prints
# both side by side: TTFT p50 and p99, end-to-end p50, mean inter-token
# time, and the load split between the executors (BENCHMARKS.md, "Routing
# at scale").
#
#   scripts/bench-sim-agreement.sh      # RATE=2 INPUT=128 OUTPUT=32 REQUESTS=200
#
# Needs Postgres on 127.0.0.1:5432 (trust auth) and .tools/tansu
# (scripts/fetch-broker.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/benchmarks/sim-agreement}"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
STOKER="$ROOT/target/release/stoker"
RATE="${RATE:-2}"
INPUT="${INPUT:-128}"
OUTPUT="${OUTPUT:-32}"
REQUESTS="${REQUESTS:-200}"
SEED="${SEED:-1}"
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

# A short closed-loop warm-up fits the executors' step-cost models to this
# machine's load before the measured run.
"$STOKER" bench serve --url "$API" --tokenizer "$MODEL" --input "$INPUT" --output "$OUTPUT" \
    --ignore-eos --seed 7 --concurrency 4 --requests 40 --quiet >/dev/null
for i in 0 1; do curl -fsS "${EXEC_URLS[$i]}/metrics" >"$OUT/ex$i.before.metrics"; done
"$STOKER" bench serve --url "$API" --tokenizer "$MODEL" --input "$INPUT" --output "$OUTPUT" \
    --ignore-eos --seed "$SEED" --rate "$RATE" --requests "$REQUESTS" --quiet --save "$OUT/real.json" >/dev/null
for i in 0 1; do curl -fsS "${EXEC_URLS[$i]}/metrics" >"$OUT/ex$i.metrics"; done

# What each executor did over the measured run (the warm-up subtracted):
# requests it finished, seconds it spent stepping, and the sum and count of
# its own time to first token, from arrival at its engine.
MEASURED="$(python3 - "$OUT" <<'PY'
import json, sys
def read(path):
    want = {"stoker_request_success_total": "served",
            "stoker_engine_step_duration_seconds_sum": "busy_s",
            "stoker_time_to_first_token_seconds_sum": "ttft_s",
            "stoker_time_to_first_token_seconds_count": "ttft_n"}
    got = dict.fromkeys(want.values(), 0.0)
    for l in open(path):
        name = l.split("{", 1)[0]
        if name in want and 'lane="interactive"' in l:
            got[want[name]] += float(l.rsplit(" ", 1)[1])
    return got
out = []
for i in (0, 1):
    b, a = read(f"{sys.argv[1]}/ex{i}.before.metrics"), read(f"{sys.argv[1]}/ex{i}.metrics")
    out.append({k: a[k] - b[k] for k in a})
print(json.dumps(out))
PY
)"

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
read -r BUSY_MS WIRE_MS < <(python3 - "$OUT" "$MEASURED" <<'PY'
import json, sys
m = json.loads(sys.argv[2])
real = json.load(open(f"{sys.argv[1]}/real.json"))["levels"][0]
served = sum(e["served"] for e in m)
busy_ms = 1000.0 * sum(e["busy_s"] for e in m) / served
engine_ttft_ms = 1000.0 * sum(e["ttft_s"] for e in m) / sum(e["ttft_n"] for e in m)
print(f"{busy_ms:.2f} {real['ttft_ms']['mean'] - engine_ttft_ms:.2f}")
PY
)
STOKER_SIM_RATE="$RATE" STOKER_SIM_INPUT="$INPUT" STOKER_SIM_OUTPUT="$OUTPUT" STOKER_SIM_COST="$COST" \
    STOKER_SIM_BUSY_MS="$BUSY_MS" STOKER_SIM_WIRE_MS="$WIRE_MS" \
    STOKER_SIM_REQUESTS="$REQUESTS" STOKER_SIM_BENCH_SEED="$SEED" \
    cargo bench --locked -q -p stoker-sim --bench sim_agreement 2>/dev/null | tail -1 >"$OUT/sim.json"

python3 - "$OUT" "$COST" "$RATE" "$INPUT" "$OUTPUT" "$MEASURED" "$BUSY_MS" "$WIRE_MS" <<'PY' | tee "$OUT/summary.txt"
import json, sys
out, cost, rate, inp, outp, measured, busy_ms, wire_ms = sys.argv[1:9]
real = json.load(open(f"{out}/real.json"))["levels"][0]
sim = json.load(open(f"{out}/sim.json"))
rs = [e["served"] for e in json.loads(measured)]
share = lambda v: 100.0 * max(v) / max(sum(v), 1)
print(f"1 API instance, 2 executors, Poisson {rate} req/s, {inp} tokens in / {outp} out, "
      f"{real['requests']} requests sent over {sim['span_s']:.1f} s ({(real['requests'] - 1) / sim['span_s']:.2f} req/s realised);")
print(f"step cost fitted by the executors (fixed, per token, per sampled row, per 1k attention pairs; ms): {cost};")
print(f"measured: {float(busy_ms):.0f} ms of steps per request; client TTFT less the engines' {float(wire_ms):.0f} ms;")
print(f"simulated: the fit x {sim['scale']:.2f} (busy {sim['busy_ms_per_request']:.0f} ms a request, "
      f"the executors busy {(real['requests'] - 1) / sim['span_s'] * sim['busy_ms_per_request'] / 20:.0f} % of the arrivals' span), reply trip {sim['reply_ms']:.0f} ms, "
      f"the real send times, {sim['seeds']} seeds")
print(f"{'':>10} {'TTFT p50':>10} {'TTFT p99':>10} {'E2E p50':>10} {'mean ITL':>9} {'busier executor':>16}")
print(f"{'real':>10} {real['ttft_ms']['p50']:>8.1f}ms {real['ttft_ms']['p99']:>8.1f}ms {real['e2e_ms']['p50']:>8.1f}ms "
      f"{real['itl_ms']['mean']:>7.1f}ms {share(rs):>15.1f}%  ({rs[0]:.0f} / {rs[1]:.0f} requests)")
lo, hi = sim['ttft_p50_range_ms']
print(f"{'simulated':>10} {sim['ttft_p50_ms']:>8.1f}ms {sim['ttft_p99_ms']:>8.1f}ms {sim['e2e_p50_ms']:>8.1f}ms "
      f"{sim['itl_mean_ms']:>7.1f}ms {share(sim['served']):>15.1f}%  "
      f"({sim['served'][0]} / {sim['served'][1]} requests over the seeds; TTFT p50 {lo:.0f}-{hi:.0f} ms across them)")
print(f"TTFT p50 simulated / real: {sim['ttft_p50_ms'] / real['ttft_ms']['p50']:.2f}; "
      f"load split difference: {abs(share(rs) - share(sim['served'])):.1f} points")
PY
