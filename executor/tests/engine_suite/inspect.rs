//! `stoker inspect`'s report: what the real model holds, why a file of an
//! unsupported architecture cannot be served, and a typed error for a non-GGUF file.

use std::path::PathBuf;

use stoker_executor::inspect::inspect;

use super::common::model_path;

#[test]
fn the_default_model_is_described_and_servable() {
    let r = inspect(&model_path()).unwrap();
    assert!(r.servable, "{:?}", r.problems);
    assert_eq!(r.architecture.as_deref(), Some("llama"));
    assert_eq!(r.file_type.as_deref(), Some("Q4_1"));
    assert_eq!(r.parameters, 134_515_008);
    assert_eq!(r.tensors, 272);
    assert_eq!(r.tensor_types["attn_q.weight"]["Q4_1"], 30);
    assert_eq!(r.tensor_types["token_embd.weight"]["Q8_0"], 1);
    assert_eq!(r.pre_tokenizer.as_deref(), Some("smollm"));
    assert_eq!(r.vocab_size, Some(49152));
    assert!(r.has_chat_template);
    assert!(r.to_text().contains("servable        yes"));
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["sha256"].as_str().unwrap().len(), 64);
}

#[test]
fn an_unsupported_architecture_is_reported_with_the_reason() {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/arch/mamba.gguf");
    let r = inspect(&p).unwrap();
    assert!(!r.servable);
    assert!(
        r.problems
            .iter()
            .any(|p| p.contains("mamba") && p.contains("llama")),
        "{:?}",
        r.problems
    );
    assert!(r.to_text().contains("servable        no"));
}

#[test]
fn a_file_that_is_not_gguf_is_a_typed_error() {
    let dir = stoker_test_support::temp_dir("inspect");
    let p = dir.path().join("not-a-model.txt");
    std::fs::write(&p, b"not a model at all").unwrap();
    let e = inspect(&p).unwrap_err();
    std::fs::remove_file(&p).unwrap();
    assert!(matches!(e, stoker_executor::ModelError::NotGguf(_)), "{e}");
    assert!(inspect(&p).is_err());
}
