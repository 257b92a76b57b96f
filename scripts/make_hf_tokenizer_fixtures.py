#!/usr/bin/env python3
"""Make executor/tests/fixtures/hf_tokenizers/<vocab>/: a Hugging Face
`tokenizer.json` and `tokenizer_config.json` per llama.cpp test vocabulary, and
`ids.json`, the ids and decodes the Python `tokenizers` package gives for every
input of llama.cpp's tokenizer test strings.

The Rust test `executor/tests/tokenizer/hf_json.rs` loads each pair of files with
`ModelTokenizer::from_hf_files` and checks that it encodes and decodes exactly as
`tokenizers` did here.

Setup (once, in a throwaway virtualenv; nothing is fetched from a model hub):

    scripts/fetch-llama-cpp-data.sh
    python3 -m venv /tmp/hftokfix && /tmp/hftokfix/bin/pip install \
        'transformers==4.57.6' 'tokenizers==0.22.2' 'gguf==0.19.0' \
        'sentencepiece==0.2.3' 'protobuf==7.36.2' 'numpy==2.4.6'
    HF_HUB_OFFLINE=1 /tmp/hftokfix/bin/python scripts/make_hf_tokenizer_fixtures.py

The fixtures were made with exactly those versions (Python 3.11); each ids.json
records the transformers and tokenizers versions it was made with. The script
takes about four minutes: transformers rebuilds the SentencePiece merges of
llama-spm and phi-3 token by token.

Where the files come from: the vocabularies `models/llama.cpp/ggml-vocab-{llama-spm,
llama-bpe,qwen2,phi-3}.gguf` (llama.cpp's own tokenizer tests, fetched by
scripts/fetch-llama-cpp-data.sh) are converted by transformers' GGUF tokenizer
loader (`AutoTokenizer.from_pretrained(dir, gguf_file=...)`) into a fast tokenizer
and written with `save_pretrained`; only tokenizer.json and tokenizer_config.json
are kept. The test strings are the `.inp` files beside the vocabularies, split on
the line `__ggml_vocab_test__` as llama.cpp's test-tokenizer-0 (and our
llama_cpp_vocab.rs) reads them. Each string is encoded by
`tokenizers.Tokenizer.from_file` on the written tokenizer.json, with
`add_special_tokens=False` ("ids") and `add_special_tokens=True` ("ids_special"),
and each ids list is decoded with `skip_special_tokens=False` ("decoded",
"decoded_special"). `tokenizers` always matches added tokens spelled in the text,
which is stoker's `parse_special: true`.

Size: transformers pretty-prints tokenizer.json (35.8 MB for the four). The script
writes the same JSON compactly, and for the two byte-level vocabularies (llama-bpe,
qwen2) writes the merges in the older `"left right"` string form that the original
Llama 3 and Qwen2 tokenizer.json files use, instead of `["left", "right"]` pairs
(no merged piece of theirs contains a space, so the two forms are the same merges).
SentencePiece vocabularies keep the pair form, so both forms are tested. About
13.7 MB in all. The script checks that the rewritten file encodes and decodes every
string exactly as transformers' own file does, and stops if not.

What transformers 4.57.6's GGUF loader makes (the fixtures test our reading of
these files against `tokenizers`, not these tokenizers against the models):

* The llama-bpe tokenizer is GPT-2-like, not Llama 3's: a plain ByteLevel
  pre-tokenizer (GPT-2's regex, not llama-bpe's), `byte_fallback` on, and a decoder
  ending in `Strip` that drops the first leading space of a decode. Its
  tokenizer_config names `<|begin_of_text|>` as EOS.
* The phi-3 tokenizer has no normalizer and no pre-tokenizer: spaces are never
  turned into `▁`, and as a space is not in the vocabulary and there is no unknown
  token, spaces vanish from the ids.
* The llama-spm tokenizer_config names `<s>` as EOS.
* Against llama.cpp's own `.out` ids (add no BOS, parse no special tokens), the
  "ids" agree on 46 of 46 inputs for llama-spm and qwen2, 35 of 46 for llama-bpe
  and 1 of 46 for phi-3; each ids.json records its count.
"""

import hashlib
import json
import os
import pathlib
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import tokenizers  # noqa: E402
import transformers  # noqa: E402
import transformers.modeling_gguf_pytorch_utils as gguf_utils  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
VOCAB_DIR = ROOT / "models" / "llama.cpp"
OUT_DIR = ROOT / "executor" / "tests" / "fixtures" / "hf_tokenizers"
VOCABS = ["llama-spm", "llama-bpe", "qwen2", "phi-3"]
# Byte-level vocabularies, whose merges are written as "left right" strings.
STRING_MERGES = {"llama-bpe", "qwen2"}
SEPARATOR = "\n__ggml_vocab_test__\n"
# The committed fixtures should stay below this many bytes in all.
BUDGET = 15 * 1000 * 1000


def read_inputs(path):
    """The inputs of an `.inp` file, split exactly as llama_cpp_vocab.rs splits them."""
    rest = path.read_bytes().decode("utf-8")
    inputs = []
    while rest:
        i = rest.find(SEPARATOR)
        if i < 0:
            inputs.append(rest)
            break
        inputs.append(rest[:i])
        rest = rest[i + len(SEPARATOR) :]
    return inputs


def read_expected(path):
    """llama.cpp's reference ids (`.out`: one line of ids per input)."""
    return [[int(t) for t in line.split()] for line in path.read_text().splitlines()]


def convert(gguf, dest):
    """Convert `gguf` with transformers' GGUF loader and save_pretrained into `dest`."""
    # The tokenizer path of load_gguf_checkpoint never uses torch; only the gate does.
    gguf_utils.is_torch_available = lambda: True
    with tempfile.TemporaryDirectory() as tmp:
        link = pathlib.Path(tmp) / gguf.name
        link.symlink_to(gguf.resolve())
        tok = transformers.AutoTokenizer.from_pretrained(tmp, gguf_file=gguf.name)
    if not tok.is_fast:
        sys.exit(f"{gguf.name}: transformers made a slow tokenizer")
    tok.save_pretrained(dest)


def compact(tokenizer_json, string_merges):
    """tokenizer.json written compactly, merges optionally as "left right" strings."""
    doc = json.loads(tokenizer_json)
    merges = doc["model"].get("merges")
    if string_merges and merges and isinstance(merges[0], list):
        if any(" " in part for pair in merges for part in pair):
            sys.exit("a merged piece contains a space; cannot write string merges")
        doc["model"]["merges"] = [f"{a} {b}" for a, b in merges]
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n"


def reference(tok, text):
    ids = tok.encode(text, add_special_tokens=False).ids
    ids_special = tok.encode(text, add_special_tokens=True).ids
    return {
        "text": text,
        "ids": ids,
        "ids_special": ids_special,
        "decoded": tok.decode(ids, skip_special_tokens=False),
        "decoded_special": tok.decode(ids_special, skip_special_tokens=False),
    }


def make(vocab, tmp):
    gguf = VOCAB_DIR / f"ggml-vocab-{vocab}.gguf"
    inp = pathlib.Path(f"{gguf}.inp")
    out = pathlib.Path(f"{gguf}.out")
    saved = tmp / vocab
    convert(gguf, saved)

    dest = OUT_DIR / vocab
    dest.mkdir(parents=True, exist_ok=True)
    original = (saved / "tokenizer.json").read_text(encoding="utf-8")
    rewritten = compact(original, vocab in STRING_MERGES)
    (dest / "tokenizer.json").write_text(rewritten, encoding="utf-8")
    (dest / "tokenizer_config.json").write_bytes((saved / "tokenizer_config.json").read_bytes())

    texts = read_inputs(inp)
    tok = tokenizers.Tokenizer.from_file(str(dest / "tokenizer.json"))
    theirs = tokenizers.Tokenizer.from_file(str(saved / "tokenizer.json"))
    cases = [reference(tok, t) for t in texts]
    for case in cases:
        if case != reference(theirs, case["text"]):
            sys.exit(f"{vocab}: the rewritten tokenizer.json differs on {case['text']!r}")

    expected = read_expected(out)
    if len(expected) != len(texts):
        sys.exit(f"{inp.name}: {len(texts)} inputs but {len(expected)} lines of ids")
    agree = sum(c["ids"] == e for c, e in zip(cases, expected))

    doc = {
        "generator": "scripts/make_hf_tokenizer_fixtures.py",
        "vocabulary": vocab,
        "source": f"models/llama.cpp/{gguf.name}",
        "source_sha256": hashlib.sha256(gguf.read_bytes()).hexdigest(),
        "inputs": f"models/llama.cpp/{inp.name}",
        "reference": "tokenizers.Tokenizer.from_file(tokenizer.json).encode(text, "
        "add_special_tokens=False|True), decode(ids, skip_special_tokens=False)",
        "tokenizers_version": tokenizers.__version__,
        "transformers_version": transformers.__version__,
        "agrees_with_llama_cpp_out": f"{agree} of {len(cases)} inputs (ids vs the .out file)",
        "cases": None,
    }
    head = json.dumps(doc, ensure_ascii=False, indent=1)
    lines = ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases)
    text = head.replace('"cases": null', '"cases": [\n' + lines + "\n ]")
    (dest / "ids.json").write_text(text + "\n", encoding="utf-8")
    size = sum(p.stat().st_size for p in dest.iterdir())
    print(f"{vocab}: {len(cases)} cases, {agree} agree with llama.cpp's .out, {size} bytes")
    return size


def main():
    missing = [v for v in VOCABS if not (VOCAB_DIR / f"ggml-vocab-{v}.gguf.inp").exists()]
    if missing:
        sys.exit(f"no llama.cpp vocabulary for {missing}: run scripts/fetch-llama-cpp-data.sh")
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for vocab in VOCABS:
            total += make(vocab, pathlib.Path(tmp))
    print(f"wrote {OUT_DIR.relative_to(ROOT)}: {total} bytes in all")
    if total > BUDGET:
        sys.exit(f"{total} bytes is over the {BUDGET} byte budget; drop a vocabulary")


if __name__ == "__main__":
    main()
