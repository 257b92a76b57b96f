#!/usr/bin/env bash
# The overload scenario of RELIABILITY.md: open-loop streaming arrivals at 1x,
# 10x and 50x the knee's request rate against `stoker serve` (the default
# config, whose admission holds a 5 s time-to-first-token objective), the same
# server with the objective off (admission.max_ttft_ms = 0: only the queue
# bounds, as before), and, when LLAMA_SERVER names a llama.cpp `llama-server`
# binary, llama-server on the same GGUF (it queues without bound), one after
# the other in one run. For each: requests sent, completed, refused by code,
# 5xx, TTFT of the accepted ones, goodput within the SLOs, and the server's
# resident memory before, at peak and after. Writes JSON and a table to
# benchmarks/overload/ (or $OUT).
#
#   scripts/bench-overload.sh
#   LLAMA_SERVER=/path/to/llama-server LLAMA_SERVER_ARGS=-nr scripts/bench-overload.sh
#   KNEE_RPS=2.4 DURATION=120 scripts/bench-overload.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/benchmarks/overload}"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
STOKER="$ROOT/target/release/stoker"
# The serving sweep's knee on this machine (BENCHMARKS.md): 8 clients, about
# 2.4 requests a second of 128 prompt and 64 output tokens.
KNEE_RPS="${KNEE_RPS:-2.4}"
MULTIPLES="${MULTIPLES:-1 10 50}"
DURATION="${DURATION:-120}"
# A client gives up on a request after this many seconds (counted `timeout`).
TIMEOUT="${TIMEOUT:-60}"
SLO_TTFT_MS="${SLO_TTFT_MS:-5000}"
mkdir -p "$OUT"
"$ROOT/scripts/fetch-model.sh" >/dev/null
[ -x "$STOKER" ] || cargo build --release --locked -p stoker --bin stoker
. "$ROOT/scripts/lib/servers.sh"

DATA="$(mktemp -d)"
PID=""
trap 'kill $PID 2>/dev/null || true; rm -rf "$DATA"' EXIT

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM/ {print $2}' "/proc/$1/status"; }

# drive NAME URL: one open-loop run per multiple against the server at URL
# (process $PID), then its memory.
drive() {
    local name="$1" url="$2" m rate
    local idle; idle="$(rss_kb "$PID")"
    for m in $MULTIPLES; do
        rate="$(python3 -c "print($KNEE_RPS * $m)")"
        echo "== $name at ${m}x the knee ($rate req/s for ${DURATION}s)"
        "$STOKER" bench serve --url "$url" --tokenizer "$MODEL" --input 128 --output 64 \
            --ignore-eos --seed 1 --rate "$rate" --duration "$DURATION" \
            --requests 1000000 --max-in-flight 10000 --request-timeout "$TIMEOUT" \
            --slo-ttft-ms "$SLO_TTFT_MS" --slo-tpot-ms 100 --quiet \
            --save "$OUT/$name-${m}x.json" | tee "$OUT/$name-${m}x.txt"
    done
    sleep 5
    echo "{\"idle_rss_kb\": $idle, \"peak_rss_kb\": $(hwm_kb "$PID"), \"final_rss_kb\": $(rss_kb "$PID")}" \
        > "$OUT/$name-memory.json"
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
}

run_stoker() { # NAME [VAR=VALUE ...]
    local name="$1"; shift
    local port; port="$(free_port)"
    env "$@" "$STOKER" serve --model "$MODEL" --listen "127.0.0.1:$port" \
        --data-dir "$DATA/$name" >"$DATA/$name.log" 2>&1 &
    PID=$!
    wait_up "http://127.0.0.1:$port/health/ready" "$PID"
    drive "$name" "http://127.0.0.1:$port"
    if grep -q "panicked" "$DATA/$name.log"; then
        echo "$name panicked; see its log:" >&2; grep -m3 "panicked" "$DATA/$name.log" >&2
        exit 1
    fi
}

run_stoker stoker
run_stoker stoker-no-objective STOKER_ADMISSION__MAX_TTFT_MS=0

if [ -n "${LLAMA_SERVER:-}" ]; then
    port="$(free_port)"
    # 16 slots of the model's 2048-token window; continuous batching is
    # llama-server's default; it queues what the slots cannot take.
    "$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" -np 16 -c 32768 \
        -t "$(nproc)" ${LLAMA_SERVER_ARGS:-} >"$DATA/llama-server.log" 2>&1 &
    PID=$!
    wait_up "http://127.0.0.1:$port/health" "$PID"
    drive llama-server "http://127.0.0.1:$port"
fi

python3 - "$OUT" "$MULTIPLES" <<'PY'
import json, os, sys
out, multiples = sys.argv[1], sys.argv[2].split()
rows = []
for name in ["stoker", "stoker-no-objective", "llama-server"]:
    if not os.path.exists(f"{out}/{name}-memory.json"):
        continue
    mem = json.load(open(f"{out}/{name}-memory.json"))
    for m in multiples:
        r = json.load(open(f"{out}/{name}-{m}x.json"))["levels"][0]
        f = r["failures"]
        five = sum(n for c, n in f.items() if c.startswith("http_5") or c in ("internal_error",))
        refused = {c: n for c, n in f.items() if c != "timeout"}
        ttft = r.get("ttft_ms") or {}
        rows.append(f"| {name} | {m}x | {r['requests']} | {r['completed']} | "
                    f"{', '.join(f'{c} {n}' for c, n in sorted(refused.items())) or '-'} | "
                    f"{r['retry_after']} | {f.get('timeout', 0)} | {five} | "
                    f"{ttft.get('p50', float('nan')):.0f} / {ttft.get('p99', float('nan')):.0f} | "
                    f"{r['goodput']:.2f} | {100 * r['slo_attainment']:.1f} % | "
                    f"{mem['idle_rss_kb'] // 1024} / {mem['peak_rss_kb'] // 1024} / {mem['final_rss_kb'] // 1024} |")
head = ("| server | load | sent | completed | refused (by code) | with Retry-After | timed out | 5xx "
        "| TTFT p50 / p99 ms (accepted) | goodput req/s | within SLO | RSS MB idle / peak / after |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|")
table = head + "\n" + "\n".join(rows)
open(f"{out}/table.md", "w").write(table + "\n")
print(table)
PY
