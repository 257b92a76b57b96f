//! Offers one load level to a target and collects every request's outcome.
//!
//! The closed loop runs N clients, each sending its next request when the
//! previous one ends. Open-loop patterns send at the scheduled times whether
//! or not earlier requests have finished (that is what makes queues grow),
//! optionally capped by `max_in_flight`. Requests are planned from the seed,
//! the level's ordinal and their index alone, so the same seed offers the
//! same prompts in the same order in every run, while each level of a sweep
//! gets prompts of its own (replaying a level's prompts would turn the next
//! level into a prefix-cache benchmark). A closed-loop client refused with
//! `Retry-After` waits that long before its next request, as the SDKs do.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::paced::Paced;
use super::prompts::PromptSource;
use super::spec::{Arrival, Workload};
use super::target::{Outcome, Planned, Target};

/// Where a closed loop with no duration stops pacing: never, in practice.
const FAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// Live counters for the progress line.
#[derive(Debug, Default)]
pub struct Progress {
    pub sent: AtomicU64,
    pub done: AtomicU64,
    pub failed: AtomicU64,
}

/// The outcomes of one level, in completion order.
#[derive(Debug)]
pub struct LevelRun {
    pub arrival: Arrival,
    pub outcomes: Vec<Outcome>,
}

/// Plans request `i` of level `level`: deterministic in (seed, level, i).
pub fn plan(w: &Workload, prompts: &PromptSource, level: u32, i: u64) -> Planned {
    let key = (u64::from(level) << 40) ^ i;
    let mut rng = StdRng::seed_from_u64(w.seed ^ key.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let input = w.input.sample(&mut rng);
    let output = w.output.sample(&mut rng);
    let batch = w.batch_share > 0.0 && rng.random::<f64>() < w.batch_share;
    let p = prompts.prompt(input, &mut rng);
    Planned {
        index: i,
        max_tokens: p.max_tokens.unwrap_or(output),
        prompt: p.text,
        prompt_tokens: p.tokens,
        batch,
    }
}

/// Runs `arrival` until the workload's request count or duration is reached.
pub async fn run_level(
    target: Arc<dyn Target>,
    w: Arc<Workload>,
    prompts: Arc<PromptSource>,
    arrival: Arrival,
    level: u32,
    progress: Arc<Progress>,
) -> LevelRun {
    let start = Instant::now();
    let stop_at = w.duration.map(|d| start + d);
    let limit = w.requests.unwrap_or(u64::MAX);
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = JoinSet::new();
    match &arrival {
        &Arrival::Closed { concurrency } => {
            // Each client waits out a refusal's Retry-After as the SDKs do:
            // a client refused in a millisecond would otherwise send its
            // next request at once and measure how fast the server refuses.
            let until = stop_at.unwrap_or(start + FAR);
            let target: Arc<dyn Target> = Arc::new(Paced::new(target.clone(), until));
            let next = Arc::new(AtomicU64::new(0));
            for _ in 0..concurrency {
                let (target, w, prompts, progress, outcomes, next) = (
                    target.clone(),
                    w.clone(),
                    prompts.clone(),
                    progress.clone(),
                    outcomes.clone(),
                    next.clone(),
                );
                tasks.spawn(async move {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= limit || stop_at.is_some_and(|t| Instant::now() >= t) {
                            break;
                        }
                        let p = plan(&w, &prompts, level, i);
                        progress.sent.fetch_add(1, Ordering::Relaxed);
                        let o = target.send(p).await;
                        keep(o, &outcomes, &progress).await;
                    }
                });
            }
        }
        open => {
            let cap = w
                .max_in_flight
                .map(|n| Arc::new(Semaphore::new(n as usize)));
            let mut rng = crate::spec::arrival_rng(w.seed);
            let mut offset = Duration::ZERO;
            let mut i = 0u64;
            while i < limit {
                offset = open.next_offset(i, offset, &mut rng).expect("open loop");
                let at = start + offset;
                if stop_at.is_some_and(|t| at >= t) {
                    break;
                }
                tokio::time::sleep_until(at).await;
                let permit = match &cap {
                    Some(s) => Some(s.clone().acquire_owned().await.expect("never closed")),
                    None => None,
                };
                let p = plan(&w, &prompts, level, i);
                let (target, progress, outcomes) =
                    (target.clone(), progress.clone(), outcomes.clone());
                progress.sent.fetch_add(1, Ordering::Relaxed);
                tasks.spawn(async move {
                    let o = target.send(p).await;
                    drop(permit);
                    keep(o, &outcomes, &progress).await;
                });
                i += 1;
                // Reap finished tasks so a long run does not hold them all.
                while tasks.try_join_next().is_some() {}
            }
        }
    }
    while tasks.join_next().await.is_some() {}
    let outcomes = std::mem::take(&mut *outcomes.lock().await);
    LevelRun { arrival, outcomes }
}

async fn keep(o: Outcome, out: &Mutex<Vec<Outcome>>, pr: &Progress) {
    let failed = !o.ok();
    out.lock().await.push(o);
    pr.done.fetch_add(1, Ordering::Relaxed);
    if failed {
        pr.failed.fetch_add(1, Ordering::Relaxed);
    }
}
