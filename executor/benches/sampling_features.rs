//! What the scoring features cost in decode throughput: a JSON-schema
//! constrained generation and `top_logprobs: 20`, each against plain greedy
//! decoding of the same length, measured side by side in one run
//! (alternating rounds, medians) and printed as ratios.
//!
//! Run: `cargo bench -p stoker-executor --bench sampling_features`
//!
//! The constrained requests follow `{"type": "string", "minLength": 100000}`,
//! so the grammar never lets them end early and every variant generates
//! exactly `OUTPUT_TOKENS` tokens; the mask is computed at every step.
//! `STOKER_MODEL` names another GGUF file.

use std::time::Instant;

use serde_json::json;
use stoker_executor::structured::StructuredOutput;
use stoker_executor::{
    Engine, EngineConfig, Lane, LoadOptions, Model, SamplingParams, TenantId, ValidRequest,
};
use stoker_test_support::{median, model_path};

const OUTPUT_TOKENS: usize = 64;
const ROUNDS: usize = 5;

#[derive(Clone, Copy, Debug)]
enum Variant {
    Plain,
    Constrained,
    TopLogprobs20,
}

fn params(v: Variant) -> SamplingParams {
    let mut p = SamplingParams::greedy(OUTPUT_TOKENS);
    p.stop_at_eos = false;
    match v {
        Variant::Plain => {}
        Variant::Constrained => {
            p.structured = Some(StructuredOutput::JsonSchema(
                json!({"type": "string", "minLength": 100000}),
            ));
        }
        Variant::TopLogprobs20 => p.logprobs = Some(20),
    }
    p
}

/// Output tokens per second of `concurrency` requests of variant `v`.
fn round(engine: &Engine, v: Variant, concurrency: usize, salt: usize) -> f64 {
    let started = Instant::now();
    let handles: Vec<_> = (0..concurrency)
        .map(|i| {
            let text = format!("Write a long story about the number {}.", salt * 100 + i);
            let prompt = engine.tokenizer().encode(&text).unwrap();
            let req = ValidRequest::new(
                prompt,
                params(v),
                Lane::Interactive,
                TenantId::default(),
                &engine.model_limits(),
            )
            .unwrap();
            engine.submit(req).unwrap()
        })
        .collect();
    let mut tokens = 0;
    for mut h in handles {
        let c = h.collect_blocking();
        assert!(c.error.is_none(), "{v:?}: {:?}", c.error);
        assert_eq!(c.token_ids.len(), OUTPUT_TOKENS, "{v:?}");
        tokens += c.token_ids.len();
    }
    tokens as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let path = std::env::var("STOKER_MODEL").map_or_else(|_| model_path(), Into::into);
    let model = Model::load(&path, LoadOptions::default()).unwrap();
    let engine = Engine::start(model, EngineConfig::default()).unwrap();
    engine.warm_up().unwrap();
    // Builds the vocabulary's token trie once, outside the timings.
    engine.tokenizer().grammars().unwrap();
    println!("## Scoring features against plain greedy decoding\n");
    println!("{OUTPUT_TOKENS} output tokens per request, median of {ROUNDS} alternating rounds.\n");
    println!(
        "| concurrency | plain tok/s | json_schema tok/s | ratio | top_logprobs 20 tok/s | ratio |"
    );
    println!("|---|---|---|---|---|---|");
    for concurrency in [1, 8] {
        let mut runs = [Vec::new(), Vec::new(), Vec::new()];
        for r in 0..ROUNDS {
            for (k, v) in [Variant::Plain, Variant::Constrained, Variant::TopLogprobs20]
                .into_iter()
                .enumerate()
            {
                runs[k].push(round(&engine, v, concurrency, r));
            }
        }
        let [plain, constrained, logprobs] = runs.map(median);
        println!(
            "| {concurrency} | {plain:.1} | {constrained:.1} | {:.3} | {logprobs:.1} | {:.3} |",
            constrained / plain,
            logprobs / plain
        );
    }
}
