"""Shared helpers for the end-to-end scripts run by tests/tests/e2e (Rust harness).

The harness passes STOKER_BASE_URL (the SDK's base_url, ending in /v1),
STOKER_ROOT_URL (the server root, for /metrics) and STOKER_MODEL_PATH in the
environment. Any failed check exits non-zero with a clear message on stderr.
"""

import os
import sys
import time

import openai

_T0 = time.monotonic()


def env(name):
    value = os.environ.get(name)
    if not value:
        fail(f"environment variable {name} is not set (the Rust harness sets it)")
    return value


def step(message):
    print(f"[{time.monotonic() - _T0:7.2f}s] {message}", flush=True)


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def client(api_key="sk-e2e-unused", max_retries=0, **kwargs):
    """An OpenAI SDK client for the server under test."""
    return openai.OpenAI(
        base_url=env("STOKER_BASE_URL"),
        api_key=api_key,
        max_retries=max_retries,
        timeout=kwargs.pop("timeout", 180.0),
        **kwargs,
    )


def model_id(c):
    models = c.models.list()
    check(len(models.data) >= 1, f"models.list() returned no models: {models}")
    return models.data[0].id
