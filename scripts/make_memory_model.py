"""Writes a Llama-3.2-1B-shaped GGUF with random Q8_0 weights and SmolLM2's
tokenizer, to measure how much a process holds beyond the weights on a model of
a size people serve (the engine bench prints it):

    .venv/bin/python scripts/make_memory_model.py models/SmolLM2-135M-Instruct.Q4_1.gguf OUT.gguf
    STOKER_MODEL=$PWD/OUT.gguf STOKER_BENCH_SECTIONS=none cargo bench -p stoker-executor --bench engine

The shape is Llama 3.2 1B's (hidden 2048, 16 layers, 32 heads, 8 KV heads,
feed-forward 8192) with SmolLM2's 49,152-token vocabulary: 1.07 billion
parameters, a 1.14 GB file. Deterministic (fixed seed). Not used by the tests.
"""

import sys

import gguf
import numpy as np

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 2048, 16, 32, 8, 8192
HEAD_DIM = HIDDEN // HEADS


def main() -> None:
    src_path, out_path = sys.argv[1], sys.argv[2]
    src = gguf.GGUFReader(src_path)
    w = gguf.GGUFWriter(out_path, "llama")
    w.add_name("memory-probe-1b")
    w.add_context_length(8192)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    # The tokenizer and chat template, copied field by field.
    vocab = 0
    for name, field in src.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == gguf.GGUFValueType.STRING:
                values = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                values = [field.parts[i].tolist()[0] for i in field.data]
            w.add_array(name, values)
            if name == "tokenizer.ggml.tokens":
                vocab = len(values)
        elif vtype == gguf.GGUFValueType.STRING:
            w.add_string(name, bytes(field.parts[field.data[0]]).decode("utf-8"))
        else:
            value = field.parts[field.data[0]].tolist()[0]
            w.add_key_value(name, value, vtype)
    rng = np.random.default_rng(1)

    def matrix(name: str, rows: int, cols: int) -> None:
        x = rng.standard_normal((rows, cols), dtype=np.float32) * (1.0 / np.sqrt(cols))
        q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def norm(name: str) -> None:
        w.add_tensor(name, np.ones(HIDDEN, dtype=np.float32))

    matrix("token_embd.weight", vocab, HIDDEN)
    norm("output_norm.weight")
    kv = KV_HEADS * HEAD_DIM
    for i in range(LAYERS):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight")
        norm(p + "ffn_norm.weight")
        matrix(p + "attn_q.weight", HIDDEN, HIDDEN)
        matrix(p + "attn_k.weight", kv, HIDDEN)
        matrix(p + "attn_v.weight", kv, HIDDEN)
        matrix(p + "attn_output.weight", HIDDEN, HIDDEN)
        matrix(p + "ffn_gate.weight", FFN, HIDDEN)
        matrix(p + "ffn_up.weight", FFN, HIDDEN)
        matrix(p + "ffn_down.weight", HIDDEN, FFN)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
