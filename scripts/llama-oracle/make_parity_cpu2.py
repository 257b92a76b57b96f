#!/usr/bin/env python3
"""llama.cpp's teacher-forced scores of the parity files on a second CPU.

The first set of parity fixtures (executor/tests/fixtures/parity/<TYPE>.json,
scripts/make_parity_fixtures.sh) is what one llama.cpp build said on one
machine. With activations quantized to 8 bits before every integer dot
product, two correct implementations that sum floats in different orders do
not agree bit for bit: a rounding that lands on the other side of a
quantization step moves a whole step, and the difference spreads through the
layers. How far apart two llama.cpp builds of the same source land on two
CPUs is the natural yardstick for how close stoker must be. This script
scores every file of the parity manifest again with the llama.cpp built here
and writes executor/tests/fixtures/parity/cpu2/<TYPE>.json: the CPU's
relevant flags, the oracle's settings, the tokens and the top-64
distribution per position (the same format as the first set, without the
greedy part).

Usage (after scripts/build-llama-cpp.sh and scripts/make_parity_fixtures.sh,
or with the quantized files in models/quant/):
    .tools/oracle-venv/bin/python scripts/llama-oracle/make_parity_cpu2.py
The oracle runs with ORACLE_EXTRA_BUFTS=0 (ggml's portable kernels, no
repacked AMX or CPU_REPACK layouts: on the machine these were made on the AMX
path crashed in llama.cpp). Deterministic: re-running on the same CPU
reproduces the files byte for byte.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ORACLE = ROOT / ".tools/llama-oracle/llama-oracle"
FIX = ROOT / "executor/tests/fixtures/parity"
FLAGS = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "amx_int8"]


def cpu() -> dict:
    info = Path("/proc/cpuinfo").read_text()
    have = set()
    model = ""
    for line in info.splitlines():
        if line.startswith("flags") and not have:
            have = set(line.split(":", 1)[1].split())
        if line.startswith("model name") and not model:
            model = line.split(":", 1)[1].strip()
    return {"model_name": model, "flags": [f for f in FLAGS if f in have]}


def main() -> None:
    if not ORACLE.exists():
        sys.exit(f"missing {ORACLE}: run scripts/build-llama-cpp.sh")
    manifest = json.loads((FIX / "manifest.json").read_text())
    out = FIX / "cpu2"
    out.mkdir(exist_ok=True)
    env = dict(os.environ, ORACLE_EXTRA_BUFTS="0")
    machine = cpu()
    for ty, entry in manifest["files"].items():
        path = ROOT / "models" / entry["file"]
        if not path.exists():
            sys.exit(f"missing {path}: run scripts/make_parity_fixtures.sh (SKIP_BENCH=1)")
        print(f"  {ty}", file=sys.stderr)
        res = subprocess.run(
            [str(ORACLE), "score", "--model", str(path), "--text-file", str(FIX / "text.txt"),
             "--threads", "2"],
            check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
        )
        scored = json.loads(res.stdout)
        first = json.loads((FIX / f"{ty}.json").read_text())
        if scored["tokens"] != first["tokens"]:
            sys.exit(f"{ty}: the tokens differ from the first set")
        doc = {
            "llama_cpp": manifest["llama_cpp"],
            "file": entry["file"],
            "cpu": machine,
            "settings": scored["settings"],
            "tokens": scored["tokens"],
            "positions": scored["positions"],
        }
        (out / f"{ty}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
