//! llama.cpp's own tokenizer test vectors: every `ggml-vocab-*.gguf` of
//! `models/llama.cpp/` (fetched by `scripts/fetch-llama-cpp-data.sh`) either builds
//! and reproduces each of its `.gguf.out` id lists exactly, or is on the refused
//! list below with the reason, and is then refused with a typed error. The vectors
//! come from llama.cpp's `tests/test-tokenizer-0`, which tokenizes with
//! `add_special = false` and `parse_special = false`; their expected ids were made
//! with the models' Hugging Face tokenizers, so they are the reference, not us.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::Value;
use stoker_executor::tokenizer::{
    EncodeOptions, ModelTokenizer, TokenizerError, read_gguf_metadata,
};

/// Whether an error is the one a refused vocabulary must get.
type ExpectedError = fn(&TokenizerError) -> bool;

/// Vocabularies refused on purpose, why, and the error that says so.
const REFUSED: &[(&str, &str, ExpectedError)] = &[
    (
        "bert-bge",
        "WordPiece (`bert`) is not a BPE family",
        |e| matches!(e, TokenizerError::UnsupportedModel(m) if m == "bert"),
    ),
    (
        "nomic-bert-moe",
        "Unigram (`t5`, with a precompiled normalizer) is not a BPE family",
        |e| matches!(e, TokenizerError::UnsupportedModel(m) if m == "t5"),
    ),
    (
        "aquila",
        "byte-level BPE without `tokenizer.ggml.pre` (llama.cpp guesses and warns that quality degrades); no test vectors either",
        |e| matches!(e, TokenizerError::MissingKey("tokenizer.ggml.pre")),
    ),
    (
        "gpt-neox",
        "byte-level BPE without `tokenizer.ggml.pre`; no test vectors either",
        |e| matches!(e, TokenizerError::MissingKey("tokenizer.ggml.pre")),
    ),
];

/// Vocabularies that build but have no `.inp`/`.out` vectors to check against.
const WITHOUT_VECTORS: &[&str] = &["baichuan"];

/// The folder of llama.cpp's vocabularies; a missing folder fails with the fix.
fn vocab_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/llama.cpp");
    assert!(
        dir.is_dir(),
        "{} not found: run scripts/fetch-llama-cpp-data.sh",
        dir.display()
    );
    dir
}

/// `(name, path)` of every `ggml-vocab-NAME.gguf`, sorted by name.
fn vocabularies() -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(vocab_dir())
        .unwrap()
        .filter_map(|e| {
            let path = e.unwrap().path();
            let file = path.file_name()?.to_str()?.to_owned();
            let name = file.strip_prefix("ggml-vocab-")?.strip_suffix(".gguf")?;
            Some((name.to_owned(), path))
        })
        .collect();
    out.sort();
    out
}

/// The test cases of a vocabulary, read as `test-tokenizer-0.cpp` reads them:
/// inputs separated by a `__ggml_vocab_test__` line, one line of ids per input.
fn read_cases(path: &Path) -> Option<Vec<(String, Vec<u32>)>> {
    let inp = PathBuf::from(format!("{}.inp", path.display()));
    let out = PathBuf::from(format!("{}.out", path.display()));
    if !inp.exists() && !out.exists() {
        return None;
    }
    let raw = String::from_utf8(std::fs::read(&inp).unwrap()).expect("UTF-8 inputs");
    let sep = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut rest = raw.as_str();
    while !rest.is_empty() {
        match rest.find(sep) {
            Some(i) => {
                inputs.push(rest[..i].to_owned());
                rest = &rest[i + sep.len()..];
            }
            None => {
                inputs.push(rest.to_owned());
                rest = "";
            }
        }
    }
    let outputs: Vec<Vec<u32>> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect())
        .collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "{}: inputs and outputs disagree in number",
        inp.display()
    );
    Some(inputs.into_iter().zip(outputs).collect())
}

fn metadata(path: &Path) -> HashMap<String, Value> {
    read_gguf_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The pieces of `ids`, for a readable mismatch message.
fn pieces(tok: &ModelTokenizer, ids: &[u32]) -> Vec<String> {
    ids.iter()
        .map(|&id| format!("{id}:{:?}", tok.id_to_token(id).unwrap_or_default()))
        .collect()
}

#[test]
fn every_llama_cpp_vocabulary_passes_its_vectors_or_is_refused() {
    let vocabs = vocabularies();
    assert!(
        !vocabs.is_empty(),
        "no ggml-vocab-*.gguf in {}: run scripts/fetch-llama-cpp-data.sh",
        vocab_dir().display()
    );
    for (name, _, _) in REFUSED {
        assert!(
            vocabs.iter().any(|(n, _)| n == name),
            "refused list names {name}, which is not in the folder"
        );
    }
    let plain = EncodeOptions {
        add_special: false,
        parse_special: false,
    };
    let mut failures = Vec::new();
    let mut passed = Vec::new();
    for (name, path) in &vocabs {
        let md = metadata(path);
        if let Some((_, reason, check)) = REFUSED.iter().find(|(n, _, _)| n == name) {
            match ModelTokenizer::from_gguf_metadata(&md) {
                Ok(_) => failures.push(format!("{name}: built, but is refused ({reason})")),
                Err(e) if check(&e) => {}
                Err(e) => failures.push(format!("{name}: refused with an unexpected error: {e}")),
            }
            continue;
        }
        let tok = match ModelTokenizer::from_gguf_metadata(&md) {
            Ok(tok) => tok,
            Err(e) => {
                failures.push(format!("{name}: cannot build: {e}"));
                continue;
            }
        };
        let Some(cases) = read_cases(path) else {
            if !WITHOUT_VECTORS.contains(&name.as_str()) {
                failures.push(format!("{name}: builds but has no .inp/.out vectors"));
            }
            continue;
        };
        let mut bad = 0;
        let mut first = None;
        for (text, expected) in &cases {
            let got = tok.encode_with(text, plain).unwrap();
            if &got != expected {
                bad += 1;
                let at = got.iter().zip(expected).take_while(|(a, b)| a == b).count();
                first.get_or_insert_with(|| {
                    format!(
                        "input {text:?}: first difference at index {at}\n    expected {:?}\n    got      {:?}",
                        pieces(&tok, &expected[at..expected.len().min(at + 6)]),
                        pieces(&tok, &got[at..got.len().min(at + 6)]),
                    )
                });
            }
        }
        match first {
            None => passed.push(format!("{name} ({} inputs)", cases.len())),
            Some(first) => failures.push(format!(
                "{name}: {bad} of {} inputs differ; {first}",
                cases.len()
            )),
        }
    }
    eprintln!("llama.cpp vectors reproduced: {}", passed.join(", "));
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Llama 2's SentencePiece vocabulary (llama.cpp's `ggml-vocab-llama-spm.gguf`),
/// built once: byte fallback and `▁` spaces for the streaming tests.
pub fn llama_spm() -> &'static ModelTokenizer {
    static TOK: std::sync::OnceLock<ModelTokenizer> = std::sync::OnceLock::new();
    TOK.get_or_init(|| {
        let path = vocab_dir().join("ggml-vocab-llama-spm.gguf");
        ModelTokenizer::from_gguf_metadata(&metadata(&path)).expect("build llama-spm")
    })
}
