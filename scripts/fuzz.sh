#!/usr/bin/env bash
# Explores the property tests with fresh seeds for MINUTES (default 30):
#   the HTTP fuzzer over every route of schemas/openapi.json (a real server),
#   the GGUF header fuzzer (every architecture's fixture), and
#   the batch JSONL parser.
# CI runs the same tests from a fixed seed (tests/support/src/property.rs);
# this script is where new failures are found. Each failure proptest finds is
# appended, as a seed line, to the suite's committed regression file
# (proptest-regressions/ beside it), which every later run replays first;
# the script prints those new lines, ready to commit, and exits 1.
#
#   scripts/fuzz.sh [MINUTES [TARGET...]]   e.g. scripts/fuzz.sh 30, or
#   scripts/fuzz.sh 10 http                  (targets: http, gguf, jsonl)
#   STOKER_PROPTEST_CASES=N          cases per round (default 2000)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
MINUTES="${1:-30}"
CASES="${STOKER_PROPTEST_CASES:-2000}"
[[ "$MINUTES" =~ ^[0-9]+$ ]] || { echo "usage: scripts/fuzz.sh [MINUTES [TARGET...]]" >&2; exit 2; }
shift $(( $# > 0 ? 1 : 0 ))
ONLY=("$@")

"$ROOT/scripts/fetch-model.sh"
REGRESSIONS=(
    api/tests/http/proptest-regressions/fuzz.txt
    executor/tests/engine_suite/proptest-regressions/gguf_fuzz.txt
    controlplane/src/batch/proptest-regressions/input.txt
)
# name | test filter. Each runs as `cargo test --workspace FILTER`, the same
# selection as scripts/test.sh, so the build it reuses is the suite's (a `-p`
# selection resolves features differently and rebuilds the dependency tree).
TARGETS=(
    "http|fuzz::every_route_answers_hostile_input_as_documented"
    "gguf|engine_suite::gguf_fuzz::"
    "jsonl|batch::input::tests::properties::"
)
echo "== building the suite"
cargo test --release --workspace --locked --no-run

before="$(mktemp -d)"
trap 'rm -rf "$before"' EXIT
for i in "${!REGRESSIONS[@]}"; do cp "${REGRESSIONS[$i]}" "$before/$i"; done

end=$(( $(date +%s) + MINUTES * 60 ))
round=0
failed=0
declare -A cases_run=()
while (( $(date +%s) < end )); do
    round=$((round + 1))
    for t in "${TARGETS[@]}"; do
        (( $(date +%s) < end )) || break
        name="${t%%|*}"
        filter="${t#*|}"
        if (( ${#ONLY[@]} > 0 )) && [[ " ${ONLY[*]} " != *" $name "* ]]; then continue; fi
        log="$(mktemp)"
        if STOKER_PROPTEST_SEED=random STOKER_PROPTEST_CASES="$CASES" \
            cargo test --release --workspace --tests --locked "$filter" -- --test-threads=1 >"$log" 2>&1; then
            cases_run[$name]=$(( ${cases_run[$name]:-0} + CASES ))
            echo "round $round: $name passed $CASES cases"
        else
            failed=$((failed + 1))
            echo "round $round: $name FAILED; the test's output:"
            # An abort (a failed allocation, a stack overflow) kills the test
            # before proptest can persist its seed: its message is all there is.
            grep -E "minimal failing input|Test failed|panicked|FAILED|memory allocation|overflow|signal" "$log" | head -20 || true
        fi
        rm -f "$log"
    done
done

echo "== done after $round rounds"
for name in "${!cases_run[@]}"; do echo "$name: ${cases_run[$name]} passing cases"; done
new=0
for i in "${!REGRESSIONS[@]}"; do
    f="${REGRESSIONS[$i]}"
    if ! cmp -s "$before/$i" "$f"; then
        new=1
        echo "== new regression cases in $f (commit them):"
        diff "$before/$i" "$f" | sed -n 's/^> //p'
    fi
done
if (( failed > 0 || new > 0 )); then
    echo "fuzz: $failed failing rounds"
    exit 1
fi
echo "fuzz: no failure"
