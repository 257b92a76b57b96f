//! Runs a checked scenario: its phases in order, the tenants of a phase at
//! once, each for the phase's duration (less its `start_after_secs`) through
//! the load driver (`crate::driver::run_level`) with its own target and key.
//! A phase ends when every request it sent has ended (the driver joins its
//! clients), so the next phase starts on an idle server.
//!
//! A batch tenant's job is created at the start of the first phase it is in
//! and runs on its own from then; it is counted in its phases only (rows
//! completed at the phase's start and end, polled once a second between),
//! and cancelled after its last phase, or when the run fails. The phase that
//! creates it starts its clock once the job has finished its first row
//! (waiting at most [`FIRST_ROW_WAIT`]): the job's start-up (checking the
//! file, a runner claiming the first shard; seconds on stoker) would
//! otherwise count against the solo rows/s the other phases are divided by.
//!
//! Requests are planned from the scenario's seed, the tenant and the phase,
//! so a rerun offers the same prompts and each phase gets prompts of its own
//! (replaying one phase's prompts in the next would measure the prefix
//! cache).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::{BoxFuture, join_all};
use tokio::time::Instant;

use super::batch::{BatchJobs, JobStatus};
use super::file::Lane;
use super::progress::{Counter, PhaseBar};
use super::retry::RetryOnce;
use super::spec::{Scenario, Tenant};
use crate::driver::{Progress, plan, run_level};
use crate::prompts::PromptSource;
use crate::spec::Workload;
use crate::target::{Outcome, Target};

/// What the harness sends through.
pub struct Backends {
    /// Per tenant, its online target (`None` for a batch tenant).
    pub targets: Vec<Option<Arc<dyn Target>>>,
    pub batch: Arc<dyn BatchJobs>,
}

#[derive(Clone, Copy, Debug)]
pub struct RunConfig {
    /// Multiplies every phase's duration and start delay.
    pub scale: f64,
    /// Draw progress bars.
    pub bars: bool,
}

/// One phase as it ran.
#[derive(Debug)]
pub struct PhaseRun {
    pub phase: usize,
    /// The phase's duration after scaling.
    pub duration: Duration,
    /// From its start until its last request ended.
    pub elapsed: Duration,
    pub tenants: Vec<TenantRun>,
}

/// One tenant's part of a phase.
#[derive(Debug)]
pub struct TenantRun {
    pub tenant: usize,
    pub outcomes: Vec<Outcome>,
    pub retried: u64,
    pub accepted_on_first_retry: u64,
    pub batch: Option<BatchSpan>,
}

/// A batch job over one phase.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchSpan {
    pub job_id: String,
    pub rows: u64,
    pub completed_at_start: u64,
    pub completed_at_end: u64,
    pub failed_at_end: u64,
    pub seconds: f64,
    /// The job's status at the phase's end.
    pub status: String,
}

/// `d` times `scale`.
pub fn scaled(d: Duration, scale: f64) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * scale).unwrap_or(Duration::MAX)
}

/// Longest wait for a new batch job's first row before its phase starts.
pub const FIRST_ROW_WAIT: Duration = Duration::from_secs(120);

/// The level the batch rows are planned at: apart from every phase's.
const ROWS_LEVEL: u32 = 0xFF_FFFF;

/// The workload one tenant offers (its arrival aside).
pub fn workload(s: &Scenario, index: usize, duration: Duration) -> Workload {
    let t = &s.tenants[index];
    let k = index as u64 + 1;
    Workload {
        name: t.name.clone(),
        endpoint: s.endpoint,
        model: s.model.clone(),
        input: t.input.clone(),
        output: t.output.clone(),
        arrival: t
            .arrival
            .clone()
            .unwrap_or(crate::spec::Arrival::Closed { concurrency: 1 }),
        batch_share: if t.lane == Lane::Flex { 1.0 } else { 0.0 },
        duration: Some(duration),
        seed: s.seed ^ (k << 56) ^ k.wrapping_mul(0xD1B5_4A32_D192_ED03),
        ignore_eos: s.ignore_eos,
        ..Workload::default()
    }
}

/// Runs every phase; cancels every job it created, whatever happens: an
/// error, or Ctrl-C (a Batch API job left running would load the server
/// being measured next).
pub async fn run(
    s: &Scenario,
    prompts: Arc<PromptSource>,
    b: &Backends,
    cfg: RunConfig,
) -> Result<Vec<PhaseRun>, String> {
    let mut jobs: Vec<Option<String>> = vec![None; s.tenants.len()];
    let out = tokio::select! {
        r = phases(s, &prompts, b, cfg, &mut jobs) => r,
        _ = tokio::signal::ctrl_c() => {
            Err("interrupted; cancelling the batch jobs this run created".to_owned())
        }
    };
    for (t, job) in jobs.iter().enumerate() {
        if let Some(id) = job {
            let cancel = b.batch.cancel(&s.tenants[t], id);
            match tokio::time::timeout(std::time::Duration::from_secs(10), cancel).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("stoker bench: could not cancel batch {id}: {e}"),
                Err(_) => eprintln!("stoker bench: cancelling batch {id} took over 10 s"),
            }
        }
    }
    out
}

async fn phases(
    s: &Scenario,
    prompts: &Arc<PromptSource>,
    b: &Backends,
    cfg: RunConfig,
    jobs: &mut [Option<String>],
) -> Result<Vec<PhaseRun>, String> {
    let mut out = Vec::new();
    for (pi, phase) in s.phases.iter().enumerate() {
        let duration = scaled(phase.duration, cfg.scale);
        let batch_tenants: Vec<usize> = phase
            .tenants
            .iter()
            .copied()
            .filter(|&t| s.tenants[t].lane == Lane::Batch)
            .collect();
        let mut starts = Vec::new();
        for &t in &batch_tenants {
            let tenant = &s.tenants[t];
            if jobs[t].is_none() {
                let w = workload(s, t, duration);
                let rows = (0..u64::from(tenant.rows.unwrap_or(0)))
                    .map(|i| plan(&w, prompts, ROWS_LEVEL, i))
                    .collect();
                let id = b
                    .batch
                    .create(tenant, rows)
                    .await
                    .map_err(|e| format!("tenant {:?}: {e}", tenant.name))?;
                jobs[t] = Some(id.clone());
                first_row(b, tenant, &id).await?;
            }
            let id = jobs[t].clone().expect("created above");
            let st = job_status(b, tenant, &id).await?;
            starts.push((t, id, st));
        }
        let t0 = Instant::now();
        let end = t0 + duration;
        let counters: Vec<(usize, Counter)> = phase
            .tenants
            .iter()
            .map(|&t| {
                let c = if s.tenants[t].lane == Lane::Batch {
                    let done = starts
                        .iter()
                        .find(|x| x.0 == t)
                        .map_or(0, |x| x.2.completed);
                    Counter::Rows(Arc::new(AtomicU64::new(done)))
                } else {
                    Counter::Requests(Arc::new(Progress::default()))
                };
                (t, c)
            })
            .collect();
        let bar = PhaseBar::start(
            &phase.name,
            duration,
            counters
                .iter()
                .map(|(t, c)| (s.tenants[*t].name.clone(), c.clone()))
                .collect(),
            cfg.bars,
        );
        let mut work: Vec<BoxFuture<'_, Option<TenantRun>>> = Vec::new();
        for (t, counter) in &counters {
            match counter {
                Counter::Requests(progress) => work.push(Box::pin(online(
                    s,
                    *t,
                    pi,
                    duration,
                    cfg.scale,
                    prompts.clone(),
                    b.targets[*t].clone(),
                    progress.clone(),
                ))),
                Counter::Rows(rows) => {
                    let id = &starts.iter().find(|x| x.0 == *t).expect("started").1;
                    work.push(Box::pin(poll_until(
                        b,
                        &s.tenants[*t],
                        id,
                        end,
                        rows.clone(),
                    )));
                }
            }
        }
        let mut tenants: Vec<TenantRun> = join_all(work).await.into_iter().flatten().collect();
        drop(bar);
        let elapsed = t0.elapsed();
        for (t, id, st) in starts {
            let tenant = &s.tenants[t];
            let last = job_status(b, tenant, &id).await?;
            if matches!(
                last.status.as_str(),
                "failed" | "expired" | "cancelled" | "cancelling"
            ) {
                return Err(format!(
                    "tenant {:?}: batch job {id} is {} in phase {:?}",
                    tenant.name, last.status, phase.name
                ));
            }
            tenants.push(TenantRun {
                tenant: t,
                outcomes: Vec::new(),
                retried: 0,
                accepted_on_first_retry: 0,
                batch: Some(BatchSpan {
                    job_id: id.clone(),
                    rows: u64::from(tenant.rows.unwrap_or(0)),
                    completed_at_start: st.completed,
                    completed_at_end: last.completed,
                    failed_at_end: last.failed,
                    seconds: elapsed.as_secs_f64(),
                    status: last.status,
                }),
            });
            let last_phase = s.phases.iter().rposition(|p| p.tenants.contains(&t));
            if last_phase == Some(pi) {
                let _ = b.batch.cancel(tenant, &id).await;
                jobs[t] = None;
            }
        }
        tenants.sort_by_key(|r| phase.tenants.iter().position(|&t| t == r.tenant));
        let run = PhaseRun {
            phase: pi,
            duration,
            elapsed,
            tenants,
        };
        // A server that answered nothing for a whole phase is not there:
        // the next phases would measure the same nothing.
        if let Some(why) = unreachable(std::slice::from_ref(&run)) {
            return Err(format!("phase {:?}: {why}", phase.name));
        }
        out.push(run);
    }
    Ok(out)
}

/// Why the target was not measured at all: online requests were sent and
/// none got an HTTP answer.
pub fn unreachable(runs: &[PhaseRun]) -> Option<String> {
    let outcomes = runs
        .iter()
        .flat_map(|p| &p.tenants)
        .flat_map(|t| &t.outcomes);
    let mut sent = 0;
    let mut codes = std::collections::BTreeMap::new();
    for o in outcomes {
        sent += 1;
        match &o.failure {
            Some(f) if f.status.is_none() => *codes.entry(f.code.clone()).or_insert(0) += 1,
            _ => return None,
        }
    }
    (sent > 0).then(|| {
        let list: Vec<String> = codes.iter().map(|(c, n)| format!("{c} {n}")).collect();
        format!(
            "no request got an HTTP answer ({}): is the server up?",
            list.join(", ")
        )
    })
}

async fn job_status(b: &Backends, tenant: &Tenant, id: &str) -> Result<JobStatus, String> {
    b.batch
        .status(tenant, id)
        .await
        .map_err(|e| format!("tenant {:?}: {e}", tenant.name))
}

/// Waits until a new job has finished (or failed) its first row.
async fn first_row(b: &Backends, tenant: &Tenant, id: &str) -> Result<(), String> {
    let give_up = Instant::now() + FIRST_ROW_WAIT;
    loop {
        let st = job_status(b, tenant, id).await?;
        if st.completed + st.failed > 0 || st.terminal() {
            return Ok(());
        }
        if Instant::now() >= give_up {
            return Err(format!(
                "tenant {:?}: batch job {id} finished no row within {} s",
                tenant.name,
                FIRST_ROW_WAIT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Polls a job once a second until `end`, for the progress bar; a failed
/// poll is skipped (the phase's end reads the job again and decides).
async fn poll_until(
    b: &Backends,
    tenant: &Tenant,
    id: &str,
    end: Instant,
    rows: Arc<AtomicU64>,
) -> Option<TenantRun> {
    while Instant::now() < end {
        tokio::time::sleep_until((Instant::now() + Duration::from_secs(1)).min(end)).await;
        if let Ok(st) = b.batch.status(tenant, id).await {
            rows.store(st.completed, Ordering::Relaxed);
            if st.terminal() {
                tokio::time::sleep_until(end).await;
                break;
            }
        }
    }
    None
}

/// One online tenant's part of a phase.
#[allow(clippy::too_many_arguments)]
async fn online(
    s: &Scenario,
    t: usize,
    phase: usize,
    duration: Duration,
    scale: f64,
    prompts: Arc<PromptSource>,
    target: Option<Arc<dyn Target>>,
    progress: Arc<Progress>,
) -> Option<TenantRun> {
    let tenant = &s.tenants[t];
    let target = target?;
    let delay = scaled(tenant.start_after, scale);
    tokio::time::sleep(delay).await;
    let w = workload(s, t, duration.saturating_sub(delay));
    let retry = tenant
        .retry
        .then(|| Arc::new(RetryOnce::new(target.clone())));
    let sent: Arc<dyn Target> = match &retry {
        Some(r) => r.clone(),
        None => target,
    };
    let arrival = w.arrival.clone();
    // `run_level` paces closed-loop clients by Retry-After, up to the phase's end.
    let run = run_level(sent, Arc::new(w), prompts, arrival, phase as u32, progress).await;
    let (retried, accepted) = retry.map_or((0, 0), |r| r.counts());
    Some(TenantRun {
        tenant: t,
        outcomes: run.outcomes,
        retried,
        accepted_on_first_retry: accepted,
        batch: None,
    })
}
