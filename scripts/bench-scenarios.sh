#!/usr/bin/env bash
# The multi-tenant scenarios of benchmarks/scenarios/: for each one, a fresh
# `stoker serve` on the default embedded setup and model with two API keys
# (tenants "a" and "b", scopes inference and batch), then
# `stoker bench scenario` against it. Writes benchmarks/scenarios/results/
# <name>.json and one SVG per tenant (<name>-<tenant>.svg), prints each
# scenario's tables and verdicts, and exits 1 if any scenario failed an SLO
# (after running them all).
#
#   scripts/bench-scenarios.sh                          # every scenario
#   scripts/bench-scenarios.sh flood chat-beside-batch  # by name or path
#   STOKER_SCENARIO_SCALE=0.2 scripts/bench-scenarios.sh flood   # a quick run
#
# Builds nothing: expects target/release/stoker from
#   cargo build --release --locked -p stoker --bin stoker
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STOKER="$ROOT/target/release/stoker"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
SCENARIOS="$ROOT/benchmarks/scenarios"
OUT="${OUT:-$SCENARIOS/results}"
SCALE="${STOKER_SCENARIO_SCALE:-1}"

if [ ! -x "$STOKER" ]; then
    echo "no $STOKER; build it first: cargo build --release --locked -p stoker --bin stoker" >&2
    exit 2
fi
"$ROOT/scripts/fetch-model.sh" >/dev/null
. "$ROOT/scripts/lib/servers.sh"

files=()
if [ "$#" -eq 0 ]; then
    files=("$SCENARIOS"/*.toml)
else
    for s in "$@"; do
        if [ -f "$s" ]; then files+=("$s")
        elif [ -f "$SCENARIOS/$s.toml" ]; then files+=("$SCENARIOS/$s.toml")
        else echo "no scenario $s (looked for $s and $SCENARIOS/$s.toml)" >&2; exit 2
        fi
    done
fi
mkdir -p "$OUT"

DATA="$(mktemp -d)"
PID=""
stop_server() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
        PID=""
    fi
}
trap 'stop_server; rm -rf "$DATA"' EXIT

# Fresh random keys for this run; the scenarios read them from these variables.
STOKER_KEY_A="sk-scenario-a-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
STOKER_KEY_B="sk-scenario-b-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
export STOKER_KEY_A STOKER_KEY_B
cat >"$DATA/config.toml" <<EOF
[[api_keys]]
name = "scenario-a"
key = "$STOKER_KEY_A"
tenant = "a"
scopes = ["inference", "batch"]

[[api_keys]]
name = "scenario-b"
key = "$STOKER_KEY_B"
tenant = "b"
scopes = ["inference", "batch"]
EOF

failed=()
for f in "${files[@]}"; do
    name="$(basename "$f" .toml)"
    port="$(free_port)"
    # A fresh server (and state directory) per scenario: nothing queued,
    # cached or measured by the previous one carries over.
    "$STOKER" serve --config "$DATA/config.toml" --model "$MODEL" \
        --listen "127.0.0.1:$port" --data-dir "$DATA/$name" >"$DATA/$name.log" 2>&1 &
    PID=$!
    wait_up "http://127.0.0.1:$port/health/ready" "$PID"
    echo "== $name"
    rc=0
    "$STOKER" bench scenario "$f" --url "http://127.0.0.1:$port" \
        --duration-scale "$SCALE" --save "$OUT/$name.json" --plot-dir "$OUT" || rc=$?
    stop_server
    if grep -q "panicked" "$DATA/$name.log"; then
        echo "the server panicked during $name; see its log:" >&2
        grep -m3 "panicked" "$DATA/$name.log" >&2
        rc=1
    fi
    case "$rc" in
        0) ;;
        1) failed+=("$name") ;;
        *) echo "$name: a bad scenario file (exit $rc)" >&2; exit "$rc" ;;
    esac
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "SLOs failed in: ${failed[*]}" >&2
    exit 1
fi
echo "every scenario's SLOs held"
