//! A Hugging Face directory in BF16, quantized to Q8_0 while loading
//! (`--quantize q8_0`), against the same model's GGUF Q8_0 file: load time,
//! decode speed at 1 and 16 concurrent sequences, and the result's parity.
//! Everything is measured side by side in one run, rounds alternating, and
//! printed as ratios (the machine is shared and noisy).
//!
//! Run: `scripts/make-hf-smollm2.sh && cargo bench -p stoker-executor --bench hf_dir`
//!
//! The files are SmolLM2-135M-Instruct exported from its GGUF by the script:
//! the BF16 directory, the F16 directory, and a Q8_0 GGUF quantized from
//! the F16 values by gguf-py (ggml's reference Q8_0). Parity is reported two
//! ways: the F16 directory quantized at load gives byte-identical Q8_0
//! matrices to that file (the quantizer is ggml's), and the BF16 directory's
//! greedy tokens are compared with the file's (BF16 rounds the weights
//! before quantization, so a few tokens may differ).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use stoker_executor::kernels::QDtype;
use stoker_executor::model::WeightMode;
use stoker_executor::{
    Engine, EngineConfig, EngineEvent, Lane, LoadOptions, Model, SamplingParams, TenantId,
    ValidRequest,
};
use stoker_test_support::{median, repo_root};

const PROMPT_TOKENS: usize = 128;
const OUTPUT_TOKENS: usize = 128;
const ROUNDS: usize = 5;

fn path(name: &str) -> PathBuf {
    let p = repo_root().join("models/hf").join(name);
    assert!(
        p.exists(),
        "missing {}: run scripts/make-hf-smollm2.sh",
        p.display()
    );
    p
}

fn load(p: &Path, weights: WeightMode) -> (Model, Duration) {
    let t = Instant::now();
    let m = Model::load(
        p,
        LoadOptions {
            weights,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("loading {}: {e}", p.display()));
    (m, t.elapsed())
}

fn prompt(engine: &Engine, i: usize) -> Vec<u32> {
    let text = format!(
        "Request {i}. A lighthouse keeper trims the wick, winds the clockwork and watches \
         the beam sweep across the grey water, counting the ships that pass in the night. "
    );
    let mut ids = engine.tokenizer().encode(&text.repeat(8)).unwrap();
    ids.truncate(PROMPT_TOKENS);
    ids
}

fn request(engine: &Engine, prompt: Vec<u32>) -> ValidRequest {
    let mut params = SamplingParams::greedy(OUTPUT_TOKENS);
    params.stop_at_eos = false;
    ValidRequest::new(
        prompt,
        params,
        Lane::Interactive,
        TenantId::default(),
        &engine.model_limits(),
    )
    .unwrap()
}

/// Decode tokens per second over `clients` concurrent greedy sequences,
/// counted from each sequence's first token (prefill excluded).
fn decode_rate(engine: &Engine, clients: usize, round: usize) -> f64 {
    let per: Vec<(usize, Duration)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..clients)
            .map(|c| {
                let p = prompt(engine, round * 100 + c);
                s.spawn(move || {
                    let mut h = engine.submit(request(engine, p)).unwrap();
                    let (mut first, mut tokens) = (None, 0usize);
                    while let Some(ev) = h.next_blocking() {
                        match ev {
                            EngineEvent::Delta { token_ids, .. } => {
                                if first.is_none() {
                                    first = Some(Instant::now());
                                } else {
                                    tokens += token_ids.len();
                                }
                            }
                            EngineEvent::Finished { .. } => break,
                            EngineEvent::Error(e) => panic!("{e}"),
                            _ => {}
                        }
                    }
                    (tokens, first.map_or(Duration::ZERO, |f| f.elapsed()))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let tokens: usize = per.iter().map(|p| p.0).sum();
    let span = per.iter().map(|p| p.1).max().unwrap_or_default();
    tokens as f64 / span.as_secs_f64()
}

fn greedy(engine: &Engine, i: usize) -> Vec<u32> {
    engine
        .submit(request(engine, prompt(engine, i)))
        .unwrap()
        .collect_blocking()
        .token_ids
}

fn q8_bytes(m: &Model) -> Vec<Vec<u8>> {
    m.weights
        .matrices()
        .into_iter()
        .map(|x| x.to_ggml_bytes())
        .collect()
}

fn main() {
    let gguf = path("SmolLM2-135M-Instruct.Q8_0.gguf");
    let bf16 = path("SmolLM2-135M-Instruct-bf16");
    let f16 = path("SmolLM2-135M-Instruct-f16");
    let q8 = WeightMode::Quantize(QDtype::Q8_0);

    // Load times, alternating, medians of ROUNDS (the page cache is warm
    // after the first round of each, as on a server's restart).
    let (mut t_gguf, mut t_dir, mut t_dir_native) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        t_gguf.push(load(&gguf, WeightMode::Native).1.as_secs_f64() * 1e3);
        t_dir.push(load(&bf16, q8).1.as_secs_f64() * 1e3);
        t_dir_native.push(load(&bf16, WeightMode::Native).1.as_secs_f64() * 1e3);
    }
    println!("load time, median of {ROUNDS} (ms):");
    println!(
        "  GGUF Q8_0 file                 {:8.1}",
        median(t_gguf.clone())
    );
    println!(
        "  BF16 directory, --quantize q8_0 {:7.1}",
        median(t_dir.clone())
    );
    println!(
        "  BF16 directory, as stored      {:8.1}",
        median(t_dir_native.clone())
    );

    // Parity of the quantizer: the F16 directory at load against the file
    // gguf-py quantized from the same F16 values.
    let (from_dir, _) = load(&f16, q8);
    let (file, _) = load(&gguf, WeightMode::Native);
    let (a, b) = (q8_bytes(&from_dir), q8_bytes(&file));
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count();
    println!(
        "parity: F16 directory quantized at load vs the Q8_0 file: {same} of {} matrices byte-identical",
        a.len()
    );
    drop(from_dir);

    let cfg = EngineConfig::default;
    let engine_file = Engine::start(file, cfg()).unwrap();
    engine_file.warm_up().unwrap();
    let engine_dir = Engine::start(load(&bf16, q8).0, cfg()).unwrap();
    engine_dir.warm_up().unwrap();

    let mut agree = 0;
    let mut total = 0;
    for i in 0..4 {
        let (x, y) = (greedy(&engine_file, i), greedy(&engine_dir, i));
        let common = x.iter().zip(&y).take_while(|(p, q)| p == q).count();
        agree += common;
        total += x.len();
    }
    println!(
        "parity: BF16 directory (q8_0 at load) vs Q8_0 file, greedy: {agree} of {total} tokens \
         agree before the first difference (4 prompts x {OUTPUT_TOKENS})"
    );

    println!(
        "\ndecode tok/s, median of {ROUNDS} alternating rounds ({PROMPT_TOKENS}-token prompts, {OUTPUT_TOKENS} tokens):"
    );
    println!("| sequences | GGUF Q8_0 | BF16 dir --quantize q8_0 | dir / file |");
    println!("|---|---|---|---|");
    for clients in [1, 16] {
        let (mut f, mut d) = (Vec::new(), Vec::new());
        for r in 0..ROUNDS {
            f.push(decode_rate(&engine_file, clients, r));
            d.push(decode_rate(&engine_dir, clients, r));
        }
        let (mf, md) = (median(f), median(d));
        println!("| {clients} | {mf:.1} | {md:.1} | {:.3} |", md / mf);
    }
}
