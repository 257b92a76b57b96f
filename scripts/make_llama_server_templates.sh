#!/usr/bin/env bash
# llama.cpp's ground truth for chat-template rendering: renders every real
# template in models/llama.cpp/templates/*.jinja (scripts/fetch-llama-cpp-data.sh)
# with llama-server's POST /apply-template (one llama-server per template, on
# 127.0.0.1 and a free port, with SmolLM2-135M, whose tokens fill
# bos_token/eos_token), for a fixed system/user/assistant/user conversation with
# add_generation_prompt. Makes executor/tests/fixtures/llama_server_templates.json
# (template file name -> {"prompt": ...} or {"error": ...}), and
# executor/tests/fixtures/llama_server_tool_templates.json: the tool-use
# families with tools, an assistant's call and the tool's answer. Needs
# scripts/build-llama-cpp.sh, and faketime (libfaketime; installed with apt-get
# when missing): templates that print today's date see 2025-01-15, so re-running
# reproduces the file. Takes 2-4 minutes. Never run in CI.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SERVER="$ROOT/.tools/llama.cpp/build/bin/llama-server"
MODEL="$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATES="$ROOT/models/llama.cpp/templates"

[[ -x "$SERVER" ]] || { echo "missing $SERVER: run scripts/build-llama-cpp.sh" >&2; exit 1; }
[[ -f "$MODEL" ]] || { echo "missing $MODEL: run scripts/fetch-model.sh" >&2; exit 1; }
[[ -d "$TEMPLATES" ]] || { echo "missing $TEMPLATES: run scripts/fetch-llama-cpp-data.sh" >&2; exit 1; }

if ! command -v faketime >/dev/null; then
    apt-get install -y faketime >/dev/null || { apt-get update -qq && apt-get install -y faketime >/dev/null; }
fi

python3 "$ROOT/scripts/llama-oracle/server_templates.py" \
    "$SERVER" "$MODEL" "$TEMPLATES" "$ROOT/executor/tests/fixtures/llama_server_templates.json"
python3 "$ROOT/scripts/llama-oracle/server_templates.py" \
    "$SERVER" "$MODEL" "$TEMPLATES" "$ROOT/executor/tests/fixtures/llama_server_tool_templates.json" --tools
