#!/usr/bin/env bash
# Fetches the default model, builds stoker, and runs `stoker serve` with any
# arguments given here.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
"$ROOT/scripts/fetch-model.sh"
cargo build --release --locked -p stoker --bin stoker
exec "$ROOT/target/release/stoker" serve "$@"
