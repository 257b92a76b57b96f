#!/usr/bin/env bash
# Sets up what the tests need and runs the whole suite on the single optimized
# profile (tests and benchmarks share it, so the dependency tree compiles once).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

"$ROOT/scripts/fetch-model.sh"
"$ROOT/scripts/fetch-llama-cpp-data.sh"
"$ROOT/scripts/fetch-broker.sh"
"$ROOT/scripts/setup-venv.sh"
"$ROOT/scripts/make-arch-parity-sources.sh"
"$ROOT/scripts/make-hf-smollm2.sh"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --release --workspace --all-targets --locked -- -D warnings
# The stoker binary the end-to-end tests start, built in one invocation with
# the test binaries: features are then unified over the test-only
# dependencies too (tokio's test-util, for one), so `cargo test` below reuses
# every artifact instead of compiling tokio and all above it a second time.
echo "== cargo build (the stoker binary the end-to-end tests start, and the tests)"
cargo build --release --locked --workspace --bins --tests
echo "== cargo test"
cargo test --release --workspace --locked --no-fail-fast -- --test-threads="${STOKER_TEST_THREADS:-1}"
