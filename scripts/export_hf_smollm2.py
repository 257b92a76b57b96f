#!/usr/bin/env python3
"""The default model (SmolLM2-135M-Instruct, models/SmolLM2-135M-Instruct.Q4_1.gguf)
as Hugging Face model directories and as F16 and Q8_0 GGUF files, under
models/hf/ (ignored by git; about 1 GB, so made rather than committed).

Run by scripts/make-hf-smollm2.sh (see there), in .venv (gguf, numpy and
safetensors pinned by scripts/setup-venv.sh). Writes:

  SmolLM2-135M-Instruct.F16.gguf
      every tensor of the Q4_1 file dequantized (gguf.quants.dequantize) and
      stored as F16, the 1-D ones (the norms) as F32 as llama.cpp keeps them;
      all metadata copied, general.file_type 1 (MOSTLY_F16).
  SmolLM2-135M-Instruct-f16/
      the same F16 values as a Hugging Face directory, stored the way the
      original checkpoint stores the model: model.safetensors under HF names,
      q_proj/k_proj rows un-permuted (the inverse of llama.cpp's
      convert_hf_to_gguf.py `LlamaModel.permute`), tied embeddings (no
      lm_head), config.json, generation_config.json, tokenizer.json (BPE
      vocabulary and merges from the GGUF's tokenizer metadata, SmolLM2's
      pre-tokenizer) and tokenizer_config.json (the GGUF's chat template).
  SmolLM2-135M-Instruct-bf16/
      the same directory with BF16 weights: the dequantized f32 values rounded
      to nearest even (ggml's fp32 -> bf16, gguf.quants' BF16).
  SmolLM2-135M-Instruct.Q8_0.gguf
      the F16 file's 2-D weights quantized to Q8_0 (gguf.quants.quantize, what
      `llama-quantize ... Q8_0` does), 1-D tensors F32, general.file_type 7.

Deterministic: re-running writes the same bytes. The manifest
(executor/tests/fixtures/hf_smollm2.json) holds every output's size and
sha256; after writing, the outputs are checked against it (`--update-manifest`
rewrites it instead, after a deliberate change to this script).

The norms are stored F16 (BF16) in the directories like every other tensor;
they are bf16 values in the original checkpoint, which F16 represents exactly
(checked), so the F16 directory and the F16 GGUF hold the same numbers.
"""

import hashlib
import json
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = ROOT / "models" / "hf"
MANIFEST = ROOT / "executor" / "tests" / "fixtures" / "hf_smollm2.json"
STEM = "SmolLM2-135M-Instruct"
F16_GGUF = f"{STEM}.F16.gguf"
Q8_0_GGUF = f"{STEM}.Q8_0.gguf"
F16_DIR = f"{STEM}-f16"
BF16_DIR = f"{STEM}-bf16"
DIR_FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
]
OUTPUTS = [F16_GGUF, Q8_0_GGUF] + [f"{d}/{f}" for d in (F16_DIR, BF16_DIR) for f in DIR_FILES]

# llama.cpp's LLAMA_FTYPE_MOSTLY_F16 and LLAMA_FTYPE_MOSTLY_Q8_0.
FILE_TYPE_F16 = 1
FILE_TYPE_Q8_0 = 7
CONTROL = 3  # tokenizer.ggml.token_type of a control token


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- q/k rows


def permute(w, n_head):
    """llama.cpp convert_hf_to_gguf.py `LlamaModel.permute` (HF rows -> GGUF rows)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def unpermute(w, n_head):
    """Its inverse (GGUF rows -> HF rows)."""
    rows, cols = w.shape
    return w.reshape(n_head, rows // n_head // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def self_test_permute(gguf_f16, n_head, n_kv_head, n_layers):
    """Un-permuting then permuting gives back the GGUF rows exactly, and the
    two are not the identity (a random matrix too)."""
    rng = np.random.default_rng(0)
    for heads in (n_head, n_kv_head):
        w = rng.standard_normal((heads * 64, 5)).astype(np.float32)
        assert np.array_equal(permute(unpermute(w, heads), heads), w)
        assert np.array_equal(unpermute(permute(w, heads), heads), w)
        assert not np.array_equal(unpermute(w, heads), w)
    for i in range(n_layers):
        for part, heads in (("attn_q", n_head), ("attn_k", n_kv_head)):
            w = gguf_f16[f"blk.{i}.{part}.weight"]
            back = permute(unpermute(w, heads), heads)
            if back.tobytes() != w.tobytes():
                raise SystemExit(f"permute(unpermute(blk.{i}.{part})) differs from the GGUF rows")


# ---------------------------------------------------------------- GGUF


def field(reader, key):
    f = reader.get_field(key)
    return None if f is None else f.contents()


def copy_metadata(reader, writer, file_type):
    """Every key-value pair of the source in its order (general.architecture is
    written by GGUFWriter itself, first, as in the source), file_type replaced."""
    for f in reader.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
            continue
        vtype = f.types[0]
        sub_type = f.types[-1] if vtype == VT.ARRAY else None
        value = f.contents()
        if f.name == gguf.Keys.General.FILE_TYPE:
            value = file_type
        writer.add_key_value(f.name, value, vtype, sub_type=sub_type)


def write_gguf(path, reader, arch, file_type, tensors):
    """`tensors`: (name, array, raw_dtype or None) in file order."""
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(tmp, arch)
    copy_metadata(reader, w, file_type)
    for name, arr, raw in tensors:
        w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


# ---------------------------------------------------------------- safetensors


def write_safetensors(path, tensors):
    """`tensors`: name -> (dtype string, shape, little-endian bytes). Written by
    hand (numpy has no bfloat16): an 8-byte little-endian header length, the
    JSON header (padded with spaces to 8 bytes, as safetensors pads it), the
    data in the header's order (sorted by name)."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    names = sorted(tensors)
    for name in names:
        dtype, shape, data = tensors[name]
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for name in names:
            f.write(tensors[name][2])
    os.replace(tmp, path)


def read_safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return 8 + n, header


def validate_safetensors(path, expected, dtype):
    """Reads the file back: `expected` is name -> f32 array (the values before
    rounding to `dtype`)."""
    start, header = read_safetensors_header(path)
    header.pop("__metadata__")
    if set(header) != set(expected):
        raise SystemExit(f"{path}: tensor names differ from the ones written")
    size = path.stat().st_size
    end = 0
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        a, b = info["data_offsets"]
        if a != end or info["dtype"] != dtype or tuple(info["shape"]) != expected[name].shape:
            raise SystemExit(f"{path}: bad header entry for {name}: {info}")
        end = b
        bits = np.frombuffer(raw[start + a : start + b], dtype="<u2").reshape(info["shape"])
        if dtype == "F16":
            back = bits.view(np.float16).astype(np.float32)
            if not np.array_equal(back, expected[name].astype(np.float16).astype(np.float32)):
                raise SystemExit(f"{path}: {name} does not read back as written")
        else:
            back = (bits.astype(np.uint32) << 16).view(np.float32)
            want = expected[name]
            # Round to nearest: within half a bf16 ulp (8 significant bits).
            tol = np.ldexp(np.float32(1.0), np.frexp(want)[1] - 9)
            if not np.all(np.abs(back - want) <= tol):
                raise SystemExit(f"{path}: {name} is not the bf16 rounding of the values")
    if start + end != size:
        raise SystemExit(f"{path}: data does not end the file")
    del raw
    try:
        from safetensors import safe_open
    except ImportError:
        return  # the hand parse above stands
    with safe_open(str(path), framework="numpy") as f:
        if set(f.keys()) != set(expected):
            raise SystemExit(f"{path}: safetensors lists other tensors")
        for name in f.keys():
            s = f.get_slice(name)
            if s.get_dtype() != dtype or tuple(s.get_shape()) != expected[name].shape:
                raise SystemExit(f"{path}: safetensors reads {name} as {s.get_dtype()} {s.get_shape()}")
            if dtype == "F16":
                got = f.get_tensor(name)
                if got.dtype != np.float16 or not np.array_equal(got, expected[name].astype(np.float16)):
                    raise SystemExit(f"{path}: safetensors reads other values for {name}")


# ---------------------------------------------------------------- HF names

HF_LAYER = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and parts[2] in HF_LAYER:
        return f"model.layers.{parts[1]}.{HF_LAYER[parts[2]]}.weight"
    raise SystemExit(f"no Hugging Face name for {name}")


def hf_tensors(values, n_head, n_kv_head):
    """GGUF name -> array, to HF name -> array with q/k rows un-permuted."""
    out = {}
    for name, w in values.items():
        if name.endswith(".attn_q.weight"):
            w = unpermute(w, n_head)
        elif name.endswith(".attn_k.weight"):
            w = unpermute(w, n_kv_head)
        out[hf_name(name)] = np.ascontiguousarray(w)
    return out


# ---------------------------------------------------------------- HF json


def dump_json(path, obj, sort_keys):
    text = json.dumps(obj, indent=2, sort_keys=sort_keys, ensure_ascii=False) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def f32(x):
    """A GGUF float32 as the shortest decimal that reads back to it (1e-05, not
    9.999999747378752e-06)."""
    return float(str(np.float32(x)))


def hf_config(md, torch_dtype):
    a = md["general.architecture"]
    if a != "llama":
        raise SystemExit(f"expected a llama GGUF, got {a}")
    hidden = md[f"{a}.embedding_length"]
    heads = md[f"{a}.attention.head_count"]
    if md[f"{a}.rope.dimension_count"] != hidden // heads:
        raise SystemExit("partial rotary is not expressible in a LlamaForCausalLM config")
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": md["tokenizer.ggml.bos_token_id"],
        "eos_token_id": md["tokenizer.ggml.eos_token_id"],
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.041666666666666664,
        "intermediate_size": md[f"{a}.feed_forward_length"],
        "max_position_embeddings": md[f"{a}.context_length"],
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": md[f"{a}.block_count"],
        "num_key_value_heads": md[f"{a}.attention.head_count_kv"],
        "pad_token_id": md["tokenizer.ggml.padding_token_id"],
        "pretraining_tp": 1,
        "rms_norm_eps": f32(md[f"{a}.attention.layer_norm_rms_epsilon"]),
        "rope_scaling": None,
        "rope_theta": f32(md[f"{a}.rope.freq_base"]),
        "tie_word_embeddings": True,
        "torch_dtype": torch_dtype,
        "transformers_version": "4.42.3",
        "use_cache": True,
        "vocab_size": len(md["tokenizer.ggml.tokens"]),
    }


def generation_config(md):
    return {
        "_from_model_config": True,
        "bos_token_id": md["tokenizer.ggml.bos_token_id"],
        "eos_token_id": md["tokenizer.ggml.eos_token_id"],
        "pad_token_id": md["tokenizer.ggml.padding_token_id"],
        "transformers_version": "4.42.3",
    }


def added_token(i, content):
    return {
        "id": i,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }


def tokenizer_json(md):
    """tokenizer.json as SmolLM2's original is laid out (the key order the
    tokenizers library writes)."""
    if md["tokenizer.ggml.model"] != "gpt2" or md["tokenizer.ggml.pre"] != "smollm":
        raise SystemExit("expected SmolLM2's byte-level BPE tokenizer")
    tokens = md["tokenizer.ggml.tokens"]
    types = md["tokenizer.ggml.token_type"]
    if len(set(tokens)) != len(tokens):
        raise SystemExit("duplicate token strings")
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [added_token(i, t) for i, (t, ty) in enumerate(zip(tokens, types)) if ty == CONTROL],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", **byte_level},
            ],
        },
        "post_processor": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": False,
            "use_regex": True,
        },
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": list(md["tokenizer.ggml.merges"]),
        },
    }


def tokenizer_config(md):
    tokens = md["tokenizer.ggml.tokens"]
    types = md["tokenizer.ggml.token_type"]
    template = md["tokenizer.chat_template"]
    control = [(i, t) for i, (t, ty) in enumerate(zip(tokens, types)) if ty == CONTROL]
    return {
        "add_bos_token": bool(md["tokenizer.ggml.add_bos_token"]),
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, t in control
        },
        # The chat markup tokens, as the original lists them.
        "additional_special_tokens": [t for _, t in control if t in template],
        "bos_token": tokens[md["tokenizer.ggml.bos_token_id"]],
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": tokens[md["tokenizer.ggml.eos_token_id"]],
        "model_max_length": md["llama.context_length"],
        "pad_token": tokens[md["tokenizer.ggml.padding_token_id"]],
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": tokens[md["tokenizer.ggml.unknown_token_id"]],
        "vocab_size": len(tokens),
    }


def write_hf_dir(d, md, tensors, st_dtype, torch_dtype, expected):
    d.mkdir(parents=True, exist_ok=True)
    write_safetensors(d / "model.safetensors", tensors)
    validate_safetensors(d / "model.safetensors", expected, st_dtype)
    dump_json(d / "config.json", hf_config(md, torch_dtype), sort_keys=True)
    dump_json(d / "generation_config.json", generation_config(md), sort_keys=True)
    dump_json(d / "tokenizer.json", tokenizer_json(md), sort_keys=False)
    dump_json(d / "tokenizer_config.json", tokenizer_config(md), sort_keys=True)


# ---------------------------------------------------------------- main


def main():
    update = sys.argv[1:] == ["--update-manifest"]
    if sys.argv[1:] and not update:
        raise SystemExit(f"usage: {sys.argv[0]} [--update-manifest]")
    t0 = time.monotonic()
    source_sha = sha256(SOURCE)
    manifest = None if update else json.loads(MANIFEST.read_text())
    if manifest is not None and manifest["source_sha256"] != source_sha:
        raise SystemExit(f"{SOURCE.name} is not the file the manifest was made from")

    reader = gguf.GGUFReader(SOURCE)
    keys = [
        "general.architecture",
        "llama.embedding_length",
        "llama.attention.head_count",
        "llama.attention.head_count_kv",
        "llama.block_count",
        "llama.feed_forward_length",
        "llama.context_length",
        "llama.rope.freq_base",
        "llama.rope.dimension_count",
        "llama.attention.layer_norm_rms_epsilon",
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.padding_token_id",
        "tokenizer.ggml.add_bos_token",
        "tokenizer.chat_template",
    ]
    md = {k: field(reader, k) for k in keys}
    missing = [k for k, v in md.items() if v is None]
    if missing:
        raise SystemExit(f"{SOURCE.name} lacks {missing}")
    arch = md["general.architecture"]
    n_head = md["llama.attention.head_count"]
    n_kv_head = md["llama.attention.head_count_kv"]
    n_layers = md["llama.block_count"]
    names = [t.name for t in reader.tensors]
    if "output.weight" in names:
        raise SystemExit("expected tied embeddings (no output.weight)")

    # Dequantized f32 values, then what each output stores.
    deq = {t.name: gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False) for t in reader.tensors}
    for t in reader.tensors:
        if deq[t.name].shape != tuple(reversed([int(x) for x in t.shape])):
            raise SystemExit(f"{t.name}: dequantized shape {deq[t.name].shape}")
    f16 = {n: (a.astype(np.float16) if a.ndim == 2 else a) for n, a in deq.items()}
    for n, a in f16.items():
        if a.ndim == 1 and not np.array_equal(a.astype(np.float16).astype(np.float32), a):
            raise SystemExit(f"{n} is not exactly representable in f16")
    self_test_permute(f16, n_head, n_kv_head, n_layers)
    t_deq = time.monotonic()

    OUT.mkdir(parents=True, exist_ok=True)
    write_gguf(OUT / F16_GGUF, reader, arch, FILE_TYPE_F16, [(n, f16[n], None) for n in names])

    q8 = [
        (n, gguf.quants.quantize(f16[n].astype(np.float32), QT.Q8_0), QT.Q8_0)
        if f16[n].ndim == 2
        else (n, f16[n], None)
        for n in names
    ]
    write_gguf(OUT / Q8_0_GGUF, reader, arch, FILE_TYPE_Q8_0, q8)
    del q8
    t_gguf = time.monotonic()

    # The directories: every tensor (norms included) in the directory's dtype.
    hf16 = hf_tensors({n: a.astype(np.float16) for n, a in f16.items()}, n_head, n_kv_head)
    write_hf_dir(
        OUT / F16_DIR,
        md,
        {n: ("F16", a.shape, a.astype("<f2").tobytes()) for n, a in hf16.items()},
        "F16",
        "float16",
        {n: a.astype(np.float32) for n, a in hf16.items()},
    )
    del hf16
    hf32 = hf_tensors(deq, n_head, n_kv_head)
    bf16 = {
        n: ("BF16", a.shape, gguf.quants.quantize(a, QT.BF16).view("<u2").tobytes())
        for n, a in hf32.items()
    }
    write_hf_dir(OUT / BF16_DIR, md, bf16, "BF16", "bfloat16", hf32)
    del bf16, hf32
    t_hf = time.monotonic()

    files = {}
    for rel in OUTPUTS:
        p = OUT / rel
        files[rel] = {"size": p.stat().st_size, "sha256": sha256(p)}
    if update:
        MANIFEST.write_text(
            json.dumps(
                {
                    "made_by": "scripts/make-hf-smollm2.sh (scripts/export_hf_smollm2.py)",
                    "source": f"models/{SOURCE.name}",
                    "source_sha256": source_sha,
                    "dir": "models/hf",
                    "files": files,
                },
                indent=1,
            )
            + "\n"
        )
        print(f"wrote {MANIFEST.relative_to(ROOT)}")
    else:
        bad = [rel for rel in OUTPUTS if manifest["files"].get(rel) != files[rel]]
        if bad or set(manifest["files"]) != set(OUTPUTS):
            for rel in bad:
                print(f"{rel}: {files[rel]}, manifest: {manifest['files'].get(rel)}", file=sys.stderr)
            raise SystemExit(
                "the outputs differ from executor/tests/fixtures/hf_smollm2.json "
                "(after a deliberate change: scripts/export_hf_smollm2.py --update-manifest)"
            )
    print(
        f"dequantized in {t_deq - t0:.1f} s, GGUF files in {t_gguf - t_deq:.1f} s, "
        f"directories in {t_hf - t_gguf:.1f} s, checked in {time.monotonic() - t_hf:.1f} s"
    )


if __name__ == "__main__":
    main()
