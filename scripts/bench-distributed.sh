#!/usr/bin/env bash
# The distributed-mode benchmark of BENCHMARKS.md: what the Kafka path
# (`stoker api` -> tansu -> `stoker executor` -> tansu -> `stoker api`) adds to
# TTFT against `stoker serve`, and output tokens/s with two executors against
# one. Everything runs at once on this machine, and the two targets are
# measured alternately, round by round, with the same prompts per round, so
# machine noise falls on both.
#
#   scripts/bench-distributed.sh        # writes benchmarks/distributed/
#
# Needs Postgres on 127.0.0.1:5432 (trust auth) and .tools/tansu
# (scripts/fetch-broker.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/benchmarks/distributed}"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
STOKER="$ROOT/target/release/stoker"
ROUNDS="${ROUNDS:-3}"
CLIENTS="${CLIENTS:-1 4}"   # client counts of the TTFT comparison
SCALING="${SCALING:-1}"     # 0 skips the one-against-two-executors runs
REQUESTS="${REQUESTS:-40}"
PG="${PG:-postgres://postgres@127.0.0.1:5432}"
mkdir -p "$OUT"
"$ROOT/scripts/fetch-model.sh" >/dev/null
"$ROOT/scripts/fetch-broker.sh" >/dev/null
[ -x "$STOKER" ] || cargo build --release --locked -p stoker --bin stoker

. "$ROOT/scripts/lib/servers.sh"

DATA="$(mktemp -d)"
DB="stoker_bench_$$"
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
start_broker() {
    .tools/tansu broker --listener-url "tcp://127.0.0.1:$BROKER_PORT" \
        --advertised-listener-url "tcp://127.0.0.1:$BROKER_PORT" \
        --storage-engine memory://tansu/ >>"$DATA/tansu.log" 2>&1 &
    BROKER_PID=$!
    PIDS+=("$BROKER_PID")
}
start_broker

SERVE_PORT="$(free_port)"
"$STOKER" serve --model "$MODEL" --listen "127.0.0.1:$SERVE_PORT" --data-dir "$DATA/serve" \
    >"$DATA/serve.log" 2>&1 &
PIDS+=($!)
wait_up "http://127.0.0.1:$SERVE_PORT/health/ready" "${PIDS[-1]}"

DIST=(--brokers "127.0.0.1:$BROKER_PORT" --database-url "$PG/$DB" --model "$MODEL")
start_executor() { # ID
    local port; port="$(free_port)"
    "$STOKER" executor "${DIST[@]}" --id "$1" --listen "127.0.0.1:$port" \
        --data-dir "$DATA/$1" >"$DATA/$1.log" 2>&1 &
    PIDS+=($!)
    wait_up "http://127.0.0.1:$port/health/ready" "${PIDS[-1]}"
}
start_executor bench-ex0
API_PORT="$(free_port)"
"$STOKER" api "${DIST[@]}" --id bench-api --listen "127.0.0.1:$API_PORT" \
    --data-dir "$DATA/api" >"$DATA/api.log" 2>&1 &
PIDS+=($!)
wait_up "http://127.0.0.1:$API_PORT/health/ready" "${PIDS[-1]}"

SERVE="http://127.0.0.1:$SERVE_PORT"
API="http://127.0.0.1:$API_PORT"
MODEL_ID="$(curl -fsS "$API/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')"

# tansu's memory engine answers a fetch in time linear in the record batches
# its partition holds (about +1.5 ms per hop per 1,000 batches, measured with
# a bare client), and every token delta is a batch: left alone, the broker
# slows down run after run. So each Kafka run starts on a fresh broker (same
# address; the processes re-create the topics and re-assign themselves, the
# recovery path of a broker that lost its log) once the API serves again
# through N executors.
fresh_broker() { # N
    kill "$BROKER_PID" 2>/dev/null || true
    wait "$BROKER_PID" 2>/dev/null || true
    start_broker
    for _ in $(seq 1 600); do
        live="$(curl -fsS "$API/admin/v1/executors" 2>/dev/null | python3 -c \
            'import json,sys; print(sum(1 for e in json.load(sys.stdin)["data"] if (e.get("live") or {}).get("ready")))' \
            2>/dev/null || echo 0)"
        if [ "$live" = "$1" ] && curl -fsS -o /dev/null "$API/v1/completions" \
            -H 'content-type: application/json' \
            -d "{\"model\": \"$MODEL_ID\", \"prompt\": \"Hi\", \"max_tokens\": 2}" 2>/dev/null; then
            return 0
        fi
        sleep 0.5
    done
    echo "the API did not recover after a broker restart; see $DATA/api.log" >&2
    return 1
}
bench() { # NAME URL CLIENTS SEED INPUT OUTPUT
    "$STOKER" bench serve --url "$2" --tokenizer "$MODEL" --input "$5" --output "$6" \
        --ignore-eos --seed "$4" --concurrency "$3" --requests "$REQUESTS" --quiet \
        --save "$OUT/$1.json" >/dev/null
}

# 1. TTFT through Kafka against in-process: short prompts and outputs, so
# transport latency is not buried under prefill. Alternating, same prompts.
# Each round also times one bare broker hop with the same client settings:
# a first token crosses two, so twice that is the broker's share.
for c in $CLIENTS; do
    for r in $(seq 1 "$ROUNDS"); do
        bench "serve-c$c-r$r" "$SERVE" "$c" "$r" 16 16
        fresh_broker 1
        bench "kafka1-c$c-r$r" "$API" "$c" "$r" 16 16
        "$STOKER" bench broker --brokers "127.0.0.1:$BROKER_PORT" --messages 100 \
            --save "$OUT/broker-c$c-r$r.json" >/dev/null
    done
done

# 2. Scaling: one executor against two, same load (8 clients, 64 in, 64 out).
if [ "$SCALING" = 1 ]; then
    for r in $(seq 1 "$ROUNDS"); do
        fresh_broker 1
        bench "kafka1-scale-r$r" "$API" 8 "$((100 + r))" 64 64
    done
    start_executor bench-ex1
    for r in $(seq 1 "$ROUNDS"); do
        fresh_broker 2
        bench "kafka2-scale-r$r" "$API" 8 "$((100 + r))" 64 64
    done
fi

python3 - "$OUT" "$ROUNDS" "$CLIENTS" "$SCALING" <<'PY' | tee "$OUT/summary.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
clients, scaling = [int(c) for c in sys.argv[3].split()], sys.argv[4] == "1"
def level(name):
    return json.load(open(f"{out}/{name}.json"))["levels"][0]
def med(xs):
    return statistics.median(xs)
print("TTFT through Kafka (api + tansu + executor) against stoker serve, 16 in / 16 out,")
print(f"median over {rounds} alternating rounds of per-round figures:")
print(f"{'clients':>7} {'serve p50':>10} {'kafka p50':>10} {'delta p50':>10} "
      f"{'serve p99':>10} {'kafka p99':>10} {'serve tok/s':>11} {'kafka tok/s':>11}")
hops = {}
for c in clients:
    s = [level(f"serve-c{c}-r{r}") for r in range(1, rounds + 1)]
    k = [level(f"kafka1-c{c}-r{r}") for r in range(1, rounds + 1)]
    sp50 = med([x["ttft_ms"]["p50"] for x in s]); kp50 = med([x["ttft_ms"]["p50"] for x in k])
    deltas = [b["ttft_ms"]["p50"] - a["ttft_ms"]["p50"] for a, b in zip(s, k)]
    hops[c] = med([json.load(open(f"{out}/broker-c{c}-r{r}.json"))["hop_ms"]["p50"]
                   for r in range(1, rounds + 1)])
    print(f"{c:>7} {sp50:>9.1f}ms {kp50:>9.1f}ms {med(deltas):>+9.1f}ms "
          f"{med([x['ttft_ms']['p99'] for x in s]):>9.1f}ms {med([x['ttft_ms']['p99'] for x in k]):>9.1f}ms "
          f"{med([x['output_throughput'] for x in s]):>11.1f} {med([x['output_throughput'] for x in k]):>11.1f}"
          f"   bare hop p50 {hops[c]:.2f} ms (two hops {2 * hops[c]:.2f} ms)")
    print(f"{'':>7} per-round deltas: " + ", ".join(f"{d:+.1f}" for d in deltas) + " ms")
if not scaling:
    sys.exit(0)
one = [level(f"kafka1-scale-r{r}") for r in range(1, rounds + 1)]
two = [level(f"kafka2-scale-r{r}") for r in range(1, rounds + 1)]
t1 = med([x["output_throughput"] for x in one]); t2 = med([x["output_throughput"] for x in two])
print()
print("Scaling, 8 clients, 64 in / 64 out, through the API (one machine: the executors share its cores):")
print(f"  one executor : {t1:7.1f} output tok/s, TTFT p50 {med([x['ttft_ms']['p50'] for x in one]):.0f} ms")
print(f"  two executors: {t2:7.1f} output tok/s, TTFT p50 {med([x['ttft_ms']['p50'] for x in two]):.0f} ms")
print(f"  ratio two/one: {t2 / t1:.2f}x")
PY
