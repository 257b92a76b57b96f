//! What the two llama.cpp parity tests share: rebuilding llama-quantize's files
//! from their sources with stoker's quantizers, and scoring stoker's logits
//! against llama.cpp's top-64 log-probabilities.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::Device;
use candle_core::quantized::{QStorage, QTensor, gguf_file};
use rayon::prelude::*;
use serde_json::Value;
use stoker_executor::kernels::QDtype;
use stoker_executor::model::{ForwardChunk, KvStorage, Workspace};
use stoker_executor::{BLOCK_SIZE, BlockId, Model};

use super::{Source, requantize, sha256_hex};

/// Bytes in an 8-byte-aligned buffer (candle reads f32 and f16 data in place).
pub fn aligned(bytes: &[u8]) -> Vec<u64> {
    let mut v = vec![0u64; bytes.len().div_ceil(8)];
    // SAFETY: `v` holds at least `bytes.len()` bytes; u8 has no alignment needs.
    let dst = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), bytes.len()) };
    dst.copy_from_slice(bytes);
    v
}

pub fn ggml_dtype(d: QDtype) -> candle_core::quantized::GgmlDType {
    use candle_core::quantized::GgmlDType as G;
    use stoker_executor::kernels::{BlockType as B, QDtype as Q};
    match d {
        Q::F32 => G::F32,
        Q::F16 => G::F16,
        Q::BF16 => G::BF16,
        Q::Q4_1 => G::Q4_1,
        Q::Q8_0 => G::Q8_0,
        Q::Blocks(B::Q4_0) => G::Q4_0,
        Q::Blocks(B::Q5_0) => G::Q5_0,
        Q::Blocks(B::Q5_1) => G::Q5_1,
        Q::Blocks(B::Q2K) => G::Q2K,
        Q::Blocks(B::Q3K) => G::Q3K,
        Q::Blocks(B::Q4K) => G::Q4K,
        Q::Blocks(B::Q5K) => G::Q5K,
        Q::Blocks(B::Q6K) => G::Q6K,
    }
}

/// Writes `path`, llama-quantize's file of manifest entry `file` rebuilt from the
/// source tensors, checking every tensor against llama-quantize's hash.
pub fn rebuild(
    what: &str,
    file: &Value,
    sources: &BTreeMap<String, Source>,
    content: &gguf_file::Content,
    path: &Path,
) {
    let entries = file["tensors"].as_array().unwrap();
    let tensors: Vec<(String, QTensor)> = entries
        .par_iter()
        .map(|t| {
            let name = t["name"].as_str().unwrap();
            let tname = t["type"].as_str().unwrap();
            let src = sources
                .get(name)
                .unwrap_or_else(|| panic!("{what}: {name} is not in the F32 source"));
            let bytes = requantize(src, tname)
                .unwrap_or_else(|| panic!("{what}: {name} is {tname}, which stoker does not write"))
                .unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
            assert_eq!(
                sha256_hex(&bytes),
                t["sha256"].as_str().unwrap(),
                "{what}: {name} ({tname}) differs from llama-quantize's"
            );
            let dtype = stoker_executor::quantize::parse_type(tname).unwrap();
            let buf = aligned(&bytes);
            // SAFETY: `buf` holds `bytes.len()` initialised bytes.
            let view =
                unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), bytes.len()) };
            let storage = QStorage::from_data(
                std::borrow::Cow::Borrowed(view),
                &Device::Cpu,
                ggml_dtype(dtype),
            )
            .unwrap();
            (
                name.to_string(),
                QTensor::new(storage, src.shape.clone()).unwrap(),
            )
        })
        .collect();
    let mut md: Vec<(&String, &gguf_file::Value)> = content.metadata.iter().collect();
    md.sort_by(|a, b| a.0.cmp(b.0));
    let md: Vec<(&str, &gguf_file::Value)> = md.into_iter().map(|(k, v)| (k.as_str(), v)).collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    gguf_file::write(&mut f, &md, &refs).unwrap();
}

pub fn argmax(l: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in l.iter().enumerate() {
        if v > l[best] {
            best = i;
        }
    }
    best
}

pub fn log_softmax(l: &[f32]) -> Vec<f64> {
    let m = l.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let lse = m + l.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
    l.iter().map(|&v| v as f64 - lse).collect()
}

pub struct Scores {
    pub kld: f64,
    pub max_kld: f64,
    pub agree: usize,
    pub near_ties: Vec<f64>,
    /// Disagreements that are not near-ties: (llama.cpp's gap in nats, description).
    pub far: Vec<(f64, String)>,
    pub positions: usize,
}

/// `parity.rs`'s measure: KL(llama.cpp ‖ stoker) over llama.cpp's top 64 and a
/// bucket for the rest (which can only underestimate the full-vocabulary KLD by
/// the divergence inside the bucket), and the top-1 agreement.
pub fn score(fix: &Value, scored: &[usize], ours: &[Vec<f32>], near_tie: f64) -> Scores {
    let positions = fix["positions"].as_array().unwrap();
    assert_eq!(positions.len(), ours.len());
    let mut s = Scores {
        kld: 0.0,
        max_kld: 0.0,
        agree: 0,
        near_ties: Vec::new(),
        far: Vec::new(),
        positions: positions.len(),
    };
    for ((p, l), &i) in positions.iter().zip(ours).zip(scored) {
        let ids: Vec<usize> = p["top_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        let lps: Vec<f64> = p["top_logprobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        let rest = p["rest"].as_f64().unwrap().max(0.0);
        let q = log_softmax(l);
        let mut kld = 0.0;
        let mut q_top = 0.0;
        for (&id, &lp) in ids.iter().zip(&lps) {
            kld += lp.exp() * (lp - q[id]);
            q_top += q[id].exp();
        }
        let q_rest = (1.0 - q_top).max(1e-300);
        if rest > 0.0 {
            kld += rest * (rest.ln() - q_rest.ln());
        }
        s.kld += kld;
        s.max_kld = s.max_kld.max(kld);
        let pick = argmax(l);
        if pick == ids[0] {
            s.agree += 1;
        } else {
            match ids.iter().position(|&id| id == pick) {
                Some(k) if lps[0] - lps[k] <= near_tie => s.near_ties.push(lps[0] - lps[k]),
                Some(k) => s.far.push((
                    lps[0] - lps[k],
                    format!(
                        "position {i}: picked {pick}, {:.3} nats below llama.cpp's top-1 {}",
                        lps[0] - lps[k],
                        ids[0]
                    ),
                )),
                None => s.far.push((
                    f64::INFINITY,
                    format!("position {i}: picked {pick}, outside llama.cpp's top 64"),
                )),
            }
        }
    }
    s.kld /= s.positions as f64;
    s
}

/// stoker's logits after `tokens[0..=i]` for every `i` of `scored`, all tokens in
/// one step.
pub fn teacher_forced(model: &Model, tokens: &[u32], scored: &[usize]) -> Vec<Vec<f32>> {
    let table: Vec<BlockId> = (0..tokens.len().div_ceil(BLOCK_SIZE) as u32)
        .map(BlockId)
        .collect();
    let mut kv = KvStorage::new(&model.config, table.len());
    let chunks: Vec<ForwardChunk<'_>> = (0..tokens.len())
        .map(|i| ForwardChunk {
            tokens: &tokens[i..i + 1],
            start_pos: i,
            block_table: &table,
            logits: scored.binary_search(&i).is_ok(),
            score: None,
            prompt_len: 0,
        })
        .collect();
    model
        .forward(&chunks, &mut kv, &mut Workspace::default())
        .unwrap()
}
