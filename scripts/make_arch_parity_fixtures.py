#!/usr/bin/env python3
"""The per-architecture llama.cpp parity fixtures of executor/tests/fixtures/arch_parity/.

Run by scripts/make_arch_parity_fixtures.sh (see there), in .tools/arch-venv
(PyPI gguf==0.19.0 and numpy). Two steps:

  sources  writes one small random-weight F32 GGUF per architecture,
           <arch>.F32.gguf, and text.txt, the text every file is scored on.
           Deterministic (fixed seeds): re-running writes the same bytes.
  oracle ORACLE QUANT_DIR
           after llama-quantize made QUANT_DIR/<arch>.<TYPE>.gguf from each
           source: writes manifest.json (per architecture the source's sha256,
           the KLD baseline KL(F16 || Q4_K_M) from `llama-oracle kld`, and per
           type every tensor's name, ggml type, shape and sha256 of its data
           bytes) and <arch>.<TYPE>.json (`llama-oracle score` on text.txt:
           the tokens and llama.cpp's top-64 log-probabilities at every
           SCORE_STRIDE-th position).

The models reuse scripts/make_arch_fixtures.py's `Fixture` and `decoder` (the
same tensor and metadata names, the same byte-level GPT-2 vocabulary of 257
tokens), at dimensions every K-quant accepts: every matrix row (the input
dimension: hidden, heads x head_dim, ffn) is a multiple of 256, so
llama-quantize never falls back to another type. Hidden 256, head_dim 64,
ffn 512, 2 layers, context 512.

Weight scales. Matrices keep make_arch_fixtures' 1/sqrt(fan_in); the rest is
chosen so that the predictions are neither flat nor trivial, which would make
any error invisible: the embedding and output rows have std EMBD = OUTPUT =
0.2 (logits spread by ~3 nats), the output norm is zero-mean (with a tied
output, norm(h) . E[t] would otherwise be |E[t]|^2-large for the current token
t, whose embedding is in h, and the model would only predict its input) and
Gemma's post-norms are ~POST_NORM = 2 (so that the sublayers compete with the
sqrt(hidden)-scaled embedding). Measured (printed by `oracle`, kept in the
manifest): llama.cpp's F16 top-1 probability averages 0.27-0.44 (uniform:
0.004) and KL(F16 || Q4_K_M) is 0.043-0.275 nats (SmolLM2-135M's: 0.047).
"""

import json
import math
import os
import sys
from pathlib import Path

import gguf

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
sys.path.insert(0, str(SCRIPTS / "llama-oracle"))

import make_arch_fixtures as maf  # noqa: E402

ROOT = SCRIPTS.parent
OUT = ROOT / "executor" / "tests" / "fixtures" / "arch_parity"
# The F32 sources (36 MB) are not committed: scripts/make-arch-parity-sources.sh
# writes them here, bit for bit (pinned gguf and numpy; the manifest holds their
# sha256, which the test checks).
SRC = ROOT / "models" / "arch_parity" / "sources"

HIDDEN = 256
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
FFN = 512
LAYERS = 2
CONTEXT = 512
NAME = "stoker-arch-parity"
# Every SCORE_STRIDE-th position (2, 5, 8, ...) goes into the fixtures: a third
# the size; the test still runs every token through the model.
SCORE_STRIDE = 3
TOP_K = 64
TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K", "F16", "BF16"]

# The scored text: English prose, a little code and numbers: 331 byte-level
# tokens (the vocabulary has one merge, "Ġ t").
TEXT = (
    "The old lighthouse keeper climbed the spiral stairs every evening at dusk. "
    "He trimmed the wick, wound the clockwork and watched the beam sweep across "
    "the grey water, counting ships: 3 trawlers, 1 ferry, 12 gulls.\n"
    "def keep(light):\n"
    "    while light.on:\n"
    "        light.turn(0.25)\n"
    "In the morning the tide went out and the keeper wrote it all down.\n"
)

# Standard deviations (see the module doc).
EMBD = 0.2
OUTPUT = 0.2
POST_NORM = 2.0


class ParityFixture(maf.Fixture):
    """make_arch_fixtures' Fixture at K-quant-friendly dimensions, with the scales above."""

    def __init__(self, arch_key, arch, seed, heads=HEADS, kv_heads=KV_HEADS):
        super().__init__(f"{arch_key}.F32.gguf", arch, seed, hidden=HIDDEN, heads=heads,
                         kv_heads=kv_heads, ffn=FFN, out=str(SRC), context=CONTEXT)
        # A neutral name: llama.cpp's vocabulary loader special-cases names
        # that contain a family's ("phi3" wants Phi-3's special tokens).
        self.w.kv_data[0]["general.name"] = gguf.GGUFValue(value=NAME, type=gguf.GGUFValueType.STRING)
        # No BOS: the tokens are the text's bytes, under both tokenizers.
        self.w.add_add_bos_token(False)

    def matrix(self, name, rows, cols, qtype=None, scale=None):
        role = name.split(".")[-2]
        s = {"token_embd": EMBD, "output": OUTPUT}.get(role)
        super().matrix(name, rows, cols, qtype, scale=s)

    def norm(self, name, n):
        role = name.split(".")[-2]
        if role == "output_norm":
            self.vector(name, n, mean=0.0, scale=1.0)
        elif role in ("post_attention_norm", "post_ffw_norm"):
            self.vector(name, n, mean=POST_NORM, scale=0.1 * POST_NORM)
        else:
            super().norm(name, n)


def sources():
    SRC.mkdir(parents=True, exist_ok=True)

    # Llama: interleaved rope, untied output.
    f = ParityFixture("llama", "llama", 101)
    f.common(LAYERS, rope_dim=HEAD_DIM, base=10000.0)
    maf.decoder(f, LAYERS, HEAD_DIM, tied=False)
    f.write()

    # Llama 3: rope_freqs (llama3 rope scaling; with these constants the 32 rope
    # pairs fall on all three branches of the formula), tied output.
    f = ParityFixture("llama3", "llama", 102)
    f.common(LAYERS, head_dim=HEAD_DIM, rope_dim=HEAD_DIM, base=10000.0)
    f.w.add_tensor("rope_freqs.weight", maf.llama3_rope_factors(HEAD_DIM, 10000.0, 8.0, 1.0, 4.0, 512))
    maf.decoder(f, LAYERS, HEAD_DIM)
    f.write()

    # Qwen 2: q/k/v biases, neox rope, tied output.
    f = ParityFixture("qwen2", "qwen2", 103)
    f.common(LAYERS, base=1000000.0)
    maf.decoder(f, LAYERS, HEAD_DIM, qkv_bias=True)
    f.write()

    # Qwen 3: per-head q/k norms, 8 heads of 64 (head_dim x heads != hidden),
    # one KV head, untied output.
    f = ParityFixture("qwen3", "qwen3", 104, heads=8, kv_heads=1)
    f.common(LAYERS, head_dim=HEAD_DIM, rope_dim=HEAD_DIM, base=1000000.0)
    maf.decoder(f, LAYERS, HEAD_DIM, qk_norm=True, tied=False)
    f.write()

    # Phi-3: fused qkv and gate|up, neox rope, untied output; the window is
    # ignored by llama.cpp and stoker alike.
    f = ParityFixture("phi3", "phi3", 105)
    f.common(LAYERS, rope_dim=HEAD_DIM)
    f.u32("attention.sliding_window", 2047)
    maf.decoder(f, LAYERS, HEAD_DIM, fused=True, tied=False)
    f.write()

    # Gemma 2: GeGLU, post-norms, embedding scale, soft-capping (caps small
    # enough to bite), tied output; layer 0 slides over a 64-token window,
    # shorter than the text, layer 1 is global.
    f = ParityFixture("gemma2", "gemma2", 106)
    f.common(LAYERS, head_dim=HEAD_DIM, base=10000.0)
    f.u32("attention.sliding_window", 64)
    f.f32("attn_logit_softcapping", 3.0)
    f.f32("final_logit_softcapping", 15.0)
    maf.decoder(f, LAYERS, HEAD_DIM, post_norms=True)
    f.write()

    # Gemma 3: q/k norms, post-norms, GeGLU, tied output; with 2 layers both
    # are local (5 local : 1 global), over a 64-token window with the local
    # rope base (10000, llama.cpp's default).
    f = ParityFixture("gemma3", "gemma3", 107)
    f.common(LAYERS, head_dim=HEAD_DIM, base=1000000.0)
    f.u32("attention.sliding_window", 64)
    maf.decoder(f, LAYERS, HEAD_DIM, qk_norm=True, post_norms=True)
    f.write()


ARCHS = ["llama", "llama3", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"]


def oracle_step(oracle_bin: Path, quant: Path):
    import make_parity as mp

    threads = os.environ.get("ORACLE_THREADS", "1")
    if os.environ.get("ORACLE_EXTRA_BUFTS") != "0":
        sys.exit("run with ORACLE_EXTRA_BUFTS=0 (portable ggml kernels; the fixtures say so)")
    OUT.mkdir(parents=True, exist_ok=True)
    text = OUT / "text.txt"
    with open(text, "w", encoding="utf-8", newline="\n") as f:
        f.write(TEXT)
    manifest = {
        "llama_cpp": mp.LLAMA_CPP,
        "quantize": "llama-quantize <arch>.F32.gguf <out> <TYPE> (no imatrix)",
        "oracle_env": {"ORACLE_EXTRA_BUFTS": "0", "ORACLE_THREADS": threads},
        "text_file": "text.txt",
        "score_stride": SCORE_STRIDE,
        "archs": {},
    }
    for arch in ARCHS:
        src = SRC / f"{arch}.F32.gguf"
        entry = {
            "source": src.name,
            "source_sha256": mp.sha256_file(src),
            "source_size": src.stat().st_size,
            "files": {},
        }
        for ty in TYPES:
            p = quant / f"{arch}.{ty}.gguf"
            print(f"  {arch} {ty}", file=sys.stderr)
            tensors = mp.tensor_table(p)
            mix: dict = {}
            for t in tensors:
                mix[t["type"]] = mix.get(t["type"], 0) + 1
            entry["files"][ty] = {
                "file": f"arch_parity/{p.name}",
                "size": p.stat().st_size,
                "sha256": mp.sha256_file(p),
                "tensor_type_counts": dict(sorted(mix.items())),
                "tensors": tensors,
            }
            scored = mp.oracle(oracle_bin, "score", "--model", str(p), "--text-file", str(text),
                               "--threads", threads, "--top", str(TOP_K))
            keep = list(range(SCORE_STRIDE - 1, len(scored["tokens"]), SCORE_STRIDE))
            fixture = {
                "llama_cpp": mp.LLAMA_CPP,
                "model": entry["files"][ty]["file"],
                "model_sha256": entry["files"][ty]["sha256"],
                "arch": arch,
                "type": ty,
                "text_file": "text.txt",
                "about": (
                    "positions[j] is llama.cpp's distribution over the token after "
                    "tokens[0..=scored[j]] (teacher-forced, all tokens in one batch): top_k ids "
                    "by logit (ties to the lower id), their natural-log probabilities "
                    "(log-softmax in f64 over the full vocabulary, 6 decimals) and rest = the "
                    "probability mass outside the top_k. perplexity is over every position."
                ),
                **{k: scored[k] for k in ("n_vocab", "add_bos", "top_k", "settings", "perplexity", "tokens")},
                "scored": keep,
                "positions": [scored["positions"][i] for i in keep],
            }
            if ty == "F16":
                top1 = [math.exp(scored["positions"][i]["top_logprobs"][0]) for i in range(len(scored["tokens"]))]
                entry["f16_perplexity"] = scored["perplexity"]
                entry["f16_mean_top1_probability"] = round(sum(top1) / len(top1), 6)
            with open(OUT / f"{arch}.{ty}.json", "w") as f:
                json.dump(fixture, f, separators=(",", ":"))
                f.write("\n")
        k = mp.oracle(oracle_bin, "kld", "--base", str(quant / f"{arch}.F16.gguf"),
                      "--test", str(quant / f"{arch}.Q4_K_M.gguf"), "--text-file", str(text),
                      "--threads", threads)
        entry["kld_f16_vs_q4_k_m"] = k["mean_kld"]
        entry["kld_f16_vs_q4_k_m_detail"] = {
            "about": "KL(F16 || Q4_K_M) per position over the full vocabulary, mean over all positions of text.txt; both files are llama-quantize's from the F32 source",
            **k,
        }
        print(f"  {arch}: F16 perplexity {entry['f16_perplexity']}, mean top-1 probability "
              f"{entry['f16_mean_top1_probability']} (uniform {1 / scored['n_vocab']:.4f}), "
              f"KL(F16 || Q4_K_M) {k['mean_kld']:.6f}", file=sys.stderr)
        manifest["archs"][arch] = entry

    # Indented, but one line per tensor.
    rows = {}
    for arch, entry in manifest["archs"].items():
        for ty, file in entry["files"].items():
            key = f"@tensors-{arch}-{ty}@"
            rows[json.dumps(key)] = "[\n" + ",\n".join(
                "       " + json.dumps(t, separators=(",", ":")) for t in file["tensors"]
            ) + "\n      ]"
            file["tensors"] = key
    out = json.dumps(manifest, indent=1)
    for key, value in rows.items():
        out = out.replace(key, value)
    with open(OUT / "manifest.json", "w") as f:
        f.write(out + "\n")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "sources":
        sources()
    elif len(sys.argv) == 4 and sys.argv[1] == "oracle":
        oracle_step(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit("usage: make_arch_parity_fixtures.py sources | oracle ORACLE QUANT_DIR")


if __name__ == "__main__":
    main()
