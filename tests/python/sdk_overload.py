"""Overload against a server with one running slot and a one-request queue
(engine.max_num_seqs=1, admission.max_waiting_requests=1, admission.max_ttft_ms=0).

1. Two long streams fill the slot and the queue; a third request from a client with
   max_retries=0 must fail with a 503 APIStatusError (code server_overloaded) that
   carries Retry-After and retry-after-ms.
2. Six concurrent requests from a client with max_retries=8 must all succeed, the SDK
   retrying the 503s it gets; the number of 503s it saw is printed as
   `retried_503=N` for the Rust side to compare with /metrics.
"""

import re
import threading
import time

import httpx2
import openai

from e2e_common import check, client, env, fail, model_id, step

ROOT = env("STOKER_ROOT_URL")
LONG_TOKENS = 256
LONG = [
    {
        "role": "user",
        "content": "Write a long, detailed story about a lighthouse keeper during a storm. "
        "Describe the sea, the light, the ship and the people in great detail.",
    }
]
SHORT = [{"role": "user", "content": "Name a fruit."}]

plain = client(max_retries=0)
MODEL = model_id(plain)


def waiting_requests():
    """The server's waiting-queue gauge, or None when it has no such metric."""
    try:
        text = httpx2.get(f"{ROOT}/metrics", timeout=10).text
    except Exception:  # noqa: BLE001 - only a hint for timing
        return None
    # One series per lane: add them up.
    values = re.findall(r"^stoker_num_requests_waiting(?:\{[^}]*\})? ([0-9.eE+-]+)$", text, re.M)
    return sum(float(v) for v in values) if values else None


class LongStream(threading.Thread):
    def __init__(self, name):
        super().__init__(name=name, daemon=True)
        self.first_token = threading.Event()
        self.finished = threading.Event()
        self.tokens = 0
        self.finish_reason = None
        self.error = None

    def run(self):
        try:
            stream = plain.chat.completions.create(
                model=MODEL,
                messages=LONG,
                max_tokens=LONG_TOKENS,
                temperature=0,
                stream=True,
                # The slot must stay held: a model that ends at EOS early would
                # free it and make phase 1's 503 a matter of timing.
                extra_body={"ignore_eos": True},
            )
            for chunk in stream:
                for ch in chunk.choices:
                    if ch.delta.content:
                        self.tokens += 1
                        self.first_token.set()
                    if ch.finish_reason:
                        self.finish_reason = ch.finish_reason
        except Exception as e:  # noqa: BLE001 - reported below
            self.error = e
        finally:
            self.first_token.set()
            self.finished.set()


# --- phase 1: a deterministic 503 for a client that does not retry ------------------
step("phase 1: hold the running slot with stream A")
a = LongStream("A")
a.start()
check(a.first_token.wait(180), "stream A produced no token within 180 s")
check(a.error is None, f"stream A failed: {a.error!r}")
check(not a.finished.is_set(), f"stream A already finished after {a.tokens} tokens")

step("phase 1: fill the queue with stream B")
b = LongStream("B")
b.start()
deadline = time.monotonic() + 10
waiting = waiting_requests()
while waiting is not None and waiting < 1 and time.monotonic() < deadline:
    time.sleep(0.05)
    waiting = waiting_requests()
if waiting is None:
    time.sleep(1.0)  # no waiting gauge: give B time to reach the queue
step(f"phase 1: waiting gauge = {waiting}; A has {a.tokens} tokens")
check(b.error is None, f"stream B failed: {b.error!r}")

step("phase 1: request C with max_retries=0 must get 503")
try:
    resp = plain.chat.completions.create(model=MODEL, messages=SHORT, max_tokens=4, temperature=0)
    fail(
        "request C succeeded though the slot and queue should be full "
        f"(A finished={a.finished.is_set()} tokens={a.tokens}, B finished={b.finished.is_set()}): {resp}"
    )
except openai.APIStatusError as e:
    # The refusal is only the deterministic one if A still held the slot and B
    # still sat in the queue when it came.
    held = (not a.finished.is_set(), not b.finished.is_set())
    check(held == (True, True), f"A and B running when C was refused: {held} (A {a.tokens} tokens)")
    check(
        e.status_code == 503,
        f"request C: want 503, got {e.status_code} {type(e).__name__}: {e.body}",
    )
    check(e.code == "server_overloaded", f"request C: code {e.code!r}, body {e.body}")
    retry_after = e.response.headers.get("retry-after")
    retry_after_ms = e.response.headers.get("retry-after-ms")
    step(f"  503 server_overloaded, retry-after={retry_after!r} retry-after-ms={retry_after_ms!r}")
    check(retry_after is not None, "503 without a retry-after header")
    check(retry_after.strip().isdigit(), f"retry-after is not whole seconds: {retry_after!r}")
    check(retry_after_ms is not None, "503 without a retry-after-ms header")
    try:
        check(float(retry_after_ms) >= 0, f"retry-after-ms negative: {retry_after_ms!r}")
    except ValueError:
        fail(f"retry-after-ms is not a number: {retry_after_ms!r}")

step("phase 1: streams A and B must complete")
for s in (a, b):
    s.join(300)
    check(not s.is_alive(), f"stream {s.name} still running after 300 s")
    check(s.error is None, f"stream {s.name} failed: {s.error!r}")
    check(s.tokens > 0, f"stream {s.name} produced no content")
    check(s.finish_reason == "length", f"stream {s.name} ended {s.finish_reason!r}, not at max_tokens")
    step(f"  {s.name}: {s.tokens} content chunks, finish_reason={s.finish_reason}")

# --- phase 2: the SDK retries 503s until all requests succeed -----------------------
N = 6
lock = threading.Lock()
seen = {"503": 0, "responses": 0}


def count(response):
    with lock:
        seen["responses"] += 1
        if response.status_code == 503:
            seen["503"] += 1


retrying = client(
    max_retries=8,
    http_client=openai.DefaultHttpxClient(event_hooks={"response": [count]}),
)
barrier = threading.Barrier(N)
results = [None] * N


def worker(i):
    barrier.wait()
    try:
        r = retrying.chat.completions.create(model=MODEL, messages=SHORT, max_tokens=16, temperature=0)
        results[i] = r
    except Exception as e:  # noqa: BLE001 - reported below
        results[i] = e


step(f"phase 2: {N} concurrent requests with max_retries=8")
threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join(400)
    check(not t.is_alive(), "a phase-2 request did not finish within 400 s")
for i, r in enumerate(results):
    if isinstance(r, Exception):
        fail(f"phase 2 request {i} failed after retries: {type(r).__name__}: {r}")
    check(r.choices and r.choices[0].message.content, f"phase 2 request {i}: empty reply {r}")
step(f"phase 2: all {N} succeeded; {seen['responses']} responses, {seen['503']} of them 503")
check(seen["503"] >= 1, "no request was ever rejected, so the SDK retried nothing")

print(f"retried_503={seen['503']}")
print("OK sdk_overload")
