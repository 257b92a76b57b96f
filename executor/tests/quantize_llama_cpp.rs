//! Requantization against llama.cpp's own `llama-quantize` output, tensor by tensor.
//!
//! `executor/tests/fixtures/parity/manifest.json` (made by
//! `scripts/make_parity_fixtures.sh`) records, for every file `llama-quantize
//! --allow-requantize` made from `models/SmolLM2-135M-Instruct.Q4_1.gguf` without an
//! importance matrix, each tensor's name, ggml type and the sha256 of its data bytes.
//! This test redoes what llama-quantize does for each tensor of each file and compares
//! the hash:
//!
//! * a tensor whose output type equals its source type is copied unchanged (so are the
//!   F32 norms);
//! * any other is dequantized exactly as llama.cpp's `dequantize_row_q4_1` (`q·d + m`)
//!   or `dequantize_row_q8_0` (`q·d`) does, which is what `QMatrix::row_f32` computes,
//!   then quantized with `stoker_executor::quantize` into the manifest's type.
//!
//! Types stoker does not write (llama-quantize falls back to IQ4_NL for Q2_K/Q3_K rows
//! not divisible by 256) are listed, not compared. The source file's own entry is
//! checked too: our reading of its tensors must hash like llama.cpp's.
//!
//! The manifest and the model are both required: a missing one fails the test with the
//! command that makes it.

#[path = "llama_cpp/arch_parity.rs"]
mod arch_parity;
#[path = "llama_cpp/common.rs"]
mod common;
#[path = "llama_cpp/parity.rs"]
mod parity;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::Device;
use candle_core::quantized::gguf_file;
use rayon::prelude::*;
use sha2::{Digest, Sha256};
use stoker_executor::kernels::{QDtype, QMatrix};
use stoker_executor::quantize::{parse_type, quantize_row, quantized_len};
use stoker_test_support::model_path;

fn manifest_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parity/manifest.json")
}

/// A tensor of the source file: its type, its data bytes and `ne[0]` (values per row).
pub struct Source {
    pub dtype: QDtype,
    /// candle's order (rows first).
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
    pub cols: usize,
}

impl Source {
    /// Every value, dequantized as llama.cpp's `to_float` for the type does.
    fn dequantize(&self) -> Vec<f32> {
        let rows = self.bytes.len() / quantized_len(self.dtype, self.cols).unwrap();
        let n = rows * self.cols;
        let m = QMatrix::from_ggml_bytes(self.dtype, &self.bytes, rows, self.cols).unwrap();
        let mut out = vec![0f32; n];
        for (r, o) in out.chunks_exact_mut(self.cols).enumerate() {
            m.row_f32_into(r, o).unwrap();
        }
        out
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The parity manifest (fails with the command that makes it when missing).
pub fn manifest() -> serde_json::Value {
    let mpath = manifest_path();
    let Ok(text) = std::fs::read_to_string(&mpath) else {
        panic!(
            "missing {}: it is made by scripts/make_parity_fixtures.sh (after \
             scripts/build-llama-cpp.sh builds llama.cpp)",
            mpath.display()
        );
    };
    serde_json::from_str(&text).unwrap()
}

/// Every tensor of the source model, with the file's metadata.
pub fn load_sources() -> (BTreeMap<String, Source>, gguf_file::Content) {
    let model = model_path();
    let file = std::fs::File::open(&model).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (scripts/fetch-model.sh fetches it)",
            model.display()
        )
    });
    sources_from(file)
}

/// Every tensor of a GGUF file, with its metadata.
pub fn sources_from<R: std::io::Read + std::io::Seek>(
    mut file: R,
) -> (BTreeMap<String, Source>, gguf_file::Content) {
    let content = gguf_file::Content::read(&mut file).unwrap();
    let mut sources: BTreeMap<String, Source> = BTreeMap::new();
    for name in content.tensor_infos.keys() {
        let qt = content.tensor(&mut file, name, &Device::Cpu).unwrap();
        let dims = qt.shape().dims();
        sources.insert(
            name.clone(),
            Source {
                dtype: QDtype::try_from(qt.dtype()).unwrap(),
                shape: dims.to_vec(),
                bytes: qt.data().unwrap().into_owned(),
                cols: *dims.last().unwrap(),
            },
        );
    }
    (sources, content)
}

/// The bytes llama-quantize writes for `src` as type `ty_name` (`None` for a type
/// stoker does not write): the source bytes when the type is unchanged, else the
/// dequantized values quantized again.
pub fn requantize(src: &Source, ty_name: &str) -> Option<Result<Vec<u8>, String>> {
    match parse_type(ty_name) {
        Err(_) => None,
        Ok(ty) if ty == src.dtype => Some(Ok(src.bytes.clone())),
        Ok(ty) => Some(quantize_row(ty, &src.dequantize()).map_err(|e| e.to_string())),
    }
}

#[test]
fn requantized_tensors_match_llama_quantize() {
    let manifest = manifest();
    let (sources, _) = load_sources();

    let files = manifest["files"].as_object().expect("manifest.files");
    let source_key = manifest["source"]
        .as_str()
        .and_then(|s| s.strip_suffix(".gguf"))
        .and_then(|s| s.rsplit('.').next())
        .unwrap_or("Q4_1")
        .to_string();
    let mut failures = Vec::new();
    let mut report = Vec::new();
    for (file_ty, entry) in files {
        let tensors = entry["tensors"].as_array().expect("tensors");
        // (name, type, expected sha) → outcome
        let outcomes: Vec<(String, String, Result<bool, String>)> = tensors
            .par_iter()
            .map(|t| {
                let name = t["name"].as_str().unwrap().to_string();
                let ty_name = t["type"].as_str().unwrap().to_string();
                let want = t["sha256"].as_str().unwrap();
                let Some(src) = sources.get(&name) else {
                    return (name, ty_name, Err("not in the source file".into()));
                };
                let ours = if *file_ty == source_key {
                    // The source itself: our reading of its bytes.
                    sha256_hex(&src.bytes)
                } else {
                    match requantize(src, &ty_name) {
                        None => return (name, ty_name, Ok(false)),
                        Some(Ok(bytes)) => sha256_hex(&bytes),
                        Some(Err(e)) => return (name, ty_name, Err(e)),
                    }
                };
                if ours == want {
                    (name, ty_name, Ok(true))
                } else {
                    (name, ty_name, Err("sha256 differs".into()))
                }
            })
            .collect();
        let mut matched: BTreeMap<&str, usize> = BTreeMap::new();
        let mut skipped: BTreeMap<&str, usize> = BTreeMap::new();
        for (name, ty, outcome) in &outcomes {
            match outcome {
                Ok(true) => *matched.entry(ty).or_default() += 1,
                Ok(false) => *skipped.entry(ty).or_default() += 1,
                Err(e) => failures.push(format!("{file_ty}: {name} ({ty}): {e}")),
            }
        }
        report.push(format!(
            "{file_ty}: identical {matched:?}; types stoker does not write {skipped:?}"
        ));
    }
    eprintln!("{}", report.join("\n"));
    assert!(
        failures.is_empty(),
        "{} tensors differ from llama-quantize:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(files.len() > 1, "the manifest lists no requantized file");
}
