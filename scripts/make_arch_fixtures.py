#!/usr/bin/env python3
"""Writes the tiny random-weight GGUF files of executor/tests/fixtures/arch/.

One file per architecture (llama.cpp's tensor and metadata names, as its
converters write them), deterministic (fixed seeds), F32 weights unless a
file says otherwise, with a byte-level GPT-2 vocabulary just large enough
for `Model::load` to build a tokenizer. The executor's `architectures` test
runs each through our forward pass and candle-transformers' model of the
same architecture.

It also writes the small servable models of tests/fixtures/models/, one per
architecture, that the end-to-end test `architectures` starts `stoker serve`
on: the same random decoders with a larger context, a mix of tensor types,
each family's special tokens and its real chat template (llama.cpp's copy,
from scripts/fetch-llama-cpp-data.sh).

Setup: python3 -m venv .tools/arch-venv && .tools/arch-venv/bin/pip install gguf==0.19.0 numpy
       scripts/fetch-llama-cpp-data.sh
Run:   .tools/arch-venv/bin/python scripts/make_arch_fixtures.py
"""

import math
import os
import sys

import numpy as np
import gguf

ROOT = os.path.join(os.path.dirname(__file__), "..")
OUT = os.path.join(ROOT, "executor", "tests", "fixtures", "arch")
SERVED_OUT = os.path.join(ROOT, "tests", "fixtures", "models")
TEMPLATES = os.path.join(ROOT, "models", "llama.cpp", "templates")

HIDDEN = 64
HEADS = 4
KV_HEADS = 2
FFN = 128
CONTEXT = 64


def byte_vocab():
    """GPT-2's byte-to-unicode table (256 tokens) plus one merge."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, (chr(c) for c in cs)))
    tokens = [table[b] for b in range(256)] + ["Ġt"]
    return tokens, ["Ġ t"]


TOKENS, MERGES = byte_vocab()
VOCAB = len(TOKENS)


class Fixture:
    def __init__(self, name, arch, seed, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, ffn=FFN,
                 out=OUT, specials=(), context=CONTEXT):
        self.hidden, self.heads, self.kv_heads, self.ffn = hidden, heads, kv_heads, ffn
        self.context = context
        self.path = os.path.join(out, name)
        self.arch = arch
        self.rng = np.random.default_rng(seed)
        self.w = gguf.GGUFWriter(self.path, arch)
        self.w.add_name(name.removesuffix(".gguf"))
        self.w.add_tokenizer_model("gpt2")
        self.w.add_tokenizer_pre("gpt-2")
        # Special tokens follow the byte tokens, as control tokens (type 3).
        self.tokens = TOKENS + list(specials)
        self.vocab = len(self.tokens)
        self.w.add_token_list(self.tokens)
        self.w.add_token_merges(MERGES)
        self.w.add_token_types([1] * VOCAB + [3] * len(specials))
        if not specials:
            self.w.add_eos_token_id(0)

    def token(self, text):
        return self.tokens.index(text)

    def u32(self, key, v):
        self.w.add_uint32(f"{self.arch}.{key}", v)

    def f32(self, key, v):
        self.w.add_float32(f"{self.arch}.{key}", v)

    def common(self, layers, head_dim=None, rope_dim=None, base=None):
        self.u32("block_count", layers)
        self.u32("context_length", self.context)
        self.u32("embedding_length", self.hidden)
        self.u32("feed_forward_length", self.ffn)
        self.u32("attention.head_count", self.heads)
        self.u32("attention.head_count_kv", self.kv_heads)
        self.f32("attention.layer_norm_rms_epsilon", 1e-6)
        if head_dim is not None:
            self.u32("attention.key_length", head_dim)
            self.u32("attention.value_length", head_dim)
        if rope_dim is not None:
            self.u32("rope.dimension_count", rope_dim)
        if base is not None:
            self.f32("rope.freq_base", base)

    def matrix(self, name, rows, cols, qtype=None, scale=None):
        s = scale if scale is not None else 1.0 / math.sqrt(cols)
        a = (self.rng.standard_normal((rows, cols)) * s).astype(np.float32)
        if qtype is None:
            self.w.add_tensor(name, a)
        elif qtype == gguf.GGMLQuantizationType.F16:
            self.w.add_tensor(name, a.astype(np.float16))
        else:
            self.w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)

    def vector(self, name, n, mean=0.0, scale=0.1):
        self.w.add_tensor(name, (mean + self.rng.standard_normal(n) * scale).astype(np.float32))

    def norm(self, name, n):
        # Around 1, as llama.cpp's converters store them (Gemma's with the +1 added).
        self.vector(name, n, mean=1.0, scale=0.1)

    def write(self):
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()
        print(f"{self.path}: {os.path.getsize(self.path)} bytes")


def decoder(f, layers, head_dim, *, qkv_bias=False, qk_norm=False, post_norms=False,
            fused=False, tied=True, types=None):
    """Embedding, `layers` blocks and the output head under llama.cpp's names."""
    types = types or {}
    HIDDEN, FFN = f.hidden, f.ffn
    q, kv = f.heads * head_dim, f.kv_heads * head_dim
    f.matrix("token_embd.weight", f.vocab, HIDDEN, types.get("embd"), scale=0.5)
    f.norm("output_norm.weight", HIDDEN)
    if not tied:
        f.matrix("output.weight", f.vocab, HIDDEN, types.get("output"))
    for i in range(layers):
        p = f"blk.{i}"
        f.norm(f"{p}.attn_norm.weight", HIDDEN)
        if fused:
            f.matrix(f"{p}.attn_qkv.weight", q + 2 * kv, HIDDEN, types.get("qkv"))
        else:
            f.matrix(f"{p}.attn_q.weight", q, HIDDEN, types.get("q"))
            f.matrix(f"{p}.attn_k.weight", kv, HIDDEN, types.get("k"))
            f.matrix(f"{p}.attn_v.weight", kv, HIDDEN, types.get("v"))
        if qkv_bias:
            f.vector(f"{p}.attn_q.bias", q, scale=0.5)
            f.vector(f"{p}.attn_k.bias", kv, scale=0.5)
            f.vector(f"{p}.attn_v.bias", kv, scale=0.5)
        if qk_norm:
            f.norm(f"{p}.attn_q_norm.weight", head_dim)
            f.norm(f"{p}.attn_k_norm.weight", head_dim)
        f.matrix(f"{p}.attn_output.weight", HIDDEN, q, types.get("o"))
        if post_norms:
            f.norm(f"{p}.post_attention_norm.weight", HIDDEN)
        f.norm(f"{p}.ffn_norm.weight", HIDDEN)
        if fused:
            f.matrix(f"{p}.ffn_up.weight", 2 * FFN, HIDDEN, types.get("gate_up"))
        else:
            f.matrix(f"{p}.ffn_gate.weight", FFN, HIDDEN, types.get("gate"))
            f.matrix(f"{p}.ffn_up.weight", FFN, HIDDEN, types.get("up"))
        f.matrix(f"{p}.ffn_down.weight", HIDDEN, FFN, types.get("down"))
        if post_norms:
            f.norm(f"{p}.post_ffw_norm.weight", HIDDEN)


def llama3_rope_factors(head_dim, base, factor, low, high, old_context):
    """llama.cpp's convert_hf_to_gguf.py (LlamaModel.generate_extra_tensors)."""
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wavelen = old_context / low
    high_wavelen = old_context / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_context / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def main():
    os.makedirs(OUT, exist_ok=True)
    Q8 = gguf.GGMLQuantizationType.Q8_0

    # Llama: interleaved rope, untied output.
    f = Fixture("llama.gguf", "llama", 1)
    f.common(2, rope_dim=16, base=10000.0)
    decoder(f, 2, 16, tied=False)
    f.write()

    # Llama 3: rope_freqs (llama3 rope scaling), explicit key/value length, tied output.
    # The scaling constants put the 8 rope pairs on all three branches of the formula.
    f = Fixture("llama3.gguf", "llama", 2)
    f.common(2, head_dim=16, rope_dim=16, base=10000.0)
    f.w.add_tensor("rope_freqs.weight", llama3_rope_factors(16, 10000.0, 8.0, 1.0, 4.0, 64))
    decoder(f, 2, 16)
    f.write()

    # Llama with q, k and gate in Q8_0 and v and up in F32: the parts cannot be fused.
    f = Fixture("llama-mixed.gguf", "llama", 3)
    f.common(2, rope_dim=16, base=10000.0)
    decoder(f, 2, 16, tied=False, types={"q": Q8, "k": Q8, "gate": Q8})
    f.write()

    # Qwen 2: q/k/v biases, neox rope, tied output.
    f = Fixture("qwen2.gguf", "qwen2", 4)
    f.common(2, base=1000000.0)
    decoder(f, 2, 16, qkv_bias=True)
    f.write()

    # Qwen 3: per-head q/k norms, head_dim 32 != hidden / heads, untied output.
    f = Fixture("qwen3.gguf", "qwen3", 5)
    f.common(2, head_dim=32, rope_dim=32, base=1000000.0)
    # candle's quantized_qwen3 builds its rope tables in f16 unless told f32.
    f.w.add_uint32("general.dtype", 0)
    decoder(f, 2, 32, qk_norm=True, tied=False)
    f.write()

    # Phi-3: fused qkv and gate|up, neox rope, untied output. The window is
    # ignored, as llama.cpp does.
    f = Fixture("phi3.gguf", "phi3", 6)
    f.common(2, rope_dim=16)
    f.u32("attention.sliding_window", 2047)
    decoder(f, 2, 16, fused=True, tied=False)
    f.write()

    # Gemma 2: GeGLU, post-norms, embedding scale, soft-capping (small caps so
    # they bite), head_dim 32, tied output; every other layer slides (window
    # larger than the test's sequences: the oracle does not slide in decode).
    f = Fixture("gemma2.gguf", "gemma2", 7)
    f.common(2, head_dim=32, base=10000.0)
    f.u32("attention.sliding_window", 4096)
    f.f32("attn_logit_softcapping", 2.0)
    f.f32("final_logit_softcapping", 15.0)
    decoder(f, 2, 32, post_norms=True)
    f.write()

    # Gemma 3: as Gemma 2 without soft-capping, plus q/k norms, 5 local : 1
    # global layers, a 5-position window, local rope base 10000. Narrower, to
    # keep six layers small.
    f = Fixture("gemma3.gguf", "gemma3", 8, hidden=32, heads=2, kv_heads=1, ffn=64)
    f.common(6, head_dim=32, base=1000000.0)
    f.u32("attention.sliding_window", 5)
    decoder(f, 6, 32, qk_norm=True, post_norms=True)
    f.write()

    # An architecture we do not implement.
    f = Fixture("mamba.gguf", "mamba", 9)
    f.common(1)
    f.matrix("token_embd.weight", VOCAB, HIDDEN)
    f.write()

    served()


# The servable models: (file, architecture, seed, llama.cpp template, special
# tokens, BOS, EOS, whether the tokenizer adds BOS, tensor types by role).
Q4_0 = gguf.GGMLQuantizationType.Q4_0
Q5_0 = gguf.GGMLQuantizationType.Q5_0
Q5_1 = gguf.GGMLQuantizationType.Q5_1
Q8_0 = gguf.GGMLQuantizationType.Q8_0
F16 = gguf.GGMLQuantizationType.F16
LLAMA3 = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
          "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"]
QWEN = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
PHI3 = ["<s>", "</s>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
GEMMA = ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"]
SERVED = [
    ("llama3.gguf", "llama", 11, "meta-llama-Llama-3.2-3B-Instruct.jinja", LLAMA3,
     "<|begin_of_text|>", "<|eot_id|>", True,
     {"q": Q4_0, "k": Q4_0, "v": Q8_0, "o": Q5_0, "gate": Q4_0, "up": Q4_0, "down": Q8_0, "embd": Q8_0}),
    ("qwen2.gguf", "qwen2", 12, "Qwen-Qwen2.5-7B-Instruct.jinja", QWEN,
     "<|endoftext|>", "<|im_end|>", False,
     {"q": Q5_0, "k": Q5_0, "v": Q8_0, "o": Q5_1, "gate": Q5_0, "up": Q5_0, "down": Q8_0, "embd": F16}),
    ("qwen3.gguf", "qwen3", 13, "Qwen-Qwen3-0.6B.jinja", QWEN + ["<think>", "</think>"],
     "<|endoftext|>", "<|im_end|>", False,
     {"q": Q8_0, "k": Q8_0, "v": F16, "gate": Q4_0, "up": Q4_0, "down": Q5_1, "output": Q8_0}),
    ("phi3.gguf", "phi3", 14, "microsoft-Phi-3.5-mini-instruct.jinja", PHI3,
     "<s>", "<|end|>", True,
     {"qkv": Q8_0, "o": Q4_0, "gate_up": Q5_1, "down": Q8_0, "output": F16}),
    ("gemma2.gguf", "gemma2", 15, "google-gemma-2-2b-it.jinja", GEMMA,
     "<bos>", "<end_of_turn>", True,
     {"q": Q8_0, "k": Q8_0, "v": Q8_0, "o": Q8_0, "gate": Q5_1, "up": Q5_1, "down": Q4_0, "embd": Q8_0}),
    ("gemma3.gguf", "gemma3", 16, "google-gemma-2-2b-it.jinja", GEMMA,
     "<bos>", "<end_of_turn>", True,
     {"q": F16, "k": F16, "v": F16, "o": Q8_0, "gate": Q8_0, "up": Q8_0, "down": Q8_0, "embd": Q8_0}),
]
SERVED_CONTEXT = 2048


def served():
    if not os.path.isdir(TEMPLATES):
        sys.exit(f"{TEMPLATES} missing: run scripts/fetch-llama-cpp-data.sh first")
    os.makedirs(SERVED_OUT, exist_ok=True)
    for name, arch, seed, template, specials, bos, eos, add_bos, types in SERVED:
        f = Fixture(name, arch, seed, out=SERVED_OUT, specials=specials, context=SERVED_CONTEXT)
        f.w.add_bos_token_id(f.token(bos))
        f.w.add_eos_token_id(f.token(eos))
        f.w.add_add_bos_token(add_bos)
        with open(os.path.join(TEMPLATES, template), encoding="utf-8") as t:
            f.w.add_chat_template(t.read())
        f.w.add_string("stoker.fixture.template", template)
        if arch == "llama":
            f.common(2, head_dim=16, rope_dim=16, base=500000.0)
            f.w.add_tensor("rope_freqs.weight",
                           llama3_rope_factors(16, 500000.0, 32.0, 1.0, 4.0, 256))
            decoder(f, 2, 16, types=types)
        elif arch == "qwen2":
            f.common(2, base=1000000.0)
            decoder(f, 2, 16, qkv_bias=True, types=types)
        elif arch == "qwen3":
            f.common(2, head_dim=32, rope_dim=32, base=1000000.0)
            decoder(f, 2, 32, qk_norm=True, tied=False, types=types)
        elif arch == "phi3":
            f.common(2, rope_dim=16)
            f.u32("attention.sliding_window", 2047)
            decoder(f, 2, 16, fused=True, tied=False, types=types)
        elif arch == "gemma2":
            f.common(2, head_dim=32, base=10000.0)
            # A window shorter than the test's prompts, so that it bites.
            f.u32("attention.sliding_window", 16)
            f.f32("attn_logit_softcapping", 50.0)
            f.f32("final_logit_softcapping", 30.0)
            decoder(f, 2, 32, post_norms=True, types=types)
        elif arch == "gemma3":
            f.common(6, head_dim=32, base=1000000.0)
            f.u32("attention.sliding_window", 16)
            decoder(f, 6, 32, qk_norm=True, post_norms=True, types=types)
        f.write()


if __name__ == "__main__":
    sys.exit(main())
