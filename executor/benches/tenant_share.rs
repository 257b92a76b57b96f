//! Tenant-share benchmark: does a light tenant's chat feel another tenant's
//! flood in the same (interactive) lane?
//!
//! Tenant A floods: 32 closed-loop streams of 400-token prompts (distinct
//! from the first block on, so the prefix cache helps no one) with 32 output
//! tokens. Tenant B chats: 2 closed-loop streams of 40-token prompts with 16
//! output tokens. For fair share on and off, each on a fresh engine
//! configured as `stoker serve` configures it by default
//! (`EngineConfig::default()`, which `api/src/config.rs` copies: 64 running
//! sequences, 512 tokens a step, planner factor 2), three phases of the same
//! length run one after another: B alone, A alone, and both. In the last,
//! B's streams start `lead` seconds after A's (a fifth of the phase, at most
//! 2 s), so B meets a flood in progress rather than its very first step, and
//! B's figures cover the rest of the phase.
//!
//! Printed: B's time to first token (p50 and p99) alone and with A, the
//! ratio of the p99s, B's time in the waiting queue, and A's throughput
//! (prompt and output tokens the engine computed for A a second, from the
//! engine's per-step counters less B's tokens) with B as a share of A alone.
//! The targets: B's p99 ratio at most 2.5 with fair share on, A keeping at
//! least 90 % of its throughput. `STOKER_BENCH_VERBOSE=1` also prints each
//! of B's requests in the mixed phase (when submitted, queue, TTFT).
//!
//! Run: `cargo bench -p stoker-executor --bench tenant_share`
//! (`STOKER_BENCH_PHASE_SECS`, default 15, sets each phase's length).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use stoker_executor::{
    Engine, EngineConfig, EngineEvent, Lane, LoadOptions, Model, SamplingParams, TenantId,
    ValidRequest,
};
use stoker_test_support::{model_path, percentile};

const A_STREAMS: usize = 32;
const A_PROMPT: usize = 400;
const A_OUTPUT: usize = 32;
const B_STREAMS: usize = 2;
const B_PROMPT: usize = 40;
const B_OUTPUT: usize = 16;

/// Natural text, tokenized once: every prompt is a prefix of it whose first
/// tokens spell the request's number, so prompts differ from the first
/// block on and cost the client no tokenizer time (which on a small machine
/// would take cores from the engine).
fn base_text(engine: &Engine) -> Vec<u32> {
    let text = "Summarise the shipping record, list the parties, the ports of call, \
         the cargo and the dates, and flag anything unusual about the route or the manifest. ";
    let ids = engine.tokenizer().encode(&text.repeat(16)).unwrap();
    assert!(ids.len() >= A_PROMPT);
    ids
}

/// The `n`-token prompt of request `i`.
fn prompt(base: &[u32], i: usize, n: usize) -> Vec<u32> {
    let mut p = base[..n].to_vec();
    p[0] = 1_000 + (i % 20_000) as u32;
    p[1] = 1_000 + (i / 20_000 % 20_000) as u32;
    p
}

fn request(engine: &Engine, tenant: &str, prompt: Vec<u32>, max_tokens: usize) -> ValidRequest {
    let mut params = SamplingParams::greedy(max_tokens);
    params.stop_at_eos = false;
    ValidRequest::new(
        prompt,
        params,
        Lane::Interactive,
        TenantId(tenant.to_string()),
        &engine.model_limits(),
    )
    .unwrap()
}

/// What one tenant's streams saw in a phase.
#[derive(Default)]
struct Seen {
    ttft_ms: Vec<f64>,
    /// Submission to first scheduled (the waiting queue).
    queue_ms: Vec<f64>,
    /// Per request: submitted (s into the phase), queue ms, TTFT ms.
    log: Vec<(f64, f64, f64)>,
}

/// Which stream, and the phase's clock.
struct Stream<'a> {
    engine: &'a Engine,
    base: &'a [u32],
    tenant: &'static str,
    next: &'a AtomicUsize,
    /// Prompt and output tokens.
    len: (usize, usize),
    start: Instant,
    deadline: Instant,
}

/// One closed-loop stream until the deadline.
fn stream(s: Stream<'_>) -> Seen {
    let mut seen = Seen::default();
    while Instant::now() < s.deadline {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        let req = request(s.engine, s.tenant, prompt(s.base, i, s.len.0), s.len.1);
        let submitted = Instant::now();
        let mut h = s.engine.submit(req).unwrap();
        let (mut first, mut queued) = (true, f64::NAN);
        while let Some(ev) = h.next_blocking() {
            match ev {
                EngineEvent::Started { queue } => {
                    queued = ms(queue);
                    seen.queue_ms.push(queued);
                }
                EngineEvent::Delta { .. } if first => {
                    let ttft = ms(submitted.elapsed());
                    seen.ttft_ms.push(ttft);
                    let at = (submitted - s.start).as_secs_f64();
                    seen.log.push((at, queued, ttft));
                    first = false;
                }
                EngineEvent::Error(e) => panic!("{e}"),
                _ => {}
            }
        }
    }
    seen
}

/// Tokens the engine has computed in the interactive lane so far.
fn computed(engine: &Engine) -> f64 {
    let st = engine.stats().steps;
    st.prefill_tokens.interactive.sum + st.decode_rows.interactive.sum
}

/// What a phase measured.
struct Phase {
    a: Seen,
    b: Seen,
    /// Tokens the engine computed for A a second.
    a_tokens_per_s: f64,
    /// Mean step duration, ms.
    step_ms: f64,
}

/// Runs A's streams (if `a`) for `secs` and B's (if `b`) from `lead`
/// seconds in to the same deadline.
fn phase(
    engine: &Arc<Engine>,
    base: &[u32],
    (a, b): (bool, bool),
    secs: f64,
    salt: usize,
) -> Phase {
    let lead = if a && b { (secs / 5.0).min(2.0) } else { 0.0 };
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let next = AtomicUsize::new(salt);
    let before = (computed(engine), engine.stats().steps.seconds.interactive);
    let (a_seen, b_seen) = std::thread::scope(|s| {
        let spawn = |tenant: &'static str, n: usize, len: (usize, usize), delay: f64| {
            (0..n)
                .map(|_| {
                    let (engine, next) = (&**engine, &next);
                    s.spawn(move || {
                        std::thread::sleep(Duration::from_secs_f64(delay));
                        stream(Stream {
                            engine,
                            base,
                            tenant,
                            next,
                            len,
                            start,
                            deadline,
                        })
                    })
                })
                .collect::<Vec<_>>()
        };
        let a_streams = if a {
            spawn("a", A_STREAMS, (A_PROMPT, A_OUTPUT), 0.0)
        } else {
            Vec::new()
        };
        let b_streams = if b {
            spawn("b", B_STREAMS, (B_PROMPT, B_OUTPUT), lead)
        } else {
            Vec::new()
        };
        let gather = |hs: Vec<std::thread::ScopedJoinHandle<'_, Seen>>| {
            let mut all = Seen::default();
            for h in hs {
                let one = h.join().unwrap();
                all.ttft_ms.extend(one.ttft_ms);
                all.queue_ms.extend(one.queue_ms);
                all.log.extend(one.log);
            }
            all.ttft_ms.sort_by(f64::total_cmp);
            all.queue_ms.sort_by(f64::total_cmp);
            all.log.sort_by(|x, y| x.0.total_cmp(&y.0));
            all
        };
        let b_seen = gather(b_streams);
        (gather(a_streams), b_seen)
    });
    // Streams finish their last request past the deadline: count the
    // engine's tokens until the last of them, over that time.
    let elapsed = start.elapsed().as_secs_f64();
    let after = (computed(engine), engine.stats().steps.seconds.interactive);
    let b_tokens = (b_seen.ttft_ms.len() * (B_PROMPT + B_OUTPUT)) as f64;
    let steps = after.1.count - before.1.count;
    Phase {
        a_tokens_per_s: if a {
            (after.0 - before.0 - b_tokens) / elapsed
        } else {
            0.0
        },
        step_ms: 1e3 * (after.1.sum - before.1.sum) / steps.max(1) as f64,
        a: a_seen,
        b: b_seen,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let secs: f64 = std::env::var("STOKER_BENCH_PHASE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15.0);
    println!(
        "## Tenant share: A floods ({A_STREAMS} closed-loop streams, {A_PROMPT}-token prompts, {A_OUTPUT} output tokens) beside B's chat ({B_STREAMS} streams, {B_PROMPT}-token prompts, {B_OUTPUT} output tokens), one interactive lane, {secs:.0} s per phase\n"
    );
    println!(
        "| fair share | B TTFT p50 / p99 alone ms | B TTFT p50 / p99 with A ms | B p99 ratio | B queue p50 / p99 with A ms | B requests alone / with A | A tok/s alone / with B | A share | A requests alone / with B | step ms alone A / with B | preemptions |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (k, fair_share) in [true, false].into_iter().enumerate() {
        let model = Model::load(&model_path(), LoadOptions::default())
            .expect("run scripts/fetch-model.sh first");
        let engine = Arc::new(
            Engine::start(
                model,
                EngineConfig {
                    fair_share,
                    ..EngineConfig::default()
                },
            )
            .unwrap(),
        );
        engine.warm_up().unwrap();
        let base = base_text(&engine);
        let salt = 10_000_000 * (k + 1);
        let b_alone = phase(&engine, &base, (false, true), secs, salt);
        let a_alone = phase(&engine, &base, (true, false), secs, salt + 3_000_000);
        let mixed = phase(&engine, &base, (true, true), secs, salt + 6_000_000);
        if std::env::var_os("STOKER_BENCH_VERBOSE").is_some() {
            eprintln!("fair share {fair_share}: B with A (submitted s, queue ms, TTFT ms)");
            for (at, queue, ttft) in &mixed.b.log {
                eprintln!("  {at:6.2} {queue:8.1} {ttft:8.1}");
            }
        }
        let p = |v: &[f64], q| percentile(v, q);
        let (alone, with) = (&b_alone.b.ttft_ms, &mixed.b.ttft_ms);
        let ratio = p(with, 0.99) / p(alone, 0.99);
        let share = mixed.a_tokens_per_s / a_alone.a_tokens_per_s;
        println!(
            "| {} | {:.1} / {:.1} | {:.1} / {:.1} | {ratio:.2}x | {:.1} / {:.1} | {} / {} | {:.0} / {:.0} | {:.0} % | {} / {} | {:.1} / {:.1} | {} |",
            if fair_share { "on" } else { "off" },
            p(alone, 0.5),
            p(alone, 0.99),
            p(with, 0.5),
            p(with, 0.99),
            p(&mixed.b.queue_ms, 0.5),
            p(&mixed.b.queue_ms, 0.99),
            alone.len(),
            with.len(),
            a_alone.a_tokens_per_s,
            mixed.a_tokens_per_s,
            100.0 * share,
            a_alone.a.ttft_ms.len(),
            mixed.a.ttft_ms.len(),
            a_alone.step_ms,
            mixed.step_ms,
            engine.stats().interactive.preemptions_total,
        );
    }
    println!(
        "\nTargets with fair share on: B p99 ratio <= 2.5x, A share >= 90 %. \
         The ratio compares B's p99 time to first token with A flooding to B's alone."
    );
}
