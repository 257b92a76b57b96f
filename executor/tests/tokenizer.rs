//! Tests of the tokenizer, the chat template and the incremental detokenizer
//! against the real SmolLM2 GGUF file, plus hostile-input tests on hand-made
//! metadata, llama.cpp's real chat templates against jinja2's renders, and
//! Hugging Face `tokenizer.json` files against the Python `tokenizers` package. One
//! test binary holds all the modules so the release profile links once.

#[path = "tokenizer/chat_template.rs"]
mod chat_template;
#[path = "tokenizer/detokenize.rs"]
mod detokenize;
#[path = "tokenizer/hf_json.rs"]
mod hf_json;
#[path = "tokenizer/llama_cpp_templates.rs"]
mod llama_cpp_templates;
#[path = "tokenizer/llama_cpp_vocab.rs"]
mod llama_cpp_vocab;
#[path = "tokenizer/llama_server_templates.rs"]
mod llama_server_templates;
#[path = "tokenizer/tool_templates.rs"]
mod tool_templates;

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

use candle_core::quantized::gguf_file::Value;
use stoker_executor::tokenizer::{
    EncodeOptions, ModelTokenizer, TokenizerError, TokenizerFamily, read_gguf_metadata,
    supported_pre_tokenizers,
};
use stoker_test_support::model_path;

/// The model's GGUF metadata, read once.
pub fn metadata() -> &'static HashMap<String, Value> {
    static MD: OnceLock<HashMap<String, Value>> = OnceLock::new();
    MD.get_or_init(|| read_gguf_metadata(&model_path()).expect("read GGUF metadata"))
}

/// The model's tokenizer, built once.
pub fn tokenizer() -> &'static ModelTokenizer {
    static TOK: OnceLock<ModelTokenizer> = OnceLock::new();
    TOK.get_or_init(|| ModelTokenizer::from_gguf_metadata(metadata()).expect("build tokenizer"))
}

/// GPT-2's byte-to-character map: the byte-level alphabet spelling of `byte`.
pub fn byte_level_char(byte: u8) -> char {
    let printable = |b: u8| {
        (b'!'..=b'~').contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
    };
    if printable(byte) {
        return char::from(byte);
    }
    let n = (0..byte).filter(|&b| !printable(b)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// The id of the token that is exactly the single byte `byte`.
pub fn single_byte_token(tok: &ModelTokenizer, byte: u8) -> u32 {
    tok.token_to_id(&byte_level_char(byte).to_string())
        .unwrap_or_else(|| panic!("no single-byte token for {byte:#04x}"))
}

const ROUND_TRIP_TEXTS: &[&str] = &[
    "The quick brown fox jumps over the lazy dog.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。",
    "日本語のテキストと한국어 텍스트",
    "emoji: 😀 👍🏽 👨\u{200d}👩\u{200d}👧 🇯🇵 ❤\u{fe0f}",
    "tabs\tand\ttabs\r\nCRLF line\r\n\r\n",
    "runs     of      spaces and trailing spaces   ",
    "no\u{a0}break\u{a0}spaces, zero\u{200b}width, joiner a\u{200d}b",
    "   \n\t \u{3000}ideographic space\u{2028}line separator",
    "0123456789 3.14159 1,000,000 -42 1e-9 0xFF",
    "",
    " ",
    "a",
];

#[test]
fn hello_world_encodes_to_the_reference_ids() {
    assert_eq!(
        tokenizer().encode("Hello, world!").unwrap(),
        vec![19556, 28, 905, 17]
    );
}

#[test]
fn text_round_trips_through_encode_and_decode() {
    let tok = tokenizer();
    for text in ROUND_TRIP_TEXTS {
        let ids = tok.encode(text).unwrap();
        assert_eq!(tok.decode(&ids, false).unwrap(), *text, "ids {ids:?}");
        assert_eq!(tok.decode(&ids, true).unwrap(), *text, "ids {ids:?}");
    }
}

#[test]
fn every_digit_is_its_own_token() {
    let tok = tokenizer();
    let ids = tok.encode("x 2024 and 1234567890").unwrap();
    let digits: Vec<String> = ids
        .iter()
        .map(|&id| tok.decode(&[id], false).unwrap())
        .filter(|s| s.chars().any(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(digits.len(), 14, "{digits:?}");
    assert!(digits.iter().all(|d| d.len() == 1), "{digits:?}");
}

#[test]
fn special_token_strings_in_text_become_single_ids() {
    let tok = tokenizer();
    let ids = tok.encode("<|im_start|>user\nHi<|im_end|>\n").unwrap();
    assert_eq!(ids.first(), Some(&1));
    assert!(ids.contains(&2));
    assert_eq!(
        tok.encode("<|im_start|><|im_start|>").unwrap(),
        vec![1, 1],
        "adjacent special tokens, no space inserted"
    );
    assert_eq!(
        tok.decode(&ids, false).unwrap(),
        "<|im_start|>user\nHi<|im_end|>\n"
    );
}

#[test]
fn no_bos_and_no_prefix_space_are_added() {
    let tok = tokenizer();
    let ids = tok.encode("Hello").unwrap();
    assert_eq!(ids, vec![19556]);
    assert_ne!(Some(ids[0]), tok.bos_token_id());
}

#[test]
fn special_tokens_are_flagged_and_dropped_when_skipping() {
    let tok = tokenizer();
    assert!(tok.is_special(0) && tok.is_special(1) && tok.is_special(2) && tok.is_special(16));
    assert!(!tok.is_special(17) && !tok.is_special(19556));
    assert!(
        !tok.is_special(u32::MAX),
        "out of range is simply not special"
    );
    let ids = tok.encode("<|im_start|>assistant\nOk<|im_end|>").unwrap();
    assert_eq!(tok.decode(&ids, true).unwrap(), "assistant\nOk");
}

#[test]
fn metadata_facts_are_exposed() {
    let tok = tokenizer();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_token_id(), Some(1));
    assert_eq!(tok.eos_token_id(), 2);
    assert_eq!(tok.pad_token_id(), Some(2));
    assert_eq!(tok.unknown_token_id(), Some(0));
    assert_eq!(tok.pre_tokenizer_name(), "smollm");
    assert_eq!(tok.id_to_token(2).as_deref(), Some("<|im_end|>"));
    assert_eq!(tok.token_to_id("<|im_start|>"), Some(1));
    assert_eq!(tok.token_to_id("Hello"), Some(19556));
    assert_eq!(tok.id_to_token(49152), None);
    assert_eq!(tok.inner().get_vocab_size(true), 49152);
}

#[test]
fn stop_tokens_are_eos_and_the_end_of_turn_markers() {
    // <|endoftext|> (0) and <|im_end|> (2, also EOS).
    assert_eq!(tokenizer().stop_token_ids(), vec![0, 2]);
}

#[test]
fn tokenizer_hash_is_stable_across_loads() {
    let a = tokenizer().sha256_hex();
    let b = ModelTokenizer::from_gguf_file(model_path())
        .unwrap()
        .sha256_hex();
    assert_eq!(a, b);
    assert_eq!(a.len(), 64);
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
}

#[derive(serde::Deserialize)]
struct Fixture {
    model_sha256: String,
    versions: HashMap<String, serde_json::Value>,
    cases: Vec<FixtureCase>,
}

#[derive(serde::Deserialize)]
struct FixtureCase {
    text: String,
    ids: Vec<u32>,
    gguf_faithful_ids: Option<Vec<u32>>,
    divergence: Option<String>,
}

#[test]
fn encoding_matches_the_transformers_fixture() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer_ids.json");
    let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(fixture.cases.len() >= 12);
    assert!(fixture.versions.contains_key("transformers"));
    assert_eq!(fixture.model_sha256.len(), 64);
    let tok = tokenizer();
    for case in &fixture.cases {
        let expected = match &case.gguf_faithful_ids {
            // The only known disagreement: transformers' GGUF loader ignores the smollm
            // pre-tokenizer, which isolates every numeric character, not just 0-9.
            Some(faithful) => {
                assert!(case.divergence.is_some(), "undocumented divergence");
                assert!(
                    case.text
                        .chars()
                        .any(|c| c.is_numeric() && !c.is_ascii_digit()),
                    "divergence on a text without non-ASCII numerics: {:?}",
                    case.text
                );
                faithful
            }
            None => &case.ids,
        };
        assert_eq!(
            &tok.encode(&case.text).unwrap(),
            expected,
            "text {:?}",
            case.text
        );
    }
}

#[test]
fn decoding_an_out_of_range_id_is_a_typed_error() {
    let err = tokenizer().decode(&[19556, 49152], false).unwrap_err();
    assert!(
        matches!(
            err,
            TokenizerError::IdOutOfRange {
                id: 49152,
                vocab_size: 49152
            }
        ),
        "{err:?}"
    );
    assert!(matches!(
        tokenizer().decode(&[u32::MAX], true),
        Err(TokenizerError::IdOutOfRange { .. })
    ));
}

// ---- Hostile or malformed metadata, on a tiny hand-made vocabulary. ----

fn strings(items: &[&str]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|s| Value::String((*s).to_owned()))
            .collect(),
    )
}

fn tiny_metadata() -> HashMap<String, Value> {
    let mut md = HashMap::new();
    md.insert("tokenizer.ggml.model".into(), Value::String("gpt2".into()));
    md.insert("tokenizer.ggml.pre".into(), Value::String("gpt-2".into()));
    md.insert(
        "tokenizer.ggml.tokens".into(),
        strings(&["<eos>", "a", "b", "ab", "Ġ"]),
    );
    md.insert("tokenizer.ggml.merges".into(), strings(&["a b"]));
    md.insert(
        "tokenizer.ggml.token_type".into(),
        Value::Array(vec![
            Value::I32(3),
            Value::I32(1),
            Value::I32(1),
            Value::I32(1),
            Value::I32(1),
        ]),
    );
    md.insert("tokenizer.ggml.eos_token_id".into(), Value::U32(0));
    md
}

fn build_err(md: &HashMap<String, Value>) -> TokenizerError {
    ModelTokenizer::from_gguf_metadata(md).expect_err("metadata should be refused")
}

#[test]
fn tiny_hand_made_metadata_builds_a_working_tokenizer() {
    let tok = ModelTokenizer::from_gguf_metadata(&tiny_metadata()).unwrap();
    assert_eq!(tok.encode("ab<eos>a b").unwrap(), vec![3, 0, 1, 4, 2]);
    assert_eq!(tok.bos_token_id(), None);
    assert_eq!(tok.stop_token_ids(), vec![0]);
}

#[test]
fn metadata_without_tokens_is_a_missing_key_error() {
    let mut md = tiny_metadata();
    md.remove("tokenizer.ggml.tokens");
    assert!(matches!(
        build_err(&md),
        TokenizerError::MissingKey("tokenizer.ggml.tokens")
    ));
    let mut md = tiny_metadata();
    md.remove("tokenizer.ggml.eos_token_id");
    assert!(matches!(build_err(&md), TokenizerError::MissingKey(_)));
}

#[test]
fn merges_of_the_wrong_type_are_a_wrong_type_error() {
    let mut md = tiny_metadata();
    md.insert("tokenizer.ggml.merges".into(), Value::String("a b".into()));
    assert!(matches!(build_err(&md), TokenizerError::WrongType { .. }));
    md.insert(
        "tokenizer.ggml.merges".into(),
        Value::Array(vec![Value::U32(7)]),
    );
    assert!(matches!(build_err(&md), TokenizerError::WrongType { .. }));
}

#[test]
fn malformed_or_dangling_merges_are_typed_errors() {
    let mut md = tiny_metadata();
    md.insert("tokenizer.ggml.merges".into(), strings(&["ab"]));
    assert!(matches!(
        build_err(&md),
        TokenizerError::MalformedMerge { index: 0, .. }
    ));
    md.insert("tokenizer.ggml.merges".into(), strings(&["a z"]));
    assert!(matches!(build_err(&md), TokenizerError::Build(_)));
}

#[test]
fn token_type_length_mismatch_is_a_typed_error() {
    let mut md = tiny_metadata();
    md.insert(
        "tokenizer.ggml.token_type".into(),
        Value::Array(vec![Value::I32(1)]),
    );
    assert!(matches!(
        build_err(&md),
        TokenizerError::LengthMismatch {
            expected: 5,
            found: 1,
            ..
        }
    ));
}

#[test]
fn unknown_tokenizer_model_is_a_typed_error() {
    let mut md = tiny_metadata();
    md.insert("tokenizer.ggml.model".into(), Value::String("bert".into()));
    let err = build_err(&md);
    assert!(matches!(&err, TokenizerError::UnsupportedModel(m) if m == "bert"));
    let msg = err.to_string();
    assert!(
        msg.contains("`bert`") && msg.contains("`gpt2`, `llama`, `gemma4`"),
        "the message names the model and lists the supported ones: {msg}"
    );
    md.insert("tokenizer.ggml.model".into(), Value::U8(1));
    assert!(matches!(build_err(&md), TokenizerError::WrongType { .. }));
}

#[test]
fn unknown_pre_tokenizer_is_a_typed_error() {
    let mut md = tiny_metadata();
    md.insert("tokenizer.ggml.pre".into(), Value::String("kimi-k2".into()));
    let err = build_err(&md);
    assert!(matches!(&err, TokenizerError::UnsupportedPreTokenizer(p) if p == "kimi-k2"));
    let msg = err.to_string();
    for name in [
        "`kimi-k2`",
        "`llama-bpe`",
        "`qwen2`",
        "`deepseek-llm`",
        "`smollm`",
    ] {
        assert!(msg.contains(name), "{name} missing from: {msg}");
    }
    md.remove("tokenizer.ggml.pre");
    assert!(matches!(build_err(&md), TokenizerError::MissingKey(_)));
}

#[test]
fn special_token_ids_out_of_range_are_typed_errors() {
    let mut md = tiny_metadata();
    md.insert("tokenizer.ggml.eos_token_id".into(), Value::U32(5));
    assert!(matches!(
        build_err(&md),
        TokenizerError::IdOutOfRange { id: 5, .. }
    ));
    let mut md = tiny_metadata();
    md.insert("tokenizer.ggml.bos_token_id".into(), Value::I32(-1));
    assert!(matches!(
        build_err(&md),
        TokenizerError::IdOutOfRange { .. }
    ));
    md.insert(
        "tokenizer.ggml.bos_token_id".into(),
        Value::String("1".into()),
    );
    assert!(matches!(build_err(&md), TokenizerError::WrongType { .. }));
}

#[test]
fn duplicate_tokens_are_a_typed_error() {
    let mut md = tiny_metadata();
    md.insert(
        "tokenizer.ggml.tokens".into(),
        strings(&["<eos>", "a", "b", "ab", "a"]),
    );
    assert!(matches!(
        build_err(&md),
        TokenizerError::DuplicateToken {
            first: 1,
            second: 4,
            ..
        }
    ));
}

#[test]
fn a_missing_model_file_is_an_io_error() {
    let err = ModelTokenizer::from_gguf_file("no/such/model.gguf").unwrap_err();
    assert!(matches!(err, TokenizerError::Io(_)), "{err:?}");
}

#[test]
fn every_pre_tokenizer_of_the_table_builds() {
    for pre in supported_pre_tokenizers() {
        let mut md = tiny_metadata();
        md.insert("tokenizer.ggml.pre".into(), Value::String(pre.into()));
        let tok = ModelTokenizer::from_gguf_metadata(&md)
            .unwrap_or_else(|e| panic!("pre-tokenizer {pre}: {e}"));
        assert_eq!(tok.pre_tokenizer_name(), pre);
        assert_eq!(tok.encode("ab").unwrap(), vec![3], "pre-tokenizer {pre}");
    }
}

#[test]
fn control_tokens_stay_text_unless_special_tokens_are_parsed() {
    let tok = ModelTokenizer::from_gguf_metadata(&tiny_metadata()).unwrap();
    let plain = EncodeOptions {
        add_special: false,
        parse_special: false,
    };
    assert_eq!(tok.encode("a<eos>").unwrap(), vec![1, 0]);
    assert!(!tok.encode_with("a<eos>", plain).unwrap().contains(&0));
}

// ---- SentencePiece, on a tiny hand-made vocabulary. ----

/// `<unk> <s> </s> <0x0A> <0xE2> <0x82> <0xAC> ▁ a b ▁a ab ▁ab`, scores making
/// `▁a` merge before `ab`, and `▁ab` last.
fn tiny_spm_metadata() -> HashMap<String, Value> {
    let tokens = [
        "<unk>", "<s>", "</s>", "<0x0A>", "<0xE2>", "<0x82>", "<0xAC>", "▁", "a", "b", "▁a", "ab",
        "▁ab",
    ];
    let types = [2, 3, 3, 6, 6, 6, 6, 1, 1, 1, 1, 1, 1];
    let scores = [
        0.0f32, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0,
    ];
    let mut md = HashMap::new();
    md.insert("tokenizer.ggml.model".into(), Value::String("llama".into()));
    md.insert("tokenizer.ggml.tokens".into(), strings(&tokens));
    md.insert(
        "tokenizer.ggml.token_type".into(),
        Value::Array(types.iter().map(|&t| Value::I32(t)).collect()),
    );
    md.insert(
        "tokenizer.ggml.scores".into(),
        Value::Array(scores.iter().map(|&s| Value::F32(s)).collect()),
    );
    md.insert("tokenizer.ggml.bos_token_id".into(), Value::U32(1));
    md.insert("tokenizer.ggml.eos_token_id".into(), Value::U32(2));
    md.insert("tokenizer.ggml.unknown_token_id".into(), Value::U32(0));
    md
}

#[test]
fn tiny_sentencepiece_vocabulary_merges_by_score_with_byte_fallback() {
    let tok = ModelTokenizer::from_gguf_metadata(&tiny_spm_metadata()).unwrap();
    assert_eq!(tok.family(), TokenizerFamily::SentencePiece);
    // "ab" -> "▁ab": ▁+a (score of ▁a, -4) merges before a+b (-5), then ▁a+b.
    assert_eq!(tok.encode("ab").unwrap(), vec![12]);
    assert_eq!(tok.encode("ab a").unwrap(), vec![12, 10]);
    // No token for "\n" or "€": their bytes.
    assert_eq!(tok.encode("a\n€").unwrap(), vec![10, 3, 4, 5, 6]);
    assert_eq!(tok.decode(&[10, 3, 4, 5, 6], false).unwrap(), "a\n€");
    // The prefix space is stripped again when decoding.
    assert_eq!(
        tok.decode(&tok.encode("ab a").unwrap(), false).unwrap(),
        "ab a"
    );
    // A prefix space also follows a special token, as in llama.cpp.
    assert_eq!(tok.encode("<s>ab").unwrap(), vec![1, 12]);
    // BOS is added with special tokens: SentencePiece's default.
    assert!(tok.add_bos_token());
    let with_bos = EncodeOptions {
        add_special: true,
        parse_special: false,
    };
    assert_eq!(tok.encode_with("ab", with_bos).unwrap(), vec![1, 12]);

    let mut md = tiny_spm_metadata();
    md.insert("tokenizer.ggml.add_space_prefix".into(), Value::Bool(false));
    md.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(false));
    let tok = ModelTokenizer::from_gguf_metadata(&md).unwrap();
    assert_eq!(tok.encode("ab").unwrap(), vec![11]);
    assert_eq!(tok.encode_with("ab", with_bos).unwrap(), vec![11]);
}

#[test]
fn sentencepiece_without_scores_is_a_missing_key_error() {
    let mut md = tiny_spm_metadata();
    md.remove("tokenizer.ggml.scores");
    assert!(matches!(
        build_err(&md),
        TokenizerError::MissingKey("tokenizer.ggml.scores")
    ));
}

#[test]
fn bad_sentencepiece_scores_are_typed_errors() {
    let mut md = tiny_spm_metadata();
    md.insert(
        "tokenizer.ggml.scores".into(),
        Value::Array(vec![Value::F32(0.0); 3]),
    );
    assert!(matches!(
        build_err(&md),
        TokenizerError::LengthMismatch {
            key: "tokenizer.ggml.scores",
            expected: 13,
            found: 3
        }
    ));
    md.insert("tokenizer.ggml.scores".into(), strings(&["x"; 13]));
    assert!(matches!(build_err(&md), TokenizerError::WrongType { .. }));
    md.insert("tokenizer.ggml.scores".into(), Value::F32(1.0));
    assert!(matches!(build_err(&md), TokenizerError::WrongType { .. }));
    let mut nan = vec![Value::F32(0.0); 13];
    nan[4] = Value::F32(f32::NAN);
    md.insert("tokenizer.ggml.scores".into(), Value::Array(nan));
    assert!(matches!(
        build_err(&md),
        TokenizerError::BadScore { id: 4, .. }
    ));
    let mut md = tiny_spm_metadata();
    md.insert(
        "tokenizer.ggml.add_space_prefix".into(),
        Value::String("yes".into()),
    );
    assert!(matches!(build_err(&md), TokenizerError::WrongType { .. }));
}

#[test]
fn byte_level_bpe_without_merges_or_with_a_missing_pre_is_refused() {
    let mut md = tiny_metadata();
    md.remove("tokenizer.ggml.merges");
    assert!(matches!(
        build_err(&md),
        TokenizerError::MissingKey("tokenizer.ggml.merges")
    ));
    let mut md = tiny_metadata();
    md.insert(
        "tokenizer.ggml.model".into(),
        Value::String("gemma4".into()),
    );
    md.remove("tokenizer.ggml.merges");
    assert!(matches!(
        build_err(&md),
        TokenizerError::MissingKey("tokenizer.ggml.merges")
    ));
}

#[test]
fn a_chat_prompt_gets_exactly_one_bos_as_llama_server_makes_it() {
    // SentencePiece adds BOS: a template that spells it out is not doubled, one
    // that does not (Phi-3) still gets it.
    let tok = ModelTokenizer::from_gguf_metadata(&tiny_spm_metadata()).unwrap();
    assert_eq!(tok.encode_chat("<s>ab").unwrap(), vec![1, 12]);
    assert_eq!(tok.encode_chat("ab").unwrap(), vec![1, 12]);
    // Only a leading BOS is the template's: one inside the text stays.
    assert_eq!(tok.encode_chat("ab<s>").unwrap(), vec![1, 12, 1]);
    // A model that adds no BOS keeps the template's text as it is.
    let mut md = tiny_spm_metadata();
    md.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(false));
    let tok = ModelTokenizer::from_gguf_metadata(&md).unwrap();
    assert_eq!(tok.encode_chat("ab").unwrap(), vec![12]);
    assert_eq!(tok.encode_chat("<s>ab").unwrap(), vec![1, 12]);
    // A model that adds EOS: the template's trailing EOS is not doubled.
    let mut md = tiny_spm_metadata();
    md.insert("tokenizer.ggml.add_eos_token".into(), Value::Bool(true));
    let tok = ModelTokenizer::from_gguf_metadata(&md).unwrap();
    assert_eq!(tok.encode_chat("ab</s>").unwrap(), vec![1, 12, 2]);
    assert_eq!(tok.encode_chat("ab").unwrap(), vec![1, 12, 2]);
    // SmolLM2 adds no BOS: its chat prompts are unchanged.
    let smol = tokenizer();
    let text = "<|im_start|>user\nHi<|im_end|>\n";
    assert_eq!(smol.encode_chat(text).unwrap(), smol.encode(text).unwrap());
}
