//! Engine benchmark: throughput and latency at several concurrencies, prefix
//! caching on against off, a conversation's second turn under each attention
//! order, and the decode step against its memory and compute floors. Everything is measured side by side in one run and printed as
//! ratios, because the machine is shared and noisy.
//!
//! Run: `cargo bench -p stoker-executor --bench engine`
//!
//! Percentiles interpolate between closest ranks, as `stoker bench` reports them.
//! `STOKER_MODEL` names another GGUF file, `STOKER_BENCH_SECTIONS` picks sections
//! (`throughput,prefix,turns,floors`, the default all) and
//! `STOKER_BENCH_CONCURRENCY` the throughput table's rows (default `1,4,16,32`);
//! `scripts/bench-llama-cpp.sh` uses them to run beside `llama-batched-bench`.
//! `STOKER_BENCH_PLANNER=off` runs the engine without the step planner's
//! time targets (token budgets only, as before it), for old/new A/B runs.

use std::time::{Duration, Instant};

use stoker_executor::chat_template::ChatMessage;
use stoker_executor::{
    AttentionOrder, Engine, EngineConfig, EngineEvent, Lane, LoadOptions, Model, SamplingParams,
    TenantId, ValidRequest,
};
use stoker_test_support::{median, model_path, percentile};

const PROMPT_TOKENS: usize = 128;
const OUTPUT_TOKENS: usize = 128;
const REPLY_TOKENS: usize = 128;

struct RequestTrace {
    ttft: Duration,
    itl: Vec<Duration>,
    tokens: usize,
}

/// Whether `STOKER_BENCH_SECTIONS` (default: all) names `name`.
fn section(name: &str) -> bool {
    std::env::var("STOKER_BENCH_SECTIONS").map_or(true, |v| v.split(',').any(|s| s.trim() == name))
}

fn concurrencies() -> Vec<usize> {
    std::env::var("STOKER_BENCH_CONCURRENCY")
        .map(|v| {
            v.split(',')
                .map(|c| c.trim().parse().expect("STOKER_BENCH_CONCURRENCY: numbers"))
                .collect()
        })
        .unwrap_or_else(|_| vec![1, 4, 16, 32])
}

/// A prompt of exactly `n` tokens, distinct per `i`.
fn exact_prompt(engine: &Engine, i: usize, n: usize) -> Vec<u32> {
    let text = format!(
        "Request {i}. The history of computing is a story of abstraction layered upon abstraction, \
         from relays and vacuum tubes to transistors, integrated circuits, operating systems, compilers, \
         networks and the web, each layer hiding the one below it and enabling the next generation of \
         programmers to build ever larger systems with less effort than before. "
    );
    let mut ids = engine.tokenizer().encode(&text.repeat(4)).unwrap();
    assert!(ids.len() >= n);
    ids.truncate(n);
    ids
}

fn run(
    engine: &Engine,
    prompts: Vec<Vec<u32>>,
    max_tokens: usize,
) -> (Duration, Vec<RequestTrace>) {
    let start = Instant::now();
    let traces = std::thread::scope(|s| {
        let handles: Vec<_> = prompts
            .into_iter()
            .map(|p| s.spawn(move || trace(engine, p, max_tokens)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (start.elapsed(), traces)
}

/// `clients` closed-loop clients, each sending `per_client` requests one
/// after another (a new one as soon as its last finished).
fn closed_loop(
    engine: &Engine,
    clients: usize,
    per_client: usize,
    prompt: impl Fn(usize) -> Vec<u32> + Sync,
    max_tokens: usize,
) -> (Duration, Vec<RequestTrace>) {
    let start = Instant::now();
    let traces = std::thread::scope(|s| {
        let prompt = &prompt;
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                s.spawn(move || {
                    (0..per_client)
                        .map(|k| trace(engine, prompt(c * per_client + k), max_tokens))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    (start.elapsed(), traces)
}

/// Submits one greedy request and times its tokens as a client sees them.
fn trace(engine: &Engine, prompt: Vec<u32>, max_tokens: usize) -> RequestTrace {
    let req = greedy_request(engine, prompt, max_tokens);
    let submitted = Instant::now();
    let mut h = engine.submit(req).unwrap();
    let mut last = submitted;
    let mut ttft = None;
    let mut itl = Vec::new();
    let mut tokens = 0;
    while let Some(ev) = h.next_blocking() {
        match ev {
            EngineEvent::Delta { token_ids, .. } => {
                let now = Instant::now();
                if ttft.is_none() {
                    ttft = Some(now - submitted);
                } else {
                    itl.push(now - last);
                }
                last = now;
                tokens += token_ids.len();
            }
            EngineEvent::Finished { .. } => break,
            EngineEvent::Started { .. } | EngineEvent::PromptLogprobs(_) => {}
            EngineEvent::Error(e) => panic!("{e}"),
        }
    }
    RequestTrace {
        ttft: ttft.unwrap_or_default(),
        itl,
        tokens,
    }
}

/// An engine on a freshly loaded model (an empty prefix cache), warmed up.
fn fresh_engine(config: EngineConfig) -> Engine {
    let model = Model::load(&model_path(), LoadOptions::default()).unwrap();
    let engine = Engine::start(model, config).unwrap();
    engine.warm_up().unwrap();
    engine
}

/// An interactive greedy request for exactly `max_tokens` tokens.
fn greedy_request(engine: &Engine, prompt: Vec<u32>, max_tokens: usize) -> ValidRequest {
    let mut params = SamplingParams::greedy(max_tokens);
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

/// Runs one greedy request to `max_tokens` and returns what it produced.
fn collect(
    engine: &Engine,
    prompt: Vec<u32>,
    max_tokens: usize,
) -> stoker_executor::engine::Collected {
    engine
        .submit(greedy_request(engine, prompt, max_tokens))
        .unwrap()
        .collect_blocking()
}

/// Sustained read bandwidth over a buffer far larger than the caches, using
/// every core (as the decode step does).
fn memory_bandwidth_gbs() -> f64 {
    let n: usize = 256 << 20; // 1 GiB of f32
    let buf: Vec<f32> = (0..n).map(|i| (i & 7) as f32).collect();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut best = 0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let sum: f32 = std::thread::scope(|s| {
            buf.chunks(n.div_ceil(threads))
                .map(|c| {
                    s.spawn(move || {
                        let mut acc = [0f32; 16];
                        for ch in c.chunks_exact(16) {
                            for j in 0..16 {
                                acc[j] += ch[j];
                            }
                        }
                        acc.iter().sum::<f32>()
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|h| h.join().unwrap())
                .sum()
        });
        std::hint::black_box(sum);
        best = best.max((n * 4) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    best
}

/// Peak f32 FMA throughput of all cores on register-resident data: the
/// compute roof the batched step is compared against. Uses AVX2+FMA when the
/// CPU has them (as our kernels do), else plain multiply-adds.
fn peak_gflops() -> f64 {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let iters = 20_000_000u64;
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(move || {
                #[cfg(target_arch = "x86_64")]
                if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                    // SAFETY: the features the function enables were detected above.
                    unsafe { fma_loop(iters) };
                    return;
                }
                fma_loop_portable(iters);
            });
        }
    });
    // Each outer iteration is 64 multiply-adds = 128 flops.
    (threads as f64 * (iters / 8) as f64 * 128.0) / t.elapsed().as_secs_f64() / 1e9
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_loop(iters: u64) {
    fma_loop_portable(iters)
}

#[inline(always)]
fn fma_loop_portable(iters: u64) {
    let mut acc = [[1f32; 8]; 8];
    let m = std::hint::black_box([0.999_999f32; 8]);
    let a = std::hint::black_box([1e-7f32; 8]);
    for _ in 0..iters / 8 {
        for r in acc.iter_mut() {
            for j in 0..8 {
                r[j] = r[j].mul_add(m[j], a[j]);
            }
        }
    }
    std::hint::black_box(acc);
}

fn main() {
    let model = Model::load(&model_path(), LoadOptions::default())
        .expect("run scripts/fetch-model.sh first");
    let weight_bytes = model.weights.byte_size();
    let rss_loaded = resident_mb();
    let cfg = model.config.clone();
    // Multiply-adds per token in the matmuls (every layer plus the head).
    let h = cfg.hidden;
    let per_layer = h * cfg.qkv_width() + h * h + 3 * h * cfg.ffn;
    let flops_per_token = 2.0 * (cfg.n_layers * per_layer + cfg.vocab_size * h) as f64;
    let planner = match std::env::var("STOKER_BENCH_PLANNER").as_deref() {
        Ok("off") => stoker_executor::scheduler::PlannerConfig::TOKENS_ONLY,
        Ok("default") | Err(_) => stoker_executor::scheduler::PlannerConfig::default(),
        Ok(other) => panic!("STOKER_BENCH_PLANNER: off or default, not {other}"),
    };
    println!("Step planner: {planner:?}\n");
    let engine = Engine::start(
        model,
        EngineConfig {
            max_num_seqs: 64,
            max_batched_tokens: 512,
            planner,
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let rss_started = resident_mb();
    engine.warm_up().unwrap();
    println!(
        "Memory: weights {:.1} MB; resident {rss_loaded} after load, {rss_started} with the engine started ({} KV blocks), {} after warm-up\n",
        weight_bytes as f64 / 1e6,
        engine.info().num_kv_blocks,
        resident_mb(),
    );

    println!(
        "## Throughput and latency ({PROMPT_TOKENS}-token prompts, {OUTPUT_TOKENS} output tokens, greedy; c closed-loop clients, max(2, ceil(8 / c)) requests each)\n"
    );
    println!(
        "| concurrency | output tok/s | ratio to c=1 | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | decode tok/s (c × 1000 / ITL p50) | prefill tok/s (c × {PROMPT_TOKENS} / TTFT p50) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut base = None;
    let mut itl_c1 = f64::NAN;
    let mut itl_c32 = f64::NAN;
    let sections = [
        section("throughput"),
        section("prefix"),
        section("turns"),
        section("floors"),
    ];
    let table: Vec<usize> = if sections[0] || sections[3] {
        concurrencies()
    } else {
        Vec::new()
    };
    for c in table {
        // Closed loop, at least 8 requests and two rounds per level, so the
        // percentiles have samples behind them.
        let per_client = (8usize.div_ceil(c)).max(2);
        let (wall, traces) = closed_loop(
            &engine,
            c,
            per_client,
            |i| exact_prompt(&engine, i + 1000 * c, PROMPT_TOKENS),
            OUTPUT_TOKENS,
        );
        let tokens: usize = traces.iter().map(|t| t.tokens).sum();
        let tps = tokens as f64 / wall.as_secs_f64();
        let b = *base.get_or_insert(tps);
        let mut ttft: Vec<f64> = traces.iter().map(|t| t.ttft.as_secs_f64() * 1e3).collect();
        let mut itl: Vec<f64> = traces
            .iter()
            .flat_map(|t| t.itl.iter().map(|d| d.as_secs_f64() * 1e3))
            .collect();
        ttft.sort_by(f64::total_cmp);
        itl.sort_by(f64::total_cmp);
        let itl50 = percentile(&itl, 0.5);
        if c == 1 {
            itl_c1 = itl50;
        }
        if c == 32 {
            itl_c32 = itl50;
        }
        let ttft50 = percentile(&ttft, 0.5);
        println!(
            "| {c} | {tps:.1} | {:.2}x | {ttft50:.1} | {:.1} | {itl50:.2} | {:.2} | {:.1} | {:.1} |",
            tps / b,
            percentile(&ttft, 0.99),
            percentile(&itl, 0.99),
            c as f64 * 1e3 / itl50,
            (c * PROMPT_TOKENS) as f64 * 1e3 / ttft50,
        );
    }
    drop(engine);
    if !sections[1] && !sections[2] && !sections[3] {
        return;
    }

    if sections[1] {
        prefix_section();
    }
    if sections[2] {
        turns_section();
    }
    if sections[3] {
        floors_section(weight_bytes, flops_per_token, itl_c1, itl_c32);
    }
}

fn prefix_section() {
    println!(
        "\n## Prefix caching: 16 requests sharing a 512-token system prompt (sequential arrival, 8 output tokens)\n"
    );
    let system: String = "You are a meticulous assistant for a logistics company. ".repeat(60);
    let mut ttft_by_mode = Vec::new();
    for caching in [true, false] {
        let engine = fresh_engine(EngineConfig {
            enable_prefix_caching: caching,
            ..EngineConfig::default()
        });
        let mut ttfts = Vec::new();
        let mut prompt_len = 0;
        for i in 0..16 {
            let messages = [
                ChatMessage::new("system", system.clone()),
                ChatMessage::new("user", format!("Where is parcel number {i}?")),
            ];
            let text = engine.chat_template().render(&messages, true).unwrap();
            let ids = engine.tokenizer().encode(&text).unwrap();
            prompt_len = ids.len();
            let (_, traces) = run(&engine, vec![ids], 8);
            ttfts.push(traces[0].ttft.as_secs_f64() * 1e3);
        }
        let p50 = median(ttfts);
        let s = engine.stats();
        println!(
            "- prefix caching {}: prompt {prompt_len} tokens, TTFT p50 {p50:.1} ms, prefix-cache hits {}/{} tokens",
            if caching { "on" } else { "off" },
            s.prefix_cache_hits,
            s.prefix_cache_queries
        );
        ttft_by_mode.push(p50);
    }
    println!(
        "- TTFT p50 off/on: {:.1}x",
        ttft_by_mode[1] / ttft_by_mode[0]
    );
}

fn turns_section() {
    println!(
        "\n## Attention order: a conversation's second turn (8 conversations, {REPLY_TOKENS}-token replies)\n"
    );
    let mut turn2 = Vec::new();
    for order in [AttentionOrder::Reference, AttentionOrder::Position] {
        let engine = fresh_engine(EngineConfig {
            attention_order: order,
            ..EngineConfig::default()
        });
        let (mut ttfts, mut cached, mut prompt) = (Vec::new(), 0, 0);
        for i in 0..8 {
            let user = |content: String| ChatMessage::new("user", content);
            let render = |m: &[ChatMessage]| {
                let text = engine.chat_template().render(m, true).unwrap();
                engine.tokenizer().encode(&text).unwrap()
            };
            let turn1 = render(&[user(format!("Tell me about harbour number {i}."))]);
            let reply = collect(&engine, turn1.clone(), REPLY_TOKENS).token_ids;
            let follow_up = render(&[user("And its lighthouse?".into())]);
            let ids = [turn1, reply, follow_up].concat();
            prompt = ids.len();
            let second = collect(&engine, ids, 8);
            ttfts.push(second.timings.ttft.as_secs_f64() * 1e3);
            cached += second.usage.cached_prompt_tokens;
        }
        let p50 = median(ttfts);
        println!(
            "- {order:?} order: second-turn prompt {prompt} tokens, TTFT p50 {p50:.1} ms, {:.0} tokens from the prefix cache on average",
            cached as f64 / 8.0
        );
        turn2.push(p50);
    }
    println!(
        "- second-turn TTFT p50 reference / position: {:.2}x",
        turn2[0] / turn2[1]
    );
}

fn floors_section(weight_bytes: usize, flops_per_token: f64, itl_c1: f64, itl_c32: f64) {
    println!("\n## Decode step against its floors\n");
    let bw = memory_bandwidth_gbs();
    let peak = peak_gflops();
    let floor_ms = weight_bytes as f64 / (bw * 1e9) * 1e3;
    println!(
        "- weights read per step: {:.1} MB; measured read bandwidth {bw:.1} GB/s",
        weight_bytes as f64 / 1e6
    );
    println!(
        "- decode step at c=1 (ITL p50): {itl_c1:.2} ms; memory floor {floor_ms:.2} ms; ratio {:.2}x",
        itl_c1 / floor_ms
    );
    let compute_ms = flops_per_token * 32.0 / (peak * 1e9) * 1e3;
    println!(
        "- batched step at c=32 (ITL p50): {itl_c32:.2} ms; compute floor {compute_ms:.2} ms at {peak:.0} GFLOP/s f32 FMA peak ({:.2} GFLOP per token); ratio {:.2}x",
        flops_per_token / 1e9,
        itl_c32 / compute_ms
    );
}

/// The process's resident memory in bytes: (total, anonymous, file-backed), from
/// Linux's `/proc/self/status` (`VmRSS`, `RssAnon`, `RssFile`).
fn resident() -> (u64, u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("RssAnon:"), field("RssFile:"))
}

/// `resident()` in MB, as "total (anonymous + file)".
fn resident_mb() -> String {
    let (total, anon, file) = resident();
    format!(
        "{:.1} MB ({:.1} anonymous + {:.1} file-backed)",
        total as f64 / 1e6,
        anon as f64 / 1e6,
        file as f64 / 1e6
    )
}
