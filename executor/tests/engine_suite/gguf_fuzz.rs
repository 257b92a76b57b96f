//! Hostile GGUF files, property-based: a real file of each architecture with
//! its header mutated (bytes flipped, lengths, counts, offsets, types and
//! dimensions overwritten with hostile values, the file cut short) must load
//! as a model or fail with a typed [`ModelError`]; never a panic, and never
//! an allocation sized by the file's claims (one would abort this binary).
//! A model that does load must run a forward pass without a panic.
//!
//! proptest draws the mutations; a failure prints the smallest mutation list
//! that still fails. The run is reproducible: a fixed seed, after replaying
//! every failure found so far (`proptest-regressions/gguf_fuzz.txt`);
//! `scripts/fuzz.sh` explores with fresh seeds and more cases.

use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};
use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, RngSeed};
use stoker_executor::model::ModelMeta;
use stoker_executor::{LoadOptions, Model, ModelError};
use stoker_test_support::property;

use super::common::try_prompt_logits_in;

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/arch");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("executor/tests/fixtures/arch")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    v.sort();
    assert!(v.len() > 5, "arch fixtures: {v:?}");
    v
}

/// A file's bytes and where its header ends (the tensor data's offset).
fn read_fixture(p: &Path) -> (Vec<u8>, usize) {
    let bytes = std::fs::read(p).unwrap();
    let content = Content::read(&mut std::io::Cursor::new(&bytes)).unwrap();
    (bytes, content.tensor_data_offset as usize)
}

#[derive(Clone, Debug)]
enum Mutation {
    Byte {
        at: f64,
        value: u8,
    },
    U32 {
        at: f64,
        value: u32,
    },
    U64 {
        at: f64,
        value: u64,
    },
    /// Cut the file at this fraction of its length.
    Truncate {
        at: f64,
    },
}

fn hostile_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX / 2),
        Just(1 << 32),
        Just(1 << 40),
        Just(1 << 62),
        Just(u32::MAX as u64),
        any::<u64>(),
        0u64..4096,
    ]
}

fn hostile_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(u32::MAX),
        Just(1 << 31),
        // ggml types, GGUF value types, and just past their ranges.
        0u32..48,
        any::<u32>(),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = 0.0f64..1.0;
    prop_oneof![
        4 => (at.clone(), any::<u8>()).prop_map(|(at, value)| Mutation::Byte { at, value }),
        3 => (at.clone(), hostile_u32()).prop_map(|(at, value)| Mutation::U32 { at, value }),
        3 => (at.clone(), hostile_u64()).prop_map(|(at, value)| Mutation::U64 { at, value }),
        1 => at.prop_map(|at| Mutation::Truncate { at }),
    ]
}

/// Applies the mutations to the header (bytes 4.. of it: the magic is
/// checked first and tested elsewhere); a cut may fall anywhere.
fn mutate(bytes: &[u8], header: usize, muts: &[Mutation]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let pos = |at: f64, width: usize| 4 + ((at * (header - 4 - width) as f64) as usize);
    // After a cut, a write past the new end is dropped.
    let put = |b: &mut Vec<u8>, i: usize, v: &[u8]| {
        if let Some(dst) = b.get_mut(i..i + v.len()) {
            dst.copy_from_slice(v);
        }
    };
    for m in muts {
        match *m {
            Mutation::Byte { at, value } => put(&mut b, pos(at, 1), &[value]),
            Mutation::U32 { at, value } => put(&mut b, pos(at, 4), &value.to_le_bytes()),
            Mutation::U64 { at, value } => put(&mut b, pos(at, 8), &value.to_le_bytes()),
            Mutation::Truncate { at } => {
                let n = (at * b.len() as f64) as usize;
                b.truncate(n.max(4));
            }
        }
    }
    b
}

/// Loads the file both ways; a panic anywhere fails with what was loaded.
fn load_both(p: &Path) -> Result<(), String> {
    let full = catch_unwind(AssertUnwindSafe(|| Model::load(p, LoadOptions::default())))
        .map_err(|e| format!("Model::load panicked: {}", panic_text(&e)))?;
    let meta = catch_unwind(AssertUnwindSafe(|| ModelMeta::read(p)))
        .map_err(|e| format!("ModelMeta::read panicked: {}", panic_text(&e)))?;
    if let Ok(model) = &full {
        // A typed refusal is an answer; only a panic fails.
        let _answer_or_typed_refusal = catch_unwind(AssertUnwindSafe(|| {
            try_prompt_logits_in(model, &[1, 2, 3], 0)
        }))
        .map_err(|e| format!("a loaded model's forward panicked: {}", panic_text(&e)))?;
    }
    // The header reader accepts at most what loading accepts.
    if full.is_err() && meta.is_ok() {
        let e = full.err().unwrap();
        // Errors only a full load can see (the tensors themselves).
        if !matches!(
            e,
            ModelError::MissingTensor(_) | ModelError::BadTensor(..) | ModelError::Truncated(_)
        ) && !e.to_string().contains("tensor")
        {
            return Err(format!(
                "the header reader accepted what loading refused: {e}"
            ));
        }
    }
    Ok(())
}

fn panic_text(e: &Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// Every failure found so far, replayed first on every run.
const REGRESSIONS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/engine_suite/proptest-regressions/gguf_fuzz.txt"
);

#[test]
fn a_mutated_header_loads_or_is_a_typed_error_never_a_panic() {
    let files: Vec<(PathBuf, Vec<u8>, usize)> = fixtures()
        .into_iter()
        .map(|p| {
            let (b, h) = read_fixture(&p);
            (p, b, h)
        })
        .collect();
    let dir = stoker_test_support::temp_dir("gguf-fuzz");
    let target = dir.path().join("fuzzed.gguf");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: property::cases(160),
        rng_seed: match property::seed() {
            Some(s) => RngSeed::Fixed(s),
            None => RngSeed::Random,
        },
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(REGRESSIONS))),
        ..ProptestConfig::default()
    });
    let strategy = (0..files.len(), prop::collection::vec(mutation(), 1..4));
    // Panics are caught and reported as failures; keep the default hook from
    // printing each caught one.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = runner.run(&strategy, |(which, muts)| {
        let (name, bytes, header) = &files[which];
        let fuzzed = mutate(bytes, *header, &muts);
        std::fs::File::create(&target)
            .and_then(|mut f| f.write_all(&fuzzed))
            .unwrap();
        load_both(&target).map_err(|e| {
            TestCaseError::fail(format!("{}: {e}", name.file_name().unwrap().display()))
        })
    });
    std::panic::set_hook(hook);
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Writes `content`'s metadata with `extra` set, and its tensors, as a GGUF.
fn rewrite_with(src: &Path, extra: (&str, Value)) -> Vec<u8> {
    let bytes = std::fs::read(src).unwrap();
    let mut cursor = std::io::Cursor::new(&bytes);
    let content = Content::read(&mut cursor).unwrap();
    let mut metadata: Vec<(&str, &Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    metadata.retain(|(k, _)| *k != extra.0);
    metadata.push((extra.0, &extra.1));
    let tensors: Vec<(String, candle_core::quantized::QTensor)> = content
        .tensor_infos
        .keys()
        .map(|name| {
            let t = content
                .tensor(&mut cursor, name, &candle_core::Device::Cpu)
                .unwrap();
            (name.clone(), t)
        })
        .collect();
    let tensors: Vec<(&str, &candle_core::quantized::QTensor)> =
        tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut out = std::io::Cursor::new(Vec::new());
    candle_core::quantized::gguf_file::write(&mut out, &metadata, &tensors).unwrap();
    out.into_inner()
}

#[test]
fn a_zero_or_hostile_alignment_is_a_typed_error() {
    let dir = stoker_test_support::temp_dir("gguf-align");
    let src = &fixtures()[0];
    for value in [
        Value::U32(0),
        Value::U32(u32::MAX),
        Value::I32(-8),
        Value::U64(1 << 60),
    ] {
        let p = dir.path().join("aligned.gguf");
        std::fs::write(&p, rewrite_with(src, ("general.alignment", value.clone()))).unwrap();
        if let Err(e) = load_both(&p) {
            panic!("general.alignment = {value:?}: {e}");
        }
    }
}

/// Found by `scripts/fuzz.sh` (an abort, which proptest cannot persist as a
/// seed): a `block_count` of about a trillion sized the layer list's
/// allocation before the first missing `blk.N` tensor was looked up, and the
/// process aborted. The count must be checked against the tensors, never
/// trusted for an allocation.
#[test]
fn a_hostile_block_count_is_a_typed_error_not_an_allocation() {
    let dir = stoker_test_support::temp_dir("gguf-blocks");
    for src in fixtures() {
        let content = {
            let mut f = std::fs::File::open(&src).unwrap();
            Content::read(&mut f).unwrap()
        };
        let arch = match content.metadata.get("general.architecture") {
            Some(Value::String(a)) => a.clone(),
            other => panic!("{}: general.architecture {other:?}", src.display()),
        };
        let key = format!("{arch}.block_count");
        for value in [
            Value::U32(u32::MAX),
            Value::U64(1_010_122_621_776 / 64),
            Value::U64(u64::MAX),
        ] {
            let p = dir.path().join("blocks.gguf");
            std::fs::write(&p, rewrite_with(&src, (&key, value.clone()))).unwrap();
            if let Err(e) = load_both(&p) {
                panic!("{} with {key} = {value:?}: {e}", src.display());
            }
        }
    }
}
