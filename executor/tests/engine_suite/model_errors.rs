//! Loading refuses bad artifacts with typed errors, never a panic.

use std::io::Write;

use super::common::model_path;
use stoker_executor::model::ModelMeta;
use stoker_executor::{LoadOptions, Model, ModelError};
use stoker_test_support::{TempDir, temp_dir};

fn tmp_file(dir: &TempDir, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::File::create(&p).unwrap().write_all(bytes).unwrap();
    p
}

#[test]
fn a_missing_file_is_not_found() {
    let err = Model::load("/nonexistent/model.gguf".as_ref(), LoadOptions::default()).unwrap_err();
    assert!(matches!(err, ModelError::NotFound(_)), "{err}");
}

#[test]
fn a_file_that_is_not_gguf_is_refused() {
    let dir = temp_dir("model-errors");
    for (name, bytes) in [
        ("text.gguf", &b"hello, this is not a model"[..]),
        ("empty.gguf", &b""[..]),
        ("tiny.gguf", &b"GG"[..]),
    ] {
        let err = Model::load(&tmp_file(&dir, name, bytes), LoadOptions::default()).unwrap_err();
        assert!(matches!(err, ModelError::NotGguf(_)), "{name}: {err}");
    }
}

#[test]
fn a_truncated_file_is_reported_as_truncated() {
    let dir = temp_dir("model-errors");
    let full = std::fs::read(model_path()).unwrap();
    for cut in [64usize, 4096, full.len() / 2, full.len() - 1] {
        let p = tmp_file(&dir, &format!("cut-{cut}.gguf"), &full[..cut]);
        let err = Model::load(&p, LoadOptions::default()).unwrap_err();
        assert!(
            matches!(err, ModelError::Truncated(_)),
            "cut at {cut}: {err}"
        );
    }
}

#[test]
fn an_unsupported_architecture_is_refused() {
    // Rewrite general.architecture's value in place: same length keeps the file valid.
    let dir = temp_dir("model-errors");
    let mut bytes = std::fs::read(model_path()).unwrap();
    let key = b"general.architecture";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap();
    // key, u32 type (8 = string), u64 length, then the value "llama".
    let value_at = at + key.len() + 4 + 8;
    assert_eq!(&bytes[value_at..value_at + 5], b"llama");
    bytes[value_at..value_at + 5].copy_from_slice(b"mamba");
    let err = Model::load(
        &tmp_file(&dir, "mamba.gguf", &bytes),
        LoadOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, ModelError::UnsupportedArchitecture(ref a) if a == "mamba"),
        "{err}"
    );
}

#[test]
fn the_revision_id_is_the_sha256_of_the_file() {
    let m = Model::load(&model_path(), LoadOptions::default()).unwrap();
    assert_eq!(
        m.identity.sha256,
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    );
    assert_eq!(m.config.n_layers, 30);
    assert_eq!(m.config.hidden, 576);
    assert_eq!((m.config.n_heads, m.config.n_kv_heads), (9, 3));
}

/// `stoker api` reads the header alone; it must describe the model exactly
/// as a full load does, for the real model and for every architecture.
#[test]
fn the_header_alone_gives_the_loaded_models_identity_config_and_vocabulary() {
    let arch = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/arch");
    let mut paths = vec![model_path()];
    for e in std::fs::read_dir(&arch).expect("executor/tests/fixtures/arch") {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "gguf") {
            paths.push(p);
        }
    }
    assert!(paths.len() > 5, "arch fixtures: {paths:?}");
    for p in paths {
        let (full, meta) = match (Model::load(&p, LoadOptions::default()), ModelMeta::read(&p)) {
            (Ok(full), Ok(meta)) => (full, meta),
            // The unsupported-architecture fixture: the same refusal.
            (Err(a), Err(b)) => {
                assert_eq!(a.to_string(), b.to_string(), "{}", p.display());
                continue;
            }
            (a, b) => panic!("{}: load {:?}, header {:?}", p.display(), a.err(), b.err()),
        };
        assert_eq!(meta.identity, full.identity, "{}", p.display());
        assert_eq!(
            format!("{:?}", meta.config),
            format!("{:?}", full.config),
            "{}",
            p.display()
        );
        let text = "Hello, world! <|im_start|> 123";
        assert_eq!(
            format!("{:?}", meta.tokenizer.encode(text)),
            format!("{:?}", full.tokenizer.encode(text)),
            "{}",
            p.display()
        );
    }
}

#[test]
fn the_header_reader_refuses_bad_artifacts_as_loading_does() {
    let dir = temp_dir("meta-errors");
    let missing = dir.path().join("nope.gguf");
    assert!(matches!(
        ModelMeta::read(&missing).unwrap_err(),
        ModelError::NotFound(_)
    ));
    let not_gguf = tmp_file(&dir, "x.gguf", b"PK\x03\x04 a zip file");
    assert!(matches!(
        ModelMeta::read(&not_gguf).unwrap_err(),
        ModelError::NotGguf(_)
    ));
}
