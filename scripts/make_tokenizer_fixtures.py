#!/usr/bin/env python3
"""Make executor/tests/fixtures/tokenizer_ids.json: token ids of varied strings as
computed by an implementation independent of ours, the Python `transformers`
package's GGUF tokenizer loader, reading the same GGUF file offline.

The Rust test `executor/tests/tokenizer.rs` reads the JSON and checks that
`ModelTokenizer::encode` gives the same ids.

Setup (once, in a throwaway virtualenv; nothing is fetched from a model hub):

    python3 -m venv /tmp/tokfix && /tmp/tokfix/bin/pip install \
        'transformers<5' gguf tokenizers sentencepiece protobuf numpy
    HF_HUB_OFFLINE=1 /tmp/tokfix/bin/python scripts/make_tokenizer_fixtures.py

The model is `$STOKER_MODEL`, else models/SmolLM2-135M-Instruct.Q4_1.gguf (see
scripts/fetch-model.sh).

Notes on the reference, checked against SmolLM2-135M-Instruct.Q4_1.gguf:

* transformers 4.x gates GGUF loading on torch being importable although the
  tokenizer path (`return_tensors=False`) never touches torch; the script lifts that
  gate instead of installing torch. transformers 5.x imports torch in its GGUF
  reader unconditionally, hence the `<5` pin.
* transformers' loader does NOT build the tokenizer the GGUF describes: it ignores
  `tokenizer.ggml.pre = smollm` (no individual-digit split, plain ByteLevel), sets
  `byte_fallback` and `<|endoftext|>` as unk, and adds BOS (`<|im_start|>`, id 1)
  although `tokenizer.ggml.add_bos_token` is false. The script encodes with
  `add_special_tokens=False` to drop the spurious BOS. The other differences do not
  change ids where the vocabulary has no token spanning a numeric character and
  its neighbour. The script checks that per string by also encoding with the
  pre-tokenizer the GGUF names (tokenizers' Digits(individual_digits) + ByteLevel,
  as in the original tokenizer.json and llama.cpp's smollm regex `\\p{N}` first).
  Where the two disagree, the case keeps transformers' ids under "ids" and adds the
  GGUF-faithful ones under "gguf_faithful_ids" with a "divergence" reason. On
  SmolLM2 this happens only for non-ASCII numerics (¼ ½ ² ³ ① Ⅻ ...): transformers
  merges " ½" into one token although smollm isolates every \\p{N} character.
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
from tokenizers import pre_tokenizers  # noqa: E402

import gguf  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
MODEL = pathlib.Path(os.environ.get("STOKER_MODEL", ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
OUT = ROOT / "executor" / "tests" / "fixtures" / "tokenizer_ids.json"

STRINGS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "Привет, мир! Как дела?",
    "你好，世界。今天天气很好。",
    "こんにちは世界、カタカナ",
    "😀👍🏽 family: 👨\u200d👩\u200d👧\u200d👦 flag: 🇺🇦",
    "tabs\tand\r\nCRLF  runs   of    spaces\u00a0nbsp\u200bzwsp a\u200db",
    "3.14159 and 1,000,000 and 2024-05-09 and 0x1F and v12",
    "fn main() {\n    println!(\"{}\", 42);\n}\n",
    "def f(x):\n\treturn x**2  # square\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><repo_name>stoker<file_sep>src/main.rs",
    "Ünïcödé àccents: café, naïve, Straße, Øresund",
    "¼ ½ x² y³ ① Ⅻ ٣ ४ 𝟗",
    "   leading spaces and trailing   ",
    "",
    "Mixed: English, Русский, العربية, עברית, हिन्दी, 한국어, Ελληνικά",
    "don't won't I'm they're we've she'll he'd DON'T",
    "URL: https://example.com/path?q=1&r=2#frag <a href=\"x\">link</a>",
    "\n\n\n \n \n",
    "<|im_start| almost special <|im_start|><|im_start|>",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;",
]


def load_transformers_tokenizer():
    # The tokenizer path of load_gguf_checkpoint never uses torch; only the gate does.
    gguf_utils.is_torch_available = lambda: True
    with tempfile.TemporaryDirectory() as tmp:
        link = pathlib.Path(tmp) / MODEL.name
        link.symlink_to(MODEL.resolve())
        return transformers.AutoTokenizer.from_pretrained(tmp, gguf_file=MODEL.name)


def gguf_faithful(tok):
    """The same vocabulary and merges with the pre-tokenizer the GGUF names."""
    t = tokenizers.Tokenizer.from_str(tok.backend_tokenizer.to_str())
    t.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    return t


def main():
    if not MODEL.exists():
        sys.exit(f"model not found at {MODEL}; run scripts/fetch-model.sh")
    pre = gguf.GGUFReader(str(MODEL)).fields["tokenizer.ggml.pre"].contents()
    assert pre == "smollm", f"this script knows the smollm pre-tokenizer only, got {pre!r}"

    tok = load_transformers_tokenizer()
    faithful = gguf_faithful(tok)

    hello = tok.encode("Hello, world!", add_special_tokens=False)
    with_bos = tok.encode("Hello, world!")
    cases, divergences = [], 0
    for text in STRINGS:
        ids = tok.encode(text, add_special_tokens=False)
        ref = faithful.encode(text, add_special_tokens=False).ids
        case = {"text": text, "ids": ids}
        if ids != ref:
            divergences += 1
            case["gguf_faithful_ids"] = ref
            case["divergence"] = (
                "transformers' GGUF loader ignores tokenizer.ggml.pre=smollm and does not "
                "isolate numeric characters; the GGUF-faithful ids are expected"
            )
            print("divergence:", json.dumps(case, ensure_ascii=False))
        cases.append(case)

    sha = hashlib.sha256(MODEL.read_bytes()).hexdigest()
    doc = {
        "generator": "scripts/make_tokenizer_fixtures.py",
        "reference": "transformers AutoTokenizer.from_pretrained(dir, gguf_file=...), "
        "encode(text, add_special_tokens=False)",
        "versions": {
            "python": sys.version.split()[0],
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "gguf": getattr(gguf, "__version__", None) or _dist_version("gguf"),
        },
        "model": MODEL.name,
        "model_sha256": sha,
        # transformers' default encode adds a BOS that the GGUF says not to add.
        "transformers_hello_world": None,
        "cases": None,
    }
    head = json.dumps(doc, ensure_ascii=False, indent=1)
    lines = ",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases)
    hw = json.dumps({"add_special_tokens=False": hello, "default": with_bos})
    head = head.replace('"transformers_hello_world": null', '"transformers_hello_world": ' + hw)
    text = head.replace('"cases": null', '"cases": [\n' + lines + "\n ]")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(cases)} cases, {divergences} divergences")


def _dist_version(name):
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
