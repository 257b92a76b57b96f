#!/usr/bin/env python3
"""Make executor/tests/fixtures/quantize_vectors.json: f32 rows and the bytes the `gguf`
Python package (gguf-py, llama.cpp's numpy reimplementation, independent of our Rust)
quantizes them to, for every type gguf-py 0.19.0 can quantize and stoker writes: Q4_0,
Q4_1, Q5_0, Q5_1, Q8_0, BF16 and F16 (gguf-py has no K-quant quantizers; those are
checked against llama-quantize output instead).

The rows (fixed seed) cover what moves a quantizer's decisions: normal values at
several scales, rows with outliers, all zeros, tiny values whose scale underflows f16,
all-equal values (positive and negative), exact ties of the rounding (half-integers
times a power of two) and values of mixed sign around zero. BF16 also gets NaNs,
infinities and subnormals (gguf-py follows ggml's NaN rule there); the block formats
get finite values only, since numpy's float-to-uint8 casts of NaN are not C's.

Inputs are stored as f32 bit patterns (hex, little-endian), outputs as hex bytes. The
Rust test `executor/tests/quantize.rs` quantizes the same rows and compares.

Setup (once; nothing else is fetched):

    python3 -m venv .tools/quant-venv && .tools/quant-venv/bin/pip install gguf==0.19.0 numpy
    .tools/quant-venv/bin/python scripts/make_quantize_fixtures.py
"""
import json
import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

TYPES = {
    "Q4_0": T.Q4_0,
    "Q4_1": T.Q4_1,
    "Q5_0": T.Q5_0,
    "Q5_1": T.Q5_1,
    "Q8_0": T.Q8_0,
    "BF16": T.BF16,
    "F16": T.F16,
}
N = 256  # values per row: 8 legacy blocks


def rows(rng):
    """(name, f32 row of N values) pairs, all finite."""
    out = []
    for scale in (1.0, 0.02, 300.0):
        out.append((f"normal_{scale}", rng.normal(0, scale, N)))
    x = rng.normal(0, 0.05, N)
    hits = rng.choice(N, 12, replace=False)
    x[hits] = rng.normal(0, 4.0, 12)
    out.append(("outliers", x))
    # per-block scales from 1e-4 to 1e3, alternating sign of the extreme
    x = rng.normal(0, 1, N) * np.repeat(10.0 ** rng.uniform(-4, 3, N // 32), 32)
    out.append(("block_scales", x))
    out.append(("zeros", np.zeros(N)))
    out.append(("tiny", rng.normal(0, 1e-7, N)))
    out.append(("subnormal_scale", rng.normal(0, 3e-6, N)))
    out.append(("all_equal_pos", np.full(N, 0.7)))
    out.append(("all_equal_neg", np.full(N, -2.5)))
    # zeros with one nonzero per block, and a block of zeros among normal ones
    x = np.zeros(N)
    x[::32] = rng.normal(0, 1, N // 32)
    out.append(("sparse", x))
    x = rng.normal(0, 1, N)
    x[64:96] = 0.0
    out.append(("zero_block", x))
    # grid values: many exact rounding ties after scaling
    out.append(("grid", rng.integers(-16, 17, N) * 0.125))
    out.append(("positive", np.abs(rng.normal(0, 1, N)) + 0.1))
    out.append(("negative", -np.abs(rng.normal(0, 1, N)) - 0.1))
    out.append(("large", rng.normal(0, 6e4, N)))
    return [(name, np.asarray(x, dtype=np.float32)) for name, x in out]


def special_rows(rng):
    """Rows with non-finite and subnormal values, for the float types."""
    x = rng.normal(0, 1, N).astype(np.float32)
    bits = x.view(np.uint32)
    specials = np.array(
        [0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF,
         0xFF812345, 0x00000001, 0x807FFFFF, 0x00400000, 0x7F7FFFFF, 0xFF7FFFFF,
         0x3F808000, 0x3F818000, 0x477FF000, 0x477FF001, 0x33000000, 0x33000001],
        dtype=np.uint32,
    )
    bits[: len(specials)] = specials
    return [("specials", bits.view(np.float32))]


def main():
    rng = np.random.default_rng(20261202)
    finite = rows(rng)
    special = special_rows(rng)
    out = {"generator": "gguf-py 0.19.0 gguf.quants.quantize", "values_per_row": N, "cases": []}
    for tname, qtype in TYPES.items():
        cases = finite + (special if tname == "BF16" else [])
        if tname == "F16":
            # numpy's f16 rounding equals ggml's except for NaN payloads: keep infs, drop NaNs
            x = special[0][1].copy()
            x[np.isnan(x)] = 1.0
            cases = finite + [("specials_no_nan", x)]
        for name, x in cases:
            with np.errstate(all="ignore"):
                q = quantize(x.reshape(1, N), qtype)
            out["cases"].append({
                "type": tname,
                "name": name,
                "input": x.astype("<f4").tobytes().hex(),
                "expected": np.asarray(q).reshape(-1).view(np.uint8).tobytes().hex(),
            })
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "executor", "tests", "fixtures", "quantize_vectors.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {len(out['cases'])} cases to {os.path.relpath(path, root)}")


if __name__ == "__main__":
    main()
