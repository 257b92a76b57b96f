#!/usr/bin/env bash
# What structured outputs cost over HTTP, stoker beside llama.cpp's
# llama-server on the same GGUF, in one run: plain chat completions against
# `response_format: json_schema` (a JSON string of at least 2,000 characters,
# so every constrained request runs its full 64 tokens; plain ones set
# `ignore_eos`), at 1 and 16 clients, in alternating rounds, median of
# ROUNDS. stoker enforces the schema with llguidance, its masks computed on a
# thread beside the forward pass; llama-server converts it to a GBNF grammar
# and samples under it on its own sampling path. Prints each server's
# constrained/plain ratio and stoker/llama-server for each variant.
#
#   LLAMA_SERVER=.tools/llama.cpp/build/bin/llama-server scripts/bench-constrained.sh
#   LLAMA_SERVER_ARGS=-nr ...    # extra llama-server flags (-nr where AMX dies with SIGILL)
#   ROUNDS=5 LEVELS=1,16 ...     # defaults
#
# llama-server comes from scripts/build-llama-cpp.sh (10-45 minutes on 2
# cores); nothing here runs in CI.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
STOKER="$ROOT/target/release/stoker"
LLAMA_SERVER="${LLAMA_SERVER:-$ROOT/.tools/llama.cpp/build/bin/llama-server}"
if [ ! -x "$LLAMA_SERVER" ]; then
    echo "llama-server not found at $LLAMA_SERVER: run scripts/build-llama-cpp.sh or set LLAMA_SERVER" >&2
    exit 1
fi
"$ROOT/scripts/fetch-model.sh" >/dev/null
[ -x "$STOKER" ] || cargo build --release --locked -p stoker --bin stoker

. "$ROOT/scripts/lib/servers.sh"

DATA="$(mktemp -d)"
SPID="" LPID=""
trap 'kill $SPID $LPID 2>/dev/null || true; rm -rf "$DATA"' EXIT

SPORT="$(free_port)"
"$STOKER" serve --model "$MODEL" --listen "127.0.0.1:$SPORT" --data-dir "$DATA/stoker" \
    >"$DATA/stoker.log" 2>&1 &
SPID=$!
wait_up "http://127.0.0.1:$SPORT/health/ready" "$SPID"

LPORT="$(free_port)"
# 16 slots of the model's 2048-token window; continuous batching is its default.
"$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$LPORT" -np 16 -c 32768 \
    -t "$(nproc)" ${LLAMA_SERVER_ARGS:-} >"$DATA/llama.log" 2>&1 &
LPID=$!
wait_up "http://127.0.0.1:$LPORT/health" "$LPID"

python3 - "http://127.0.0.1:$SPORT" "http://127.0.0.1:$LPORT" <<'EOF'
import json, os, statistics, sys, threading, time, urllib.request

stoker, llama = sys.argv[1], sys.argv[2]
rounds = int(os.environ.get("ROUNDS", "5"))
levels = [int(x) for x in os.environ.get("LEVELS", "1,16").split(",")]
max_tokens = 64
schema = {"type": "string", "minLength": 2000}
fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": True}}

def model_of(url):
    with urllib.request.urlopen(url + "/v1/models") as r:
        return json.load(r)["data"][0]["id"]

servers = [("stoker", stoker, model_of(stoker)), ("llama-server", llama, model_of(llama))]
bad = []

def request(url, model, variant, i):
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"Request {i}: write a long story about a lighthouse keeper."}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if variant == "json_schema":
        body["response_format"] = fmt
    else:
        body["ignore_eos"] = True
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    text = out["choices"][0]["message"]["content"] or ""
    if variant == "json_schema" and not text.startswith('"'):
        bad.append((url, text[:80]))
    return out["usage"]["completion_tokens"]

def run(url, model, variant, clients):
    per_client = max(4, 32 // clients)
    total = [0]
    lock = threading.Lock()
    def client(c):
        for k in range(per_client):
            n = request(url, model, variant, c * 1000 + k)
            with lock:
                total[0] += n
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.monotonic()
    for t in threads: t.start()
    for t in threads: t.join()
    return total[0] / (time.monotonic() - t0)

variants = ["plain", "json_schema"]
for name, url, model in servers:  # warm-up: grammar compilers, caches, pages
    for v in variants:
        run(url, model, v, 1)
results = {}
for rnd in range(rounds):
    for clients in levels:
        order = servers if rnd % 2 == 0 else servers[::-1]
        for name, url, model in order:
            for v in (variants if rnd % 2 == 0 else variants[::-1]):
                results.setdefault((clients, name, v), []).append(run(url, model, v, clients))
    print(f"round {rnd + 1}/{rounds} done", file=sys.stderr)

med = {k: statistics.median(v) for k, v in results.items()}
print(f"\n{max_tokens} output tokens per request, median of {rounds} alternating rounds (tok/s)")
print("| concurrency | server | plain tok/s | json_schema tok/s | json_schema / plain |")
print("|---|---|---|---|---|")
for c in levels:
    for name, _, _ in servers:
        p, j = med[(c, name, "plain")], med[(c, name, "json_schema")]
        print(f"| {c} | {name} | {p:.1f} | {j:.1f} | {j / p:.3f} |")
print("\n| concurrency | stoker / llama-server, plain | stoker / llama-server, json_schema |")
print("|---|---|---|")
for c in levels:
    r = [med[(c, "stoker", v)] / med[(c, "llama-server", v)] for v in variants]
    print(f"| {c} | {r[0]:.2f} | {r[1]:.2f} |")
if bad:
    print(f"\n{len(bad)} constrained answers were not a JSON string, e.g. {bad[0]}")
    sys.exit(1)
EOF
