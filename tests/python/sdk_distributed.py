"""Streaming chat through `stoker api` with two executors behind Kafka.

Runs STREAMS concurrent streaming chats (and one non-streaming one) with the
official SDK; each must stream content, end with a finish_reason, and report
usage; the revision named in system_fingerprint must be the same everywhere.
Prints `streams=N` for the Rust side.
"""

import os
import threading

from e2e_common import check, client, fail, model_id, step

STREAMS = int(os.environ.get("STREAMS", "12"))
c = client(api_key=os.environ.get("STOKER_API_KEY", "sk-e2e-unused"))
MODEL = model_id(c)
results = [None] * STREAMS


def one(i):
    try:
        text, finish, usage, fps = [], None, None, set()
        stream = c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"Tell me fact number {i} about the sea."}],
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            fps.add(chunk.system_fingerprint)
            if chunk.usage is not None:
                usage = chunk.usage
            for ch in chunk.choices:
                if ch.delta.content:
                    text.append(ch.delta.content)
                if ch.finish_reason:
                    finish = ch.finish_reason
        results[i] = ("".join(text), finish, usage, fps)
    except Exception as e:  # noqa: BLE001 - reported below
        results[i] = e


threads = [threading.Thread(target=one, args=(i,)) for i in range(STREAMS)]
for t in threads:
    t.start()
for t in threads:
    t.join()

fingerprints = set()
for i, r in enumerate(results):
    if isinstance(r, Exception):
        fail(f"stream {i} failed: {type(r).__name__}: {r}")
    text, finish, usage, fps = r
    check(text.strip() != "", f"stream {i} produced no text")
    check(finish in ("stop", "length"), f"stream {i} finish_reason {finish!r}")
    check(usage is not None and usage.completion_tokens >= 1, f"stream {i} usage {usage}")
    fingerprints |= fps
check(len(fingerprints) == 1, f"one revision answers everything: {fingerprints}")
step(f"{STREAMS} streams ok, fingerprint {fingerprints}")

r = c.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "Say hi."}], max_tokens=8, temperature=0
)
check(r.choices[0].message.content, f"non-streaming answer empty: {r}")
check(r.usage.completion_tokens >= 1, f"usage {r.usage}")
print(f"streams={STREAMS}")
