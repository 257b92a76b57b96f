"""Shared helpers for the end-to-end scripts run by tests/tests/e2e (Rust harness).

The harness passes STOKER_BASE_URL (the SDK's base_url, ending in /v1),
STOKER_ROOT_URL (the server root, for /metrics) and STOKER_MODEL_PATH in the
environment. Any failed check exits non-zero with a clear message on stderr.
"""

import hashlib
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


# The files of a Hugging Face directory that are part of the model (what
# stoker hashes into a directory's revision id).
_MODEL_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.jinja",
    "model.safetensors.index.json",
)


def _sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def artifact_sha256(path):
    """A GGUF file's sha256, or a model directory's: the sha256 of what
    `sha256sum` prints for its model files in name order."""
    if not os.path.isdir(path):
        return _sha256_file(path)
    names = sorted(
        n
        for n in os.listdir(path)
        if n in _MODEL_FILES or n.endswith(".safetensors")
    )
    listing = "".join(f"{_sha256_file(os.path.join(path, n))}  {n}\n" for n in names)
    return hashlib.sha256(listing.encode()).hexdigest()


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
