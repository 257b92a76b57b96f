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
#   STOKER_SCENARIO_SERVER=distributed scripts/bench-scenarios.sh flood
#   STOKER_SCENARIO_LOGS=/some/dir scripts/bench-scenarios.sh flood  # keep the servers' logs
#
# With STOKER_SCENARIO_SERVER=distributed each scenario runs against
# distributed mode instead: a fresh tansu broker (scripts/fetch-broker.sh), a
# fresh Postgres database on $PG (default postgres://postgres@127.0.0.1:5432),
# two `stoker executor`s and one `stoker api` with the same keys; results are
# named <name>-distributed (plots in results/distributed/).
#
# Builds nothing: expects target/release/stoker from
#   cargo build --release --locked -p stoker --bin stoker
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
STOKER="$ROOT/target/release/stoker"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
# Relative to the root (the working directory): the reports name the file.
SCENARIOS="benchmarks/scenarios"
OUT="${OUT:-$ROOT/$SCENARIOS/results}"
SCALE="${STOKER_SCENARIO_SCALE:-1}"
MODE="${STOKER_SCENARIO_SERVER:-serve}"
PG="${PG:-postgres://postgres@127.0.0.1:5432}"
case "$MODE" in
    serve | distributed) ;;
    *) echo "STOKER_SCENARIO_SERVER must be serve or distributed, not $MODE" >&2; exit 2 ;;
esac

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
PIDS=()
DB=""
stop_server() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
    if [ -n "$DB" ]; then
        psql "$PG/postgres" -q -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1 || true
        DB=""
    fi
}
LOGS="${STOKER_SCENARIO_LOGS:-}"
keep_logs() {
    if [ -n "$LOGS" ]; then mkdir -p "$LOGS" && cp "$DATA"/*.log "$LOGS"/ 2>/dev/null || true; fi
}
trap 'stop_server; keep_logs; rm -rf "$DATA"' EXIT
if [ "$MODE" = distributed ]; then
    "$ROOT/scripts/fetch-broker.sh" >/dev/null
fi

# start_server NAME PORT: `stoker serve`, or the distributed processes with
# the API on PORT; returns once the API is ready (and, distributed, routes
# to both executors).
start_server() {
    local name="$1" port="$2"
    if [ "$MODE" = serve ]; then
        "$STOKER" serve --config "$DATA/config.toml" --model "$MODEL" \
            --listen "127.0.0.1:$port" --data-dir "$DATA/$name" >"$DATA/$name.log" 2>&1 &
        PIDS+=($!)
        wait_up "http://127.0.0.1:$port/health/ready" "${PIDS[-1]}"
        return
    fi
    DB="stoker_scenario_$$_${name//-/_}"
    psql "$PG/postgres" -q -c "CREATE DATABASE $DB"
    local broker; broker="$(free_port)"
    .tools/tansu broker --listener-url "tcp://127.0.0.1:$broker" \
        --advertised-listener-url "tcp://127.0.0.1:$broker" \
        --storage-engine memory://tansu/ >"$DATA/$name-tansu.log" 2>&1 &
    PIDS+=($!)
    local dist=(--config "$DATA/config.toml" --brokers "127.0.0.1:$broker"
        --database-url "$PG/$DB" --model "$MODEL")
    for ex in ex0 ex1; do
        local p; p="$(free_port)"
        "$STOKER" executor "${dist[@]}" --id "$name-$ex" --listen "127.0.0.1:$p" \
            --data-dir "$DATA/$name-$ex" >"$DATA/$name-$ex.log" 2>&1 &
        PIDS+=($!)
        wait_up "http://127.0.0.1:$p/health/ready" "${PIDS[-1]}"
    done
    "$STOKER" api "${dist[@]}" --id "$name-api" --listen "127.0.0.1:$port" \
        --data-dir "$DATA/$name-api" >"$DATA/$name.log" 2>&1 &
    PIDS+=($!)
    wait_up "http://127.0.0.1:$port/health/ready" "${PIDS[-1]}"
    for _ in $(seq 1 300); do
        live="$(curl -fsS -H "Authorization: Bearer $ADMIN_KEY" \
            "http://127.0.0.1:$port/admin/v1/executors" 2>/dev/null | python3 -c \
            'import json,sys; print(sum(1 for e in json.load(sys.stdin)["data"] if (e.get("live") or {}).get("ready")))' \
            2>/dev/null || echo 0)"
        [ "$live" = 2 ] && return 0
        sleep 0.5
    done
    echo "the API does not see two ready executors; see $DATA/$name*.log" >&2
    return 1
}

# Fresh random keys for this run; the scenarios read them from these variables.
STOKER_KEY_A="sk-scenario-a-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
STOKER_KEY_B="sk-scenario-b-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
ADMIN_KEY="sk-scenario-admin-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
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

[[api_keys]]
name = "scenario-admin"
key = "$ADMIN_KEY"
tenant = "operator"
scopes = ["admin"]
EOF

failed=()
for f in "${files[@]}"; do
    name="$(basename "$f" .toml)"
    saved="$name" plots="$OUT"
    if [ "$MODE" = distributed ]; then
        saved="$name-distributed" plots="$OUT/distributed"
        mkdir -p "$plots"
    fi
    port="$(free_port)"
    # A fresh server (and state directory) per scenario: nothing queued,
    # cached or measured by the previous one carries over.
    start_server "$name" "$port"
    echo "== $saved"
    rc=0
    "$STOKER" bench scenario "$f" --url "http://127.0.0.1:$port" \
        --duration-scale "$SCALE" --save "$OUT/$saved.json" --plot-dir "$plots" || rc=$?
    stop_server
    if grep -q "panicked" "$DATA/$name"*.log; then
        echo "a server panicked during $saved; see its log:" >&2
        grep -m3 "panicked" "$DATA/$name"*.log >&2
        rc=1
    fi
    case "$rc" in
        0) ;;
        1) failed+=("$saved") ;;
        *) echo "$name: a bad scenario file (exit $rc)" >&2; exit "$rc" ;;
    esac
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "SLOs failed in: ${failed[*]}" >&2
    exit 1
fi
echo "every scenario's SLOs held"
