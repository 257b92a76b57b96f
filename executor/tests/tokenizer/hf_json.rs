//! Hugging Face `tokenizer.json` files read by [`ModelTokenizer::from_hf_files`]
//! against the Python `tokenizers` package. The fixtures under
//! `tests/fixtures/hf_tokenizers/<vocabulary>/` are llama.cpp's test vocabularies
//! converted to `tokenizer.json` + `tokenizer_config.json` by transformers' GGUF
//! loader, and `ids.json`, the ids and decodes `tokenizers` gave for every input of
//! llama.cpp's tokenizer tests (`scripts/make_hf_tokenizer_fixtures.py`, whose
//! docstring says how the files were made and how they differ from the models'
//! own tokenizers). Every id list and every decode must be identical. Plus
//! hostile input: files that are not a tokenizer are an error, never a panic.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;

use stoker_executor::tokenizer::{EncodeOptions, ModelTokenizer, TokenizerError};

/// The command that makes the fixtures, for a missing-fixture failure.
const MAKE: &str = "scripts/fetch-llama-cpp-data.sh, then \
    HF_HUB_OFFLINE=1 python scripts/make_hf_tokenizer_fixtures.py \
    (in the virtualenv its docstring sets up)";

#[derive(serde::Deserialize)]
struct Fixture {
    tokenizers_version: String,
    transformers_version: String,
    cases: Vec<Case>,
}

#[derive(serde::Deserialize)]
struct Case {
    text: String,
    /// `encode(text, add_special_tokens=False)`.
    ids: Vec<u32>,
    /// `encode(text, add_special_tokens=True)`.
    ids_special: Vec<u32>,
    /// `decode(ids, skip_special_tokens=False)`.
    decoded: String,
    /// `decode(ids_special, skip_special_tokens=False)`.
    decoded_special: String,
}

fn fixture_dir(vocab: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf_tokenizers")
        .join(vocab)
}

/// A fixture file's bytes; a missing one fails with the command that makes it.
fn read(vocab: &str, file: &str) -> Vec<u8> {
    let path = fixture_dir(vocab).join(file);
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; make the fixtures with {MAKE}",
            path.strip_prefix(env!("CARGO_MANIFEST_DIR"))
                .unwrap_or(&path)
                .display()
        )
    })
}

fn load(vocab: &str) -> ModelTokenizer {
    let json = read(vocab, "tokenizer.json");
    let config = read(vocab, "tokenizer_config.json");
    ModelTokenizer::from_hf_files(&json, Some(&config))
        .unwrap_or_else(|e| panic!("{vocab}: from_hf_files failed: {e}"))
}

/// Encodes and decodes every case of `vocab` and fails listing every difference.
fn check(vocab: &str) {
    let fixture: Fixture = serde_json::from_slice(&read(vocab, "ids.json"))
        .unwrap_or_else(|e| panic!("{vocab}/ids.json: {e}; remake it with {MAKE}"));
    assert!(!fixture.cases.is_empty(), "{vocab}/ids.json has no cases");
    let tok = load(vocab);
    let plain = EncodeOptions {
        add_special: false,
        parse_special: true,
    };
    let special = EncodeOptions {
        add_special: true,
        parse_special: true,
    };
    let mut failures = Vec::new();
    for (i, case) in fixture.cases.iter().enumerate() {
        let text = &case.text;
        for (what, opts, expected) in [
            ("ids (add_special: false)", plain, &case.ids),
            (
                "ids_special (add_special: true)",
                special,
                &case.ids_special,
            ),
        ] {
            match tok.encode_with(text, opts) {
                Ok(got) if &got == expected => {}
                Ok(got) => failures.push(format!(
                    "{vocab} case {i} {text:?}: {what}\n    tokenizers {expected:?}\n    stoker     {got:?}"
                )),
                Err(e) => failures.push(format!("{vocab} case {i} {text:?}: {what}: error {e}")),
            }
        }
        for (what, ids, expected) in [
            ("decode(ids, false)", &case.ids, &case.decoded),
            (
                "decode(ids_special, false)",
                &case.ids_special,
                &case.decoded_special,
            ),
        ] {
            match tok.decode(ids, false) {
                Ok(got) if &got == expected => {}
                Ok(got) => failures.push(format!(
                    "{vocab} case {i} {text:?}: {what} of {ids:?}\n    tokenizers {expected:?}\n    stoker     {got:?}"
                )),
                Err(e) => failures.push(format!(
                    "{vocab} case {i} {text:?}: {what} of {ids:?}: error {e}"
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{vocab}: {} differences from tokenizers {} (files by transformers {}) over {} cases:\n{}",
        failures.len(),
        fixture.tokenizers_version,
        fixture.transformers_version,
        fixture.cases.len(),
        failures.join("\n")
    );
}

#[test]
fn hf_llama_spm_matches_tokenizers() {
    check("llama-spm");
}

#[test]
fn hf_llama_bpe_matches_tokenizers() {
    check("llama-bpe");
}

#[test]
fn hf_qwen2_matches_tokenizers() {
    check("qwen2");
}

#[test]
fn hf_phi3_matches_tokenizers() {
    check("phi-3");
}

/// `from_hf_files` on hostile bytes: must return an error, not panic or succeed.
fn refused(what: &str, json: &[u8], config: Option<&[u8]>) -> TokenizerError {
    match catch_unwind(AssertUnwindSafe(|| {
        ModelTokenizer::from_hf_files(json, config)
    })) {
        Err(_) => panic!("from_hf_files panicked on {what}"),
        Ok(Ok(tok)) => panic!("from_hf_files accepted {what}: {tok:?}"),
        Ok(Err(e)) => e,
    }
}

/// A hostile `tokenizer.json`, refused both without a config and with a valid
/// one (llama-spm's), so that a missing config is not the only reason.
fn refused_json(what: &str, json: &[u8]) {
    refused(what, json, None);
    let config = read("llama-spm", "tokenizer_config.json");
    refused(&format!("{what} with a valid config"), json, Some(&config));
}

#[test]
fn hf_tokenizer_json_that_is_not_json_is_an_error() {
    refused_json("`not json`", b"not json");
    refused_json("empty bytes", b"");
    refused_json("invalid UTF-8", b"{\"model\": \"\xff\xfe\"}");
}

#[test]
fn hf_json_that_is_not_a_tokenizer_is_an_error() {
    refused_json(
        "a JSON object that is not a tokenizer",
        br#"{"hello": "world", "version": [1, 2, 3]}"#,
    );
    refused_json(
        "a tokenizer whose model is a number",
        br#"{"version": "1.0", "model": 5}"#,
    );
    refused_json("a JSON array", b"[1, 2, 3]");
    refused_json("a JSON string", br#""tokenizer""#);
    refused_json("JSON null", b"null");
}

#[test]
fn hf_empty_object_is_an_error() {
    refused_json("`{}`", b"{}");
    refused("`{}` with an empty config", b"{}", Some(b"{}"));
}

#[test]
fn hf_truncated_tokenizer_json_is_an_error() {
    let json = read("llama-spm", "tokenizer.json");
    refused_json(
        "the first half of a tokenizer.json",
        &json[..json.len() / 2],
    );
}

#[test]
fn hf_tokenizer_config_that_is_not_json_is_an_error() {
    let json = read("llama-spm", "tokenizer.json");
    // The same tokenizer.json loads with its own config, so the config is what fails.
    load("llama-spm");
    refused(
        "a tokenizer_config.json of `not json`",
        &json,
        Some(b"not json"),
    );
    refused("an empty tokenizer_config.json", &json, Some(b""));
    refused(
        "a truncated tokenizer_config.json",
        &json,
        Some(br#"{"add_bos_token": tr"#),
    );
}
