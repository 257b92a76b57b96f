//! Mixed-load benchmark: does a chat feel a batch running beside it?
//!
//! For each step-planner setting, on a fresh engine, three phases of the same
//! length run one after another: the batch lane alone (16 rows in flight,
//! 128-token prompts, 8 output tokens, as the Batch API feeds it), chat alone
//! (2 closed-loop interactive clients, 48-token prompts, 32 output tokens),
//! and both together. It prints chat inter-token latency with the batch
//! running against chat alone, and the batch lane's throughput with chat
//! running against alone: the frontier the planner's target moves along. The
//! first row is the engine before the planner (token budgets only, the batch
//! lane capped at 32 tokens a step). The step-cost model's fit after each run
//! is printed with it, so the frontier can be read from the model:
//! a target of factor F lets the batch lane add (F - 1) times the chat
//! decodes' predicted cost to each chat step.
//!
//! Run: `cargo bench -p stoker-executor --bench mixed_load`
//! (`STOKER_BENCH_PHASE_SECS`, default 15, sets each phase's length).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use stoker_executor::scheduler::PlannerConfig;
use stoker_executor::{
    Engine, EngineConfig, EngineEvent, Lane, LoadOptions, Model, SamplingParams, TenantId,
    ValidRequest,
};
use stoker_test_support::{model_path, percentile};

const CHAT_CLIENTS: usize = 2;
const CHAT_PROMPT: usize = 48;
const CHAT_OUTPUT: usize = 32;
const BATCH_IN_FLIGHT: usize = 16;
const BATCH_PROMPT: usize = 128;
const BATCH_OUTPUT: usize = 8;

/// A prompt of exactly `n` tokens, distinct per `i` (so the prefix cache
/// favours no phase).
fn prompt(engine: &Engine, i: usize, n: usize) -> Vec<u32> {
    let text = format!(
        "Row {i}: summarise the shipping record, list the parties, the ports of call, \
         the cargo and the dates, and flag anything unusual about the route or the manifest. "
    );
    let mut ids = engine.tokenizer().encode(&text.repeat(8)).unwrap();
    assert!(ids.len() >= n);
    ids.truncate(n);
    ids
}

fn request(engine: &Engine, prompt: Vec<u32>, max_tokens: usize, lane: Lane) -> ValidRequest {
    let mut params = SamplingParams::greedy(max_tokens);
    params.stop_at_eos = false;
    ValidRequest::new(
        prompt,
        params,
        lane,
        TenantId::default(),
        &engine.model_limits(),
    )
    .unwrap()
}

/// Chat-side figures of one phase.
#[derive(Default)]
struct Chat {
    itl_ms: Vec<f64>,
    ttft_ms: Vec<f64>,
}

/// Runs the phase: chat clients and/or the batch feeder until `secs` pass.
/// Returns chat figures and batch rows finished.
fn phase(engine: &Arc<Engine>, chat: bool, batch: bool, secs: f64, salt: usize) -> (Chat, usize) {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let next = Arc::new(AtomicUsize::new(salt));
    let rows = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        let mut chats = Vec::new();
        let mut feeders = Vec::new();
        if batch {
            for _ in 0..BATCH_IN_FLIGHT {
                let (engine, next, rows) = (engine.clone(), next.clone(), rows.clone());
                feeders.push(s.spawn(move || {
                    while Instant::now() < deadline {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let req = request(
                            &engine,
                            prompt(&engine, i, BATCH_PROMPT),
                            BATCH_OUTPUT,
                            Lane::Batch,
                        );
                        let out = engine.submit(req).unwrap().collect_blocking();
                        assert!(out.error.is_none(), "{:?}", out.error);
                        if Instant::now() < deadline {
                            rows.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
        }
        if chat {
            for _ in 0..CHAT_CLIENTS {
                let (engine, next) = (engine.clone(), next.clone());
                chats.push(s.spawn(move || {
                    let mut c = Chat::default();
                    while Instant::now() < deadline {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let req = request(
                            &engine,
                            prompt(&engine, i, CHAT_PROMPT),
                            CHAT_OUTPUT,
                            Lane::Interactive,
                        );
                        let submitted = Instant::now();
                        let mut h = engine.submit(req).unwrap();
                        let mut last = None;
                        while let Some(ev) = h.next_blocking() {
                            match ev {
                                EngineEvent::Delta { .. } => {
                                    let now = Instant::now();
                                    match last {
                                        None => c.ttft_ms.push(ms(now - submitted)),
                                        Some(t) => c.itl_ms.push(ms(now - t)),
                                    }
                                    last = Some(now);
                                }
                                EngineEvent::Error(e) => panic!("{e}"),
                                _ => {}
                            }
                        }
                    }
                    c
                }));
            }
        }
        let mut all = Chat::default();
        for h in chats {
            let c = h.join().unwrap();
            all.itl_ms.extend(c.itl_ms);
            all.ttft_ms.extend(c.ttft_ms);
        }
        for f in feeders {
            f.join().unwrap();
        }
        all.itl_ms.sort_by(f64::total_cmp);
        all.ttft_ms.sort_by(f64::total_cmp);
        (all, rows.load(Ordering::Relaxed))
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let secs: f64 = std::env::var("STOKER_BENCH_PHASE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15.0);
    let settings: Vec<(&str, PlannerConfig)> = vec![
        ("before: token budgets only", PlannerConfig::TOKENS_ONLY),
        (
            "factor 1.5",
            PlannerConfig {
                interactive_itl_factor: 1.5,
                ..PlannerConfig::default()
            },
        ),
        ("factor 2 (default)", PlannerConfig::default()),
        (
            "factor 3",
            PlannerConfig {
                interactive_itl_factor: 3.0,
                ..PlannerConfig::default()
            },
        ),
        (
            "absolute 30 ms",
            PlannerConfig {
                interactive_itl_ms: 30.0,
                ..PlannerConfig::default()
            },
        ),
    ];
    println!(
        "## Mixed load: {CHAT_CLIENTS} closed-loop chat clients ({CHAT_PROMPT}-token prompts, {CHAT_OUTPUT} output tokens) beside the batch lane ({BATCH_IN_FLIGHT} rows in flight, {BATCH_PROMPT}-token prompts, {BATCH_OUTPUT} output tokens), {secs:.0} s per phase\n"
    );
    println!(
        "| planner | chat ITL p50 alone / with batch ms | ratio | chat ITL p99 alone / with batch ms | ratio | chat TTFT p50 alone / with batch ms | batch rows/s alone / with chat | batch share | step-cost model (fixed, per token, per row, per 1k pairs ms; error) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (k, (name, planner)) in settings.into_iter().enumerate() {
        let model = Model::load(&model_path(), LoadOptions::default())
            .expect("run scripts/fetch-model.sh first");
        let engine = Arc::new(
            Engine::start(
                model,
                EngineConfig {
                    planner,
                    ..EngineConfig::default()
                },
            )
            .unwrap(),
        );
        engine.warm_up().unwrap();
        let salt = 1_000_000 * (k + 1);
        let (_, solo_rows) = phase(&engine, false, true, secs, salt);
        let (alone, _) = phase(&engine, true, false, secs, salt + 300_000);
        let (mixed, mixed_rows) = phase(&engine, true, true, secs, salt + 600_000);
        let p = |v: &[f64], q| percentile(v, q);
        let c = engine.stats().planner.cost;
        let (a50, m50) = (p(&alone.itl_ms, 0.5), p(&mixed.itl_ms, 0.5));
        let (a99, m99) = (p(&alone.itl_ms, 0.99), p(&mixed.itl_ms, 0.99));
        println!(
            "| {name} | {a50:.1} / {m50:.1} | {:.2}x | {a99:.1} / {m99:.1} | {:.2}x | {:.1} / {:.1} | {:.2} / {:.2} | {:.0} % | {:.2}, {:.3}, {:.3}, {:.3}; {:.0} % |",
            m50 / a50,
            m99 / a99,
            p(&alone.ttft_ms, 0.5),
            p(&mixed.ttft_ms, 0.5),
            solo_rows as f64 / secs,
            mixed_rows as f64 / secs,
            100.0 * mixed_rows as f64 / solo_rows.max(1) as f64,
            c.fixed_ms,
            c.per_token_ms,
            c.per_sampled_row_ms,
            c.per_1k_attention_pairs_ms,
            100.0 * c.relative_error,
        );
    }
}
