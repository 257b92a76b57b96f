#!/usr/bin/env bash
# The memory soak of RELIABILITY.md: `stoker serve` (the default config) under
# open-loop streaming load at 80 % of the serving sweep's knee for DURATION_MIN
# minutes (prompts of 32 to 224 tokens and outputs of 16 to 112, the knee's
# 128 and 64 on average; a tenth of the requests in the batch lane), with a
# Batch API job running beside it from the start. The load
# runs in windows of WINDOW_S seconds so the latency of each window can be
# compared with the others; resident memory and KV use are sampled every
# 5 seconds. At the end the load stops and the KV cache must be back to idle
# (no block held), the batch job done with every line once.
# Writes JSON, a samples file and a table to benchmarks/soak/ (or $OUT).
#
#   scripts/soak.sh                         # 20 minutes
#   DURATION_MIN=2 scripts/soak.sh          # a quick look
#   STOKER_ENGINE__KV_CACHE_MIB=64 DURATION_MIN=4 OUT=/tmp/soak-64 scripts/soak.sh
#
# Extra environment (like STOKER_ENGINE__KV_CACHE_MIB or MALLOC_ARENA_MAX) goes
# to the server, so the memory model's parts can be varied one at a time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/benchmarks/soak}"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
STOKER="$ROOT/target/release/stoker"
KNEE_RPS="${KNEE_RPS:-2.4}"
DURATION_MIN="${DURATION_MIN:-20}"
WINDOW_S="${WINDOW_S:-120}"
BATCH_LINES="${BATCH_LINES:-400}"
mkdir -p "$OUT"
rm -f "$OUT"/window-*.json "$OUT"/window-*.txt
"$ROOT/scripts/fetch-model.sh" >/dev/null
[ -x "$STOKER" ] || cargo build --release --locked -p stoker --bin stoker
. "$ROOT/scripts/lib/servers.sh"

DATA="$(mktemp -d)"
PID=""
SAMPLER=""
trap 'kill $SAMPLER $PID 2>/dev/null || true; rm -rf "$DATA"' EXIT

port="$(free_port)"
URL="http://127.0.0.1:$port"
"$STOKER" serve --model "$MODEL" --listen "127.0.0.1:$port" --data-dir "$DATA/server" \
    >"$DATA/server.log" 2>&1 &
PID=$!
wait_up "$URL/health/ready" "$PID"

# kv_used: the fraction of KV blocks held by requests (cached, evictable
# blocks are not held).
kv_used() { curl -fsS "$URL/metrics" | awk '/^stoker_kv_cache_usage_perc[{ ]/ && !v {v = $NF} END {print v}'; }
START="$(date +%s)"
(
    echo -e "t_s\trss_kb\tkv_used"
    while kill -0 "$PID" 2>/dev/null; do
        echo -e "$(( $(date +%s) - START ))\t$(awk '/^VmRSS/ {print $2}' "/proc/$PID/status")\t$(kv_used || echo nan)"
        sleep 5
    done
) >"$OUT/samples.tsv" &
SAMPLER=$!

# The Batch API job: BATCH_LINES chat requests of 64 tokens each.
model="$(curl -fsS "$URL/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')"
python3 - "$DATA/batch.jsonl" "$BATCH_LINES" "$model" <<'PY'
import json, sys
path, n, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path, "w") as f:
    for i in range(n):
        f.write(json.dumps({"custom_id": f"soak-{i}", "method": "POST", "url": "/v1/chat/completions",
                            "body": {"model": model, "messages": [{"role": "user", "content": f"Soak line {i}: tell a short story."}],
                                     "max_tokens": 64, "ignore_eos": True}}) + "\n")
PY
file_id="$(curl -fsS "$URL/v1/files" -F purpose=batch -F "file=@$DATA/batch.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
batch_id="$(curl -fsS "$URL/v1/batches" -H 'content-type: application/json' \
    -d "{\"input_file_id\": \"$file_id\", \"endpoint\": \"/v1/chat/completions\", \"completion_window\": \"24h\"}" \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
echo "batch $batch_id of $BATCH_LINES lines submitted"

rate="$(python3 -c "print(round($KNEE_RPS * 0.8, 3))")"
windows=$(( DURATION_MIN * 60 / WINDOW_S ))
for w in $(seq 1 "$windows"); do
    echo "== window $w of $windows ($rate req/s for ${WINDOW_S}s)"
    "$STOKER" bench serve --url "$URL" --tokenizer "$MODEL" --input uniform:32-224 \
        --output uniform:16-112 --ignore-eos --seed "$w" --rate "$rate" --batch-share 0.1 \
        --duration "$WINDOW_S" --requests 1000000 --max-in-flight 10000 --request-timeout 60 \
        --slo-ttft-ms 5000 --slo-tpot-ms 100 --quiet \
        --save "$OUT/window-$w.json" >"$OUT/window-$w.txt"
    tail -n 3 "$OUT/window-$w.txt"
done

# Load is off: the batch job finishes (or is cancelled after 10 minutes), then
# the KV cache must hold nothing.
status=""
for _ in $(seq 1 600); do
    status="$(curl -fsS "$URL/v1/batches/$batch_id" | python3 -c 'import json,sys; b=json.load(sys.stdin); print(b["status"], b["request_counts"]["completed"], b["request_counts"]["failed"])')"
    case "$status" in completed*|failed*|expired*|cancelled*) break ;; esac
    sleep 1
done
case "$status" in completed*|failed*|expired*|cancelled*) ;; *)
    curl -fsS -X POST "$URL/v1/batches/$batch_id/cancel" >/dev/null
    sleep 5
    status="$(curl -fsS "$URL/v1/batches/$batch_id" | python3 -c 'import json,sys; b=json.load(sys.stdin); print(b["status"], b["request_counts"]["completed"], b["request_counts"]["failed"])')"
esac
output_lines=0
output_unique=0
out_file="$(curl -fsS "$URL/v1/batches/$batch_id" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("output_file_id") or "")')"
if [ -n "$out_file" ]; then
    curl -fsS "$URL/v1/files/$out_file/content" >"$DATA/out.jsonl"
    output_lines="$(wc -l <"$DATA/out.jsonl")"
    output_unique="$(python3 -c 'import json,sys; print(len({json.loads(l)["custom_id"] for l in open(sys.argv[1])}))' "$DATA/out.jsonl")"
fi
sleep 5
final_kv="$(kv_used)"
panics="$(grep -c "panicked" "$DATA/server.log" || true)"
sleep 6
kill "$SAMPLER" 2>/dev/null || true

python3 - "$OUT" "$windows" "$status" "$output_lines" "$output_unique" "$final_kv" "$panics" "$DURATION_MIN" <<'PY'
import json, sys
out, windows, status, lines, unique, final_kv, panics, minutes = sys.argv[1:9]
windows = int(windows)
samples = []
for row in open(f"{out}/samples.tsv").read().splitlines()[1:]:
    t, rss, kv = row.split("\t")
    if rss:
        samples.append((int(t), int(rss), float(kv) if kv not in ("", "nan") else None))
def rss_at(t):
    best = min(samples, key=lambda s: abs(s[0] - t))
    return best[1]
load_end = max(s[0] for s in samples)
rows, totals = [], {"sent": 0, "completed": 0, "refused": 0, "5xx": 0, "timeout": 0}
for w in range(1, windows + 1):
    r = json.load(open(f"{out}/window-{w}.json"))["levels"][0]
    f = r["failures"]
    five = sum(n for c, n in f.items() if c.startswith("http_5") or c == "internal_error")
    refused = sum(n for c, n in f.items() if c not in ("timeout",) and not c.startswith("http_5") and c != "internal_error")
    totals["sent"] += r["requests"]; totals["completed"] += r["completed"]
    totals["refused"] += refused; totals["5xx"] += five; totals["timeout"] += f.get("timeout", 0)
    ttft = r.get("ttft_ms") or {}
    tpot = r.get("tpot_ms") or {}
    rows.append(f"| {w} | {r['requests']} | {r['completed']} | {refused} | {five} | "
                f"{ttft.get('p50', float('nan')):.0f} / {ttft.get('p99', float('nan')):.0f} | "
                f"{tpot.get('p99', float('nan')):.0f} | {100 * r['slo_attainment']:.1f} % |")
# Memory from the end of minute 2 to the end of the load.
window_s = load_end / windows if windows else 0
rss2 = rss_at(120)
rss_end = max(s[1] for s in samples if s[0] >= load_end - 10)
summary = {
    "minutes": float(minutes), **totals,
    "rss_kb_start": samples[0][1], "rss_kb_minute_2": rss2, "rss_kb_end": rss_end,
    "rss_kb_peak": max(s[1] for s in samples),
    "rss_growth_from_minute_2_pct": round(100 * (rss_end - rss2) / rss2, 2),
    "kv_used_final": float(final_kv), "batch": status,
    "batch_output_lines": int(lines), "batch_output_unique_ids": int(unique),
    "panics": int(panics),
}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
head = ("| window | sent | completed | refused | 5xx | TTFT p50 / p99 ms | TPOT p99 ms | within SLO |\n"
        "|---|---|---|---|---|---|---|---|")
table = head + "\n" + "\n".join(rows) + "\n\n" + "\n".join(f"- {k}: {v}" for k, v in summary.items())
open(f"{out}/table.md", "w").write(table + "\n")
print(table)
PY
