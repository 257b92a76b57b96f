//! Parity with llama.cpp on the same files, measured as llama.cpp measures a
//! quantization's damage: teacher-forced over a text, so one early difference does
//! not compound.
//!
//! For each file of the parity manifest (SmolLM2-135M-Instruct in Q4_1 and the 11
//! types `llama-quantize` made from it), the file is rebuilt here tensor for tensor
//! (each tensor's sha256 checked against llama.cpp's), loaded with `Model::load`, and
//! run over `text.txt`'s tokens in one step with logits at every position. Against
//! llama.cpp's top-64 log-probabilities at the same positions (`<TYPE>.json`):
//!
//! * every top-1 disagreement must be a near-tie: llama.cpp's log-probability of
//!   stoker's pick within [`NEAR_TIE`] of its own top-1's;
//! * the mean KL(llama.cpp ‖ stoker) must be at most a tenth of the KLD between
//!   llama.cpp's own F16 and Q4_K_M files (`kld_f16_vs_q4_k_m`), the damage of a
//!   typical quantization. The KLD is taken over llama.cpp's top 64 plus one bucket
//!   for the rest of the vocabulary, which by the log-sum inequality can only
//!   underestimate the full-vocabulary KLD by the divergence inside that bucket
//!   (llama.cpp's rest mass is reported; it is a few percent at most here).
//!
//! Those are the targets. They are tighter than llama.cpp agrees with
//! itself: the same llama.cpp source built natively on a second CPU (AVX-512;
//! `parity/cpu2/`, `scripts/llama-oracle/make_parity_cpu2.py`) lands 0.007–0.016
//! nats from the first set on every quantized type, with top-1 gaps up to 0.36
//! nats, while F16 agrees to 6e-6. With activations quantized to 8 bits before
//! each integer dot product, two float summation orders put an occasional value
//! on the other side of a rounding step, a whole step apart, and the difference
//! spreads through the layers. So what is asserted is what llama.cpp itself
//! holds to: for every type, stoker is no further from either llama.cpp run than
//! the two runs are from each other ([`within_llama_cpp_spread`]), plus the
//! measured bounds below as a regression guard. Which types meet the issue's
//! target is printed.
//!
//! Greedy 32-token generation on llama.cpp's 10 chat prompts is reported (identical
//! sequences and the first divergence), not asserted: after the first near-tie the
//! two continue from different tokens.

use std::collections::BTreeMap;
use std::path::PathBuf;

use candle_core::quantized::gguf_file;
use serde_json::Value;
use stoker_executor::model::{ForwardChunk, KvStorage, Workspace};
use stoker_executor::{BLOCK_SIZE, BlockId, LoadOptions, Model};

use super::common::{self, argmax, score};
use super::{Source, load_sources, manifest};

/// Largest log-probability gap (llama.cpp's, nats) of a near-tie: the target is that
/// every top-1 disagreement is one.
const NEAR_TIE: f64 = 0.2;
/// The regression guard, measured: the mean KLD may reach 1.2 tenths of the
/// baseline (the K-mixes measure 1.01–1.13 tenths), and up to [`FAR_MAX`]
/// disagreements per type may have a gap up to [`FAR_GAP`] (six types have 1–3
/// positions with gaps of 0.21–0.65). F16 and BF16 measure 1e-6 and 7e-5.
const KLD_SLACK: f64 = 1.2;
const FAR_MAX: usize = 3;
const FAR_GAP: f64 = 0.7;

fn fixture(ty: &str) -> Value {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/parity/{ty}.json"));
    read_fixture(p)
}

/// The second CPU's scores of the same file (`parity/cpu2/<TYPE>.json`).
fn fixture_cpu2(ty: &str) -> Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/parity/cpu2/{ty}.json"));
    read_fixture(p)
}

fn read_fixture(p: PathBuf) -> Value {
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (scripts/make_parity_fixtures.sh and scripts/llama-oracle/make_parity_cpu2.py make it)",
            p.display()
        )
    }))
    .unwrap()
}

/// Writes the file of manifest entry `entry`, rebuilt from the source tensors, and
/// checks every tensor against llama.cpp's hash.
fn rebuild(
    ty: &str,
    entry: &Value,
    sources: &BTreeMap<String, Source>,
    content: &gguf_file::Content,
    dir: &std::path::Path,
) -> PathBuf {
    let path = dir.join(format!("SmolLM2-135M-Instruct.{ty}.gguf"));
    common::rebuild(ty, entry, sources, content, &path);
    path
}

fn blocks(n: usize, first: u32) -> Vec<BlockId> {
    (0..n.div_ceil(BLOCK_SIZE) as u32)
        .map(|b| BlockId(first + b))
        .collect()
}

/// Greedy generation (ties to the lower id) of up to `n` tokens for each prompt,
/// all prompts in each step, stopping after an end-of-generation token.
fn greedy(model: &Model, prompts: &[Vec<u32>], n: usize) -> Vec<Vec<u32>> {
    let per = (prompts.iter().map(Vec::len).max().unwrap() + n).div_ceil(BLOCK_SIZE);
    let tables: Vec<Vec<BlockId>> = (0..prompts.len())
        .map(|i| blocks(per * BLOCK_SIZE, (i * per) as u32))
        .collect();
    let mut kv = KvStorage::new(&model.config, per * prompts.len());
    let mut ws = Workspace::default();
    let stops = model.tokenizer.stop_token_ids();
    let mut seqs: Vec<Vec<u32>> = prompts.to_vec();
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
    let mut done = vec![false; prompts.len()];
    let mut fed = vec![0usize; prompts.len()];
    for _ in 0..n {
        let live: Vec<usize> = (0..prompts.len()).filter(|&i| !done[i]).collect();
        if live.is_empty() {
            break;
        }
        let chunks: Vec<ForwardChunk<'_>> = live
            .iter()
            .map(|&i| ForwardChunk {
                tokens: &seqs[i][fed[i]..],
                start_pos: fed[i],
                block_table: &tables[i],
                logits: true,
                score: None,
                prompt_len: 0,
            })
            .collect();
        let logits = model.forward(&chunks, &mut kv, &mut ws).unwrap();
        for (&i, l) in live.iter().zip(&logits) {
            fed[i] = seqs[i].len();
            let next = argmax(l) as u32;
            seqs[i].push(next);
            out[i].push(next);
            if stops.contains(&next) {
                done[i] = true;
            }
        }
    }
    out
}

/// Mean KL(a ‖ b) between two llama.cpp runs, both known by their top 64 and
/// rest mass per position: over a's top 64 (a token outside b's top 64 gets an
/// equal share of b's rest) plus a's rest as one bucket.
fn cross_kld(a: &Value, b: &Value, vocab: usize) -> f64 {
    let pa = a["positions"].as_array().unwrap();
    let pb = b["positions"].as_array().unwrap();
    assert_eq!(pa.len(), pb.len());
    let mut total = 0.0;
    for (x, y) in pa.iter().zip(pb) {
        let f = |v: &Value, k: &str| -> Vec<f64> {
            v[k].as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_f64().unwrap())
                .collect()
        };
        let (ids_x, lp_x, ids_y, lp_y) = (
            f(x, "top_ids"),
            f(x, "top_logprobs"),
            f(y, "top_ids"),
            f(y, "top_logprobs"),
        );
        let rest_y = y["rest"].as_f64().unwrap().max(1e-12);
        let floor = (rest_y / (vocab - ids_y.len()) as f64).ln();
        let mut kld = 0.0;
        let mut q_top = 0.0;
        for (id, lp) in ids_x.iter().zip(&lp_x) {
            let lq = ids_y
                .iter()
                .position(|i| i == id)
                .map_or(floor, |k| lp_y[k]);
            kld += lp.exp() * (lp - lq);
            q_top += lq.exp();
        }
        let rest = x["rest"].as_f64().unwrap().max(0.0);
        if rest > 0.0 {
            kld += rest * (rest.ln() - (1.0 - q_top).max(1e-300).ln());
        }
        total += kld;
    }
    total / pa.len() as f64
}

/// stoker is no further from either llama.cpp run than the runs are from each
/// other: KL(A ‖ stoker) ≤ KL(A ‖ B) and KL(B ‖ stoker) ≤ KL(B ‖ A).
fn within_llama_cpp_spread(ours_a: f64, ours_b: f64, a_b: f64, b_a: f64) -> bool {
    ours_a <= a_b && ours_b <= b_a
}

#[test]
fn every_type_agrees_with_llama_cpp_teacher_forced() {
    let manifest = manifest();
    let baseline = manifest["kld_f16_vs_q4_k_m"].as_f64().unwrap();
    let target = baseline / 10.0;
    let bound = target * KLD_SLACK;
    let (sources, content) = load_sources();
    // `STOKER_PARITY_KEEP=DIR` keeps the rebuilt files there (llama-quantize's files,
    // byte for byte: what `scripts/bench-llama-cpp.sh` measures).
    let keep = std::env::var_os("STOKER_PARITY_KEEP").map(PathBuf::from);
    // Otherwise they go to a temp dir, removed when this test ends, even on failure.
    let scratch = stoker_test_support::temp_dir("parity");
    let dir = keep.clone().unwrap_or_else(|| scratch.path().to_path_buf());
    std::fs::create_dir_all(&dir).unwrap();
    let mut failures = Vec::new();
    let mut rows = Vec::new();
    // `STOKER_PARITY_TYPES=Q8_0,Q4_K_M` limits a run to some types (a full run
    // takes minutes); CI runs them all. `STOKER_PARITY_WEIGHTS=f32` loads the
    // weights dequantized, so no activation is quantized on stoker's side: a
    // probe of how much of the distance is llama.cpp's own activation rounding
    // (measured: Q8_0 0.0023, Q4_K_M 0.0042, about what the quantized path
    // measures).
    let only: Option<Vec<String>> = std::env::var("STOKER_PARITY_TYPES")
        .ok()
        .map(|v| v.split(',').map(|t| t.trim().to_owned()).collect());
    let weights = match std::env::var("STOKER_PARITY_WEIGHTS").as_deref() {
        Ok("f32") => stoker_executor::model::WeightMode::DequantizedF32,
        _ => stoker_executor::model::WeightMode::Native,
    };
    for (ty, entry) in manifest["files"].as_object().unwrap() {
        if only.as_ref().is_some_and(|o| !o.contains(ty)) {
            continue;
        }
        let path = rebuild(ty, entry, &sources, &content, &dir);
        let opts = LoadOptions {
            weights,
            ..LoadOptions::default()
        };
        let model = Model::load(&path, opts)
            .unwrap_or_else(|e| panic!("{ty}: stoker refuses llama.cpp's file: {e}"));
        if keep.is_none() {
            std::fs::remove_file(&path).unwrap();
        }
        let fix = fixture(ty);
        let tokens: Vec<u32> = fix["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let all: Vec<usize> = (0..tokens.len()).collect();
        let ours = common::teacher_forced(&model, &tokens, &all);
        let s = score(&fix, &all, &ours, NEAR_TIE);
        let cpu2 = fixture_cpu2(ty);
        assert_eq!(
            cpu2["tokens"], fix["tokens"],
            "{ty}: the two runs scored other tokens"
        );
        let s2 = score(&cpu2, &all, &ours, NEAR_TIE);
        let vocab = model.tokenizer.vocab_size();
        let (a_b, b_a) = (cross_kld(&fix, &cpu2, vocab), cross_kld(&cpu2, &fix, vocab));
        if !within_llama_cpp_spread(s.kld, s2.kld, a_b, b_a) {
            failures.push(format!(
                "{ty}: stoker is further from llama.cpp (KLD {:.6} and {:.6} to the two runs) than llama.cpp's two runs are from each other ({a_b:.6}, {b_a:.6})",
                s.kld, s2.kld
            ));
        }

        let results = fix["greedy"]["results"].as_array().unwrap();
        let prompts: Vec<Vec<u32>> = results
            .iter()
            .map(|r| {
                r["prompt_ids"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as u32)
                    .collect()
            })
            .collect();
        let generated = greedy(
            &model,
            &prompts,
            fix["greedy"]["n"].as_u64().unwrap() as usize,
        );
        let mut identical = 0;
        let mut diverged = Vec::new();
        for (r, g) in results.iter().zip(&generated) {
            let want: Vec<u32> = r["generated_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            if &want == g {
                identical += 1;
            } else {
                diverged.push(want.iter().zip(g).take_while(|(a, b)| a == b).count());
            }
        }
        let worst_tie = s.near_ties.iter().cloned().fold(0.0, f64::max);
        let meets = s.kld <= target && s.far.is_empty();
        rows.push(format!(
            "{ty:<7} KLD mean {:.6} (target {target:.6}; to the 2nd CPU's run {:.6}; llama.cpp's two runs {a_b:.6}) max {:.5} | top-1 {}/{} agree, {} near-ties (largest gap {worst_tie:.3}), {} far {:?} | greedy 32: {identical}/10 identical, others diverge after {diverged:?} tokens | {}",
            s.kld,
            s2.kld,
            s.max_kld,
            s.agree,
            s.positions,
            s.near_ties.len(),
            s.far.len(),
            s.far.iter().map(|f| f.0).collect::<Vec<_>>(),
            if meets { "meets the target" } else { "above the target" }
        ));
        if s.kld > bound {
            failures.push(format!("{ty}: mean KLD {:.6} exceeds {bound:.6}", s.kld));
        }
        if s.far.len() > FAR_MAX {
            failures.push(format!(
                "{ty}: {} disagreements are not near-ties",
                s.far.len()
            ));
        }
        for (gap, f) in s.far {
            if gap > FAR_GAP {
                failures.push(format!("{ty}: {f}"));
            }
        }
    }
    drop(scratch);
    eprintln!(
        "baseline KL(F16 || Q4_K_M), llama.cpp's own files: {baseline:.6}\n{}",
        rows.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
