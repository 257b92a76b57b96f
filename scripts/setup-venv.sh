#!/usr/bin/env bash
# Creates the Python virtual environment the end-to-end tests use (.venv at the repo
# root) with the official OpenAI Python SDK pinned, moto's S3 server (the object
# storage the S3 test runs against), and gguf, numpy and safetensors (pinned: the
# per-architecture parity sources and the Hugging Face test directories are
# written with them, bit for bit). A no-op when the marker file already
# records the pinned versions.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PIN="openai==3.51.0 moto[server]==5.2.5 gguf==0.19.0 numpy==2.4.6 safetensors==0.8.0"
MARKER="$VENV/.stoker-deps"

if [[ -x "$VENV/bin/python" && -f "$MARKER" && "$(cat "$MARKER")" == "$PIN" ]]; then
    echo "venv already set up: .venv ($PIN)"
    exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
fi
# shellcheck disable=SC2086
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check $PIN
"$VENV/bin/python" -c 'import openai, sys; print("openai", openai.__version__, file=sys.stderr)'
echo "$PIN" > "$MARKER"
echo "set up .venv ($PIN)"
