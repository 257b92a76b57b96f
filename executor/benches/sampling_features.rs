//! What the scoring features cost in decode throughput: a JSON-schema
//! constrained generation and `top_logprobs: 20`, each against plain greedy
//! decoding of the same length; `n = 4` against four separate requests
//! (first-token time and throughput); and prompt scoring (`echo`) against
//! a plain prefill of the same prompt. Each pair is measured side by side
//! in one run (alternating rounds, medians) and printed as ratios.
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
const ROUNDS: usize = 9;

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
    per_token_costs(&engine);
    println!("## Scoring features against plain greedy decoding\n");
    println!("{OUTPUT_TOKENS} output tokens per request, median of {ROUNDS} alternating rounds.\n");
    println!(
        "| concurrency | plain tok/s | json_schema tok/s | ratio | top_logprobs 20 tok/s | ratio |"
    );
    println!("|---|---|---|---|---|---|");
    for concurrency in [1, 8, 16] {
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
    choices_against_separate_requests(&engine);
    prompt_scoring_against_prefill(&engine);
}

/// A prompt of about `words` words, different for each `salt`.
fn long_prompt(engine: &Engine, words: usize, salt: usize) -> Vec<u32> {
    let text: String = (0..words)
        .map(|i| format!("w{} ", (i * 7919 + salt * 104_729) % 100_003))
        .collect();
    engine.tokenizer().encode(&text).unwrap()
}

fn request(engine: &Engine, prompt: Vec<u32>, params: SamplingParams) -> ValidRequest {
    ValidRequest::new(
        prompt,
        params,
        Lane::Interactive,
        TenantId::default(),
        &engine.model_limits(),
    )
    .unwrap()
}

/// `n = 4` in one request against four separate requests for the same
/// prompt: the mean first-token time of the four, and output tokens per
/// second over all of them.
fn choices_against_separate_requests(engine: &Engine) {
    const N: usize = 4;
    let params = |seed| SamplingParams {
        temperature: 1.0,
        seed: Some(seed),
        stop_at_eos: false,
        ..SamplingParams::greedy(OUTPUT_TOKENS)
    };
    let run = |together: bool, salt: usize| -> (f64, f64) {
        // A prompt of its own: neither run is served from the other's cache.
        let prompt = long_prompt(engine, 100, 1000 + salt);
        let started = Instant::now();
        let handles = if together {
            engine
                .submit_n(request(engine, prompt, params(salt as u64)), N)
                .unwrap()
        } else {
            (0..N)
                .map(|i| {
                    let p = params(salt as u64 + i as u64);
                    engine.submit(request(engine, prompt.clone(), p)).unwrap()
                })
                .collect()
        };
        let mut ttft = 0.0;
        let mut tokens = 0;
        for mut h in handles {
            let c = h.collect_blocking();
            assert!(c.error.is_none(), "{:?}", c.error);
            ttft += c.timings.ttft.as_secs_f64() * 1e3 / N as f64;
            tokens += c.token_ids.len();
        }
        (ttft, tokens as f64 / started.elapsed().as_secs_f64())
    };
    let (mut together, mut apart) = (Vec::new(), Vec::new());
    for r in 0..ROUNDS {
        apart.push(run(false, 2 * r));
        together.push(run(true, 2 * r + 1));
    }
    let med = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| median(v.iter().map(f).collect());
    let (t_ttft, t_tps) = (med(&together, |x| x.0), med(&together, |x| x.1));
    let (a_ttft, a_tps) = (med(&apart, |x| x.0), med(&apart, |x| x.1));
    println!("\n## n = {N} against {N} separate requests\n");
    println!(
        "A prompt of {} tokens, {OUTPUT_TOKENS} output tokens per choice, median of {ROUNDS} alternating rounds.\n",
        long_prompt(engine, 100, 1000).len()
    );
    println!("| | mean TTFT ms | output tok/s |");
    println!("|---|---|---|");
    println!("| {N} separate requests | {a_ttft:.1} | {a_tps:.1} |");
    println!("| n = {N} | {t_ttft:.1} | {t_tps:.1} |");
    println!(
        "| ratio (n / separate) | {:.3} | {:.3} |",
        t_ttft / a_ttft,
        t_tps / a_tps
    );
}

/// Scoring a prompt (`echo` with `logprobs`, `max_tokens` 0) against a
/// plain prefill of the same length that samples one token: what computing
/// the language-model head and a log-softmax on every prompt row adds.
fn prompt_scoring_against_prefill(engine: &Engine) {
    let run = |top: Option<usize>, salt: usize| -> f64 {
        // A fresh prompt each time, so no run is served from the cache.
        let prompt = long_prompt(engine, 150, 5000 + salt);
        let params = SamplingParams {
            prompt_logprobs: top,
            ..SamplingParams::greedy(if top.is_some() { 0 } else { 1 })
        };
        let started = Instant::now();
        let c = engine
            .submit(request(engine, prompt, params))
            .unwrap()
            .collect_blocking();
        assert!(c.error.is_none(), "{:?}", c.error);
        started.elapsed().as_secs_f64() * 1e3
    };
    let mut runs = [Vec::new(), Vec::new(), Vec::new()];
    for r in 0..ROUNDS {
        runs[0].push(run(None, 3 * r));
        runs[1].push(run(Some(0), 3 * r + 1));
        runs[2].push(run(Some(5), 3 * r + 2));
    }
    let [plain, scored, top5] = runs.map(median);
    println!("\n## Prompt scoring against a plain prefill\n");
    println!(
        "A fresh prompt of {} tokens each run, one request at a time, median of {ROUNDS} alternating rounds.\n",
        long_prompt(engine, 150, 5000).len()
    );
    println!("| | ms | ratio |");
    println!("|---|---|---|");
    println!("| prefill, one token sampled | {plain:.1} | 1.000 |");
    println!(
        "| scored (`echo`, `logprobs: 0`, `max_tokens: 0`) | {scored:.1} | {:.3} |",
        scored / plain
    );
    println!("| scored with top 5 | {top5:.1} | {:.3} |", top5 / plain);
}

/// The per-token work each feature adds, timed alone (steadier than the
/// throughput ratios on a shared machine): a log-softmax with the top 20
/// over one vocabulary row, and one grammar step (mask, apply, advance).
fn per_token_costs(engine: &Engine) {
    use stoker_executor::logprobs::token_logprob;
    const CALLS: usize = 2000;
    let vocab = engine.info().vocab_size;
    let row: Vec<f32> = (0..vocab)
        .map(|i| ((i as u64 * 2_654_435_761) % 10_007) as f32 / 500.0 - 10.0)
        .collect();
    // Built first: the engine's background build would share the cores.
    let grammars = engine.tokenizer().grammars().unwrap();
    let mut scratch = Vec::new();
    let started = Instant::now();
    for i in 0..CALLS {
        std::hint::black_box(token_logprob(&row, i as u32, 20, &mut scratch));
    }
    let logprob_us = started.elapsed().as_secs_f64() * 1e6 / CALLS as f64;

    let format = StructuredOutput::JsonSchema(json!({
        "type": "object", "additionalProperties": false, "required": ["label", "reason"],
        "properties": {"label": {"enum": ["positive", "negative", "neutral"]},
                       "reason": {"type": "string", "minLength": 100000}}}));
    let mut c = grammars.compile(&format).unwrap();
    let mut logits = row.clone();
    let started = Instant::now();
    for _ in 0..CALLS {
        let mask = c.mask().unwrap();
        logits.copy_from_slice(&row);
        mask.apply(&mut logits);
        let tok = (0..vocab as u32).find(|&t| mask.allows(t)).unwrap();
        c.consume(tok).unwrap();
    }
    let grammar_us = started.elapsed().as_secs_f64() * 1e6 / CALLS as f64;
    println!("## Per-token cost\n");
    println!("| work | µs per token |");
    println!("|---|---|");
    println!("| log-softmax and top 20 over {vocab} logits | {logprob_us:.1} |");
    println!(
        "| grammar step: mask, apply, advance (JSON object, string field) | {grammar_us:.1} |\n"
    );
}
