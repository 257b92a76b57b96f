#!/usr/bin/env python3
"""Writes the tiny Hugging Face model directories of executor/tests/fixtures/hf/.

Each directory is the Hugging Face checkpoint that llama.cpp's
convert_hf_to_gguf.py would turn into one of the random-weight GGUF files of
executor/tests/fixtures/arch/ (written by scripts/make_arch_fixtures.py): this
script runs that conversion backwards. It reads the GGUF file, dequantizes
every tensor to float32, gives it its Hugging Face name and layout ([out, in],
row-major), and undoes what the converter changes:

- Llama's q and k rows are permuted back (the converter interleaves them for
  llama.cpp's rope, which pairs dimensions (2i, 2i+1); Hugging Face's rotates
  halves);
- Gemma's norm weights lose the 1 the converter adds (Hugging Face's Gemma
  RMSNorm multiplies by 1 + w);
- Llama 3's `rope_freqs.weight` becomes the `rope_scaling` of config.json,
  checked to reproduce the tensor.

Beside `model.safetensors` it writes `config.json` (hyper-parameters from the
GGUF metadata), `generation_config.json`, and `tokenizer.json` and
`tokenizer_config.json` for the fixtures' byte-level vocabulary of 257 tokens,
as Hugging Face's libraries write them. Three directories exercise other
layouts: qwen2 is split into two shards with a `model.safetensors.index.json`,
qwen3 is stored in bfloat16, and mistral is the llama weights under
`MistralForCausalLM`. The llama directory's generation_config.json also
carries sampling defaults (temperature 0.6, top_p 0.9).

The executor's `hf_directories` test loads each directory and compares its
logits with candle-transformers' model of the architecture, and with the GGUF
file's.

Deterministic: running it again writes the same bytes.

Setup: scripts/setup-venv.sh (gguf, numpy and safetensors, pinned)
Run:   .venv/bin/python scripts/make_hf_fixtures.py
"""

import json
import math
import os
import shutil
import struct
import sys

import gguf
import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ARCH = os.path.join(ROOT, "executor", "tests", "fixtures", "arch")
OUT = os.path.join(ROOT, "executor", "tests", "fixtures", "hf")

# What config.json and generation_config.json record as the writing library's
# version, as Hugging Face's save_pretrained does.
TRANSFORMERS_VERSION = "4.57.1"

# (directory, GGUF fixture, Hugging Face class, model_type)
MODELS = [
    ("llama", "llama.gguf", "LlamaForCausalLM", "llama"),
    ("llama3", "llama3.gguf", "LlamaForCausalLM", "llama"),
    ("mistral", "llama.gguf", "MistralForCausalLM", "mistral"),
    ("qwen2", "qwen2.gguf", "Qwen2ForCausalLM", "qwen2"),
    ("qwen3", "qwen3.gguf", "Qwen3ForCausalLM", "qwen3"),
    ("phi3", "phi3.gguf", "Phi3ForCausalLM", "phi3"),
    ("gemma2", "gemma2.gguf", "Gemma2ForCausalLM", "gemma2"),
    ("gemma3", "gemma3.gguf", "Gemma3ForCausalLM", "gemma3_text"),
]

# Llama 3 rope scaling of llama3.gguf (scripts/make_arch_fixtures.py): checked
# against the file's rope_freqs.weight before it is written.
LLAMA3_ROPE_SCALING = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
    "rope_type": "llama3",
}

# llama.cpp hard-codes these for Gemma 3 (convert_hf_to_gguf.py does not store
# them): local layers use rope base 10000, and five of every six layers slide.
GEMMA3_ROPE_LOCAL_BASE = 10000.0
GEMMA3_SLIDING_PATTERN = 6

# GGUF tensor names (after `blk.N.`) and their Hugging Face names (after
# `model.layers.N.`).
LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
GEMMA_LAYER_NAMES = {
    **LAYER_NAMES,
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
PHI3_LAYER_NAMES = {**LAYER_NAMES, "ffn_up": "mlp.gate_up_proj"}


class Gguf:
    """A GGUF fixture's metadata and its tensors, dequantized to float32."""

    def __init__(self, path):
        self.reader = gguf.GGUFReader(path)
        self.arch = self.field("general.architecture")
        self.tensors = {}
        for t in self.reader.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            # GGUF lists dimensions innermost first; numpy (and Hugging Face)
            # outermost first.
            shape = tuple(int(d) for d in reversed(t.shape))
            self.tensors[t.name] = np.ascontiguousarray(a.reshape(shape), dtype=np.float32)

    def field(self, key, default=None):
        f = self.reader.fields.get(key)
        return default if f is None else f.contents()

    def hp(self, key, default=None):
        return self.field(f"{self.arch}.{key}", default)

    def f32(self, key, default=None):
        """A float32 value as the decimal that names it (1e-06, not 9.99e-07)."""
        v = self.hp(key)
        return default if v is None else float(str(np.float32(v)))


def unpermute(w, heads):
    """Undoes convert_hf_to_gguf.py's `LlamaModel.permute` of q or k rows."""
    rows, cols = w.shape
    return np.ascontiguousarray(
        w.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols))


def llama3_inv_freq(head_dim, base, s):
    """Hugging Face's `_compute_llama3_parameters`, in float64."""
    inv_freq = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    old = s["original_max_position_embeddings"]
    low_wavelen = old / s["low_freq_factor"]
    high_wavelen = old / s["high_freq_factor"]
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_wavelen, inv_freq / s["factor"], inv_freq)
    smooth = (old / wavelen - s["low_freq_factor"]) / (s["high_freq_factor"] - s["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / s["factor"] + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return inv_freq, np.where(medium, smoothed, scaled)


def check_rope_scaling(g, head_dim, base, scaling):
    """Fails unless `scaling` gives the divisors of the GGUF's rope_freqs."""
    inv_freq, scaled = llama3_inv_freq(head_dim, base, scaling)
    want = g.tensors["rope_freqs.weight"].astype(np.float64)
    got = inv_freq / scaled
    err = float(np.max(np.abs(got - want)))
    if got.shape != want.shape or err > 1e-6:
        sys.exit(f"rope_scaling {scaling} does not reproduce rope_freqs.weight "
                 f"(max difference {err}): {got} != {want}")
    return err


def hf_tensors(g, name):
    """The Hugging Face state dict of a GGUF fixture, in the model's order."""
    arch = g.arch
    layers = g.hp("block_count")
    heads, kv_heads = g.hp("attention.head_count"), g.hp("attention.head_count_kv")
    gemma = arch in ("gemma2", "gemma3")
    names = GEMMA_LAYER_NAMES if gemma else PHI3_LAYER_NAMES if arch == "phi3" else LAYER_NAMES
    t = dict(g.tensors)
    out = {}

    def take(gguf_name, hf_name):
        w = t.pop(gguf_name)
        if gemma and hf_name.endswith("norm.weight"):
            w = w - np.float32(1.0)
        if arch == "llama" and hf_name.endswith(("q_proj.weight", "k_proj.weight")):
            w = unpermute(w, heads if "q_proj" in hf_name else kv_heads)
        out[hf_name] = np.ascontiguousarray(w, dtype=np.float32)

    take("token_embd.weight", "model.embed_tokens.weight")
    for i in range(layers):
        for gguf_part, hf_part in names.items():
            for kind in ("weight", "bias"):
                n = f"blk.{i}.{gguf_part}.{kind}"
                if n in t:
                    take(n, f"model.layers.{i}.{hf_part}.{kind}")
    take("output_norm.weight", "model.norm.weight")
    if "output.weight" in t:
        take("output.weight", "lm_head.weight")
    # Llama 3's rope scaling goes to config.json.
    t.pop("rope_freqs.weight", None)
    if t:
        sys.exit(f"{name}: no Hugging Face name for {sorted(t)}")
    return out


def config(g, hf_class, model_type, tensors):
    arch = g.arch
    heads = g.hp("attention.head_count")
    hidden = g.hp("embedding_length")
    head_dim = g.hp("attention.key_length", hidden // heads)
    context = g.hp("context_length")
    layers = g.hp("block_count")
    rope_dim = g.hp("rope.dimension_count", head_dim)
    if rope_dim != head_dim:
        sys.exit(f"{arch}: partial rotary ({rope_dim} of {head_dim}) is not converted")
    eos = g.field("tokenizer.ggml.eos_token_id")
    bos = g.field("tokenizer.ggml.bos_token_id")
    c = {
        "architectures": [hf_class],
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": g.hp("feed_forward_length"),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": g.hp("attention.head_count_kv"),
        "head_dim": head_dim,
        "max_position_embeddings": context,
        "rms_norm_eps": g.f32("attention.layer_norm_rms_epsilon"),
        "rope_theta": g.f32("rope.freq_base", 10000.0),
        "rope_scaling": None,
        "tie_word_embeddings": "lm_head.weight" not in tensors,
        "vocab_size": tensors["model.embed_tokens.weight"].shape[0],
        "torch_dtype": "float32",
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": True,
        "transformers_version": TRANSFORMERS_VERSION,
    }
    if bos is not None:
        c["bos_token_id"] = bos
    if eos is not None:
        c["eos_token_id"] = eos
    if arch == "llama":
        c.update(hidden_act="silu", attention_bias=False, mlp_bias=False, pretraining_tp=1)
        if "rope_freqs.weight" in g.tensors:
            check_rope_scaling(g, head_dim, c["rope_theta"], LLAMA3_ROPE_SCALING)
            c["rope_scaling"] = dict(LLAMA3_ROPE_SCALING)
        if model_type == "mistral":
            for k in ("attention_bias", "mlp_bias", "pretraining_tp", "rope_scaling"):
                del c[k]
            c["sliding_window"] = None
    elif arch in ("qwen2", "qwen3"):
        c.update(hidden_act="silu", use_sliding_window=False, max_window_layers=layers)
        # Qwen 2 records a window the size of the context, unused.
        c["sliding_window"] = context if arch == "qwen2" else None
        if arch == "qwen3":
            c["attention_bias"] = False
    elif arch == "phi3":
        c.update(hidden_act="silu", attention_bias=False, embd_pdrop=0.0, resid_pdrop=0.0,
                 original_max_position_embeddings=context,
                 sliding_window=g.hp("attention.sliding_window"))
    elif arch in ("gemma2", "gemma3"):
        c.update(hidden_activation="gelu_pytorch_tanh", attention_bias=False,
                 # llama.cpp scales q by 1/sqrt(head_dim) for these sizes.
                 query_pre_attn_scalar=head_dim,
                 attn_logit_softcapping=g.f32("attn_logit_softcapping"),
                 final_logit_softcapping=g.f32("final_logit_softcapping"),
                 sliding_window=g.hp("attention.sliding_window"),
                 cache_implementation="hybrid")
        if arch == "gemma2":
            c["hidden_act"] = "gelu_pytorch_tanh"
        else:
            c["rope_local_base_freq"] = GEMMA3_ROPE_LOCAL_BASE
            c["sliding_window_pattern"] = GEMMA3_SLIDING_PATTERN
            c["layer_types"] = [
                "sliding_attention" if (i + 1) % GEMMA3_SLIDING_PATTERN else "full_attention"
                for i in range(layers)
            ]
            # Gemma 3 lists its end-of-sequence ids.
            c["eos_token_id"] = [eos]
    else:
        sys.exit(f"no Hugging Face config for {arch}")
    return c


def byte_level(add_prefix_space, trim_offsets):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space,
            "trim_offsets": trim_offsets, "use_regex": True}


def tokenizer_json(g, merges_as_pairs):
    """The tokenizers library's serialization of the GGUF's BPE vocabulary."""
    if g.field("tokenizer.ggml.model") != "gpt2" or g.field("tokenizer.ggml.pre") != "gpt-2":
        sys.exit("only the GPT-2 byte-level BPE vocabulary is converted")
    tokens = g.field("tokenizer.ggml.tokens")
    types = g.field("tokenizer.ggml.token_type")
    merges = g.field("tokenizer.ggml.merges")
    # Control (3) and user-defined (4) tokens are Hugging Face's added tokens.
    added = [
        {"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": ty == 4, "special": ty == 3}
        for i, (tok, ty) in enumerate(zip(tokens, types)) if ty in (3, 4)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        # GPT-2's pre-tokenizer: its regex, then bytes to printable characters.
        "pre_tokenizer": byte_level(False, True),
        "post_processor": byte_level(True, False),
        "decoder": byte_level(True, True),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            # tokenizers 0.20 and later write each merge as a pair; earlier
            # files (and most published ones) as one space-separated string.
            "merges": [m.split(" ") for m in merges] if merges_as_pairs else list(merges),
        },
    }


def tokenizer_config(g):
    tokens = g.field("tokenizer.ggml.tokens")
    bos = g.field("tokenizer.ggml.bos_token_id")
    eos = g.field("tokenizer.ggml.eos_token_id")
    types = g.field("tokenizer.ggml.token_type")
    decoder = {
        str(i): {"content": tok, "lstrip": False, "normalized": ty == 4, "rstrip": False,
                 "single_word": False, "special": ty == 3}
        for i, (tok, ty) in enumerate(zip(tokens, types)) if ty in (3, 4)
    }
    c = {
        "add_bos_token": bool(g.field("tokenizer.ggml.add_bos_token", False)) and bos is not None,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": None if bos is None else tokens[bos],
        "clean_up_tokenization_spaces": False,
        "eos_token": None if eos is None else tokens[eos],
        "model_max_length": g.hp("context_length"),
        "pad_token": None,
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": None,
    }
    template = g.field("tokenizer.chat_template")
    if template is not None:
        c["chat_template"] = template
    return c


def generation_config(g, c, sampling):
    out = {}
    if "bos_token_id" in c:
        out["bos_token_id"] = c["bos_token_id"]
    out["eos_token_id"] = c["eos_token_id"]
    if sampling:
        out.update(do_sample=True, temperature=0.6, top_p=0.9)
    else:
        out["_from_model_config"] = True
    out["transformers_version"] = TRANSFORMERS_VERSION
    return out


def to_bf16_bits(a):
    """float32 to bfloat16 bits, rounding to nearest even (as torch does)."""
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def save_bf16(tensors, path):
    """A safetensors file of BF16 tensors, laid out as the safetensors library
    writes one (numpy has no bfloat16): an 8-byte header length, the JSON
    header padded with spaces to 8 bytes, then the data in name order."""
    header = {"__metadata__": {"format": "pt"}}
    chunks, offset = [], 0
    for name in sorted(tensors):
        data = to_bf16_bits(tensors[name]).astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)


def save_sharded(tensors, out, shards):
    """`shards` safetensors files, filled in the model's order, and the index
    save_pretrained writes beside them."""
    total = sum(a.nbytes for a in tensors.values())
    per = math.ceil(total / shards)
    parts, size = [{}], 0
    for name, a in tensors.items():
        if size + a.nbytes > per and parts[-1] and len(parts) < shards:
            parts.append({})
            size = 0
        parts[-1][name] = a
        size += a.nbytes
    weight_map = {}
    for i, part in enumerate(parts, 1):
        file = f"model-{i:05d}-of-{len(parts):05d}.safetensors"
        save_file(part, os.path.join(out, file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    write_json(os.path.join(out, "model.safetensors.index.json"), index, sort_keys=True)


def write_json(path, value, sort_keys):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(value, indent=2, sort_keys=sort_keys, ensure_ascii=False) + "\n")


def main():
    for name, fixture, hf_class, model_type in MODELS:
        g = Gguf(os.path.join(ARCH, fixture))
        tensors = hf_tensors(g, name)
        c = config(g, hf_class, model_type, tensors)
        out = os.path.join(OUT, name)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        if name == "qwen2":
            save_sharded(tensors, out, 2)
        elif name == "qwen3":
            c["torch_dtype"] = "bfloat16"
            save_bf16(tensors, os.path.join(out, "model.safetensors"))
        else:
            save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
        write_json(os.path.join(out, "config.json"), c, sort_keys=True)
        write_json(os.path.join(out, "generation_config.json"),
                   generation_config(g, c, sampling=name == "llama"), sort_keys=True)
        write_json(os.path.join(out, "tokenizer.json"),
                   tokenizer_json(g, merges_as_pairs=name == "qwen3"), sort_keys=False)
        write_json(os.path.join(out, "tokenizer_config.json"), tokenizer_config(g), sort_keys=True)
        size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
        print(f"{os.path.relpath(out, ROOT)}: {len(tensors)} tensors, {size} bytes")


if __name__ == "__main__":
    sys.exit(main())
