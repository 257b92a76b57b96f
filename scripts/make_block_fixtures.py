#!/usr/bin/env python3
"""Make executor/tests/fixtures/ggml_blocks.json: ggml blocks of every format stoker
reads (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, BF16) with their
values as dequantized by the `gguf` Python package, llama.cpp's own numpy reference
(gguf-py, independent of our Rust decoding).

The blocks are random bytes from a fixed seed, with every f16 scale field replaced by
a finite value of a realistic size (random scale bytes are often NaN or huge), so
the fixture exercises every bit of every quant field. The Rust test
`executor/tests/kernels.rs` decodes the same bytes and compares.

Setup (once; nothing else is fetched):

    python3 -m venv .tools/kq-venv && .tools/kq-venv/bin/pip install gguf==0.19.0 numpy
    .tools/kq-venv/bin/python scripts/make_block_fixtures.py
"""
import json
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

# type -> (values per block, bytes per block, byte offsets of f16 scale fields)
FORMATS = {
    "Q4_0": (T.Q4_0, 32, 18, [0]),
    "Q4_1": (T.Q4_1, 32, 20, [0, 2]),
    "Q5_0": (T.Q5_0, 32, 22, [0]),
    "Q5_1": (T.Q5_1, 32, 24, [0, 2]),
    "Q8_0": (T.Q8_0, 32, 34, [0]),
    "Q2_K": (T.Q2_K, 256, 84, [80, 82]),
    "Q3_K": (T.Q3_K, 256, 110, [108]),
    "Q4_K": (T.Q4_K, 256, 144, [0, 2]),
    "Q5_K": (T.Q5_K, 256, 176, [0, 2]),
    "Q6_K": (T.Q6_K, 256, 210, [208]),
}
VALUES = 1024


def main():
    rng = np.random.default_rng(20261201)
    out = {"generator": "gguf-py 0.19.0 gguf.quants.dequantize", "formats": {}}
    for name, (qtype, bv, bb, scale_at) in FORMATS.items():
        nblocks = VALUES // bv
        raw = rng.integers(0, 256, size=(nblocks, bb), dtype=np.uint8)
        for off in scale_at:
            scale = rng.uniform(1e-3, 5e-2, size=nblocks).astype(np.float16)
            raw[:, off:off + 2] = scale.view(np.uint8).reshape(nblocks, 2)
        if name in ("Q4_1", "Q5_1"):
            # the min may be negative
            m = rng.uniform(-0.5, 0.5, size=nblocks).astype(np.float16)
            raw[:, 2:4] = m.view(np.uint8).reshape(nblocks, 2)
        values = dequantize(raw.reshape(-1), qtype).astype(np.float32).reshape(-1)
        assert values.shape == (VALUES,), values.shape
        out["formats"][name] = {
            "bytes": raw.reshape(-1).tobytes().hex(),
            "values": [float(v) for v in values],
        }
    # BF16: random finite values, rounded to bf16 by gguf's own converter.
    x = rng.normal(0, 1, size=VALUES).astype(np.float32)
    b = quantize(x, T.BF16)
    out["formats"]["BF16"] = {
        "bytes": b.tobytes().hex(),
        "values": [float(v) for v in dequantize(b, T.BF16).reshape(-1)],
    }
    path = os.path.join(os.path.dirname(__file__), "..", "executor", "tests", "fixtures", "ggml_blocks.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.relpath(path), {k: len(v["values"]) for k, v in out["formats"].items()})


if __name__ == "__main__":
    main()
