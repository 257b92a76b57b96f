//! What a run measured: TTFT percentiles, goodput at an SLO, how evenly the
//! executors were loaded, refusals and misrouted jobs.

use stoker_stats::percentile;

use super::events::{MS, Micros};
use super::workload::Request;

/// The SLO: a first token within 1 s plus the prompt's own prefill time at
/// the cost model's per-token rate (a 1,500-token prompt cannot beat 2.25 s
/// on this model), and a mean inter-token time of at most 100 ms.
pub const SLO_TTFT_SLACK_MS: f64 = 1_000.0;
pub const SLO_MEAN_ITL_MS: f64 = 100.0;

#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Requests that arrived in the measured window.
    pub requests: usize,
    pub ttft_p50_ms: f64,
    pub ttft_p99_ms: f64,
    /// Arrival to last token, and the mean time between output tokens, of
    /// the measured requests that finished.
    pub e2e_p50_ms: f64,
    pub itl_mean_ms: f64,
    /// Share of measured requests that met the SLO (refused ones did not).
    pub goodput: f64,
    /// Most loaded executor's time-mean of running + waiting over the mean
    /// of all executors'.
    pub load_max_over_mean: f64,
    /// Refused for good: no executor to route to, or every offer refused.
    pub refused: usize,
    /// Jobs (in the measured window) that reached an executor where they
    /// could not start at its next step (no slot or no KV room after the
    /// jobs queued ahead, or a step's budget of prefill ahead of them) while
    /// another executor could have started a request of the mean size at
    /// its next step.
    pub misrouted: usize,
    /// Measured requests each executor ran.
    pub served: Vec<usize>,
    /// Requests that found their system prompt in the executor's cache.
    pub prefix_hits: u64,
    /// Simulated events, for the cost of the run.
    pub events: u64,
    /// Executor time spent stepping per request finished, over the whole
    /// run (warm-up and drain included), ms.
    pub busy_ms_per_request: f64,
}

fn meets_slo(r: &Request, per_token_ms: f64) -> bool {
    let (Some(first), Some(done)) = (r.first_token, r.finished) else {
        return false;
    };
    let ttft_ms = (first - r.arrived) as f64 / MS as f64;
    let budget = SLO_TTFT_SLACK_MS + per_token_ms * r.prompt_len() as f64;
    let itl_ms = if r.output > 1 {
        (done - first) as f64 / MS as f64 / (r.output - 1) as f64
    } else {
        0.0
    };
    ttft_ms <= budget && itl_ms <= SLO_MEAN_ITL_MS
}

/// Summarises the requests that arrived in `[from, to)` and the executors'
/// load integrals over the same window; `per_token_ms` is the cost model's
/// prefill rate the TTFT SLO allows for.
pub fn summarise(
    reqs: &[Request],
    from: Micros,
    to: Micros,
    load_areas: &[f64],
    per_token_ms: f64,
) -> Outcome {
    let measured: Vec<&Request> = reqs
        .iter()
        .filter(|r| r.arrived >= from && r.arrived < to)
        .collect();
    let mut ttft: Vec<f64> = measured
        .iter()
        .filter_map(|r| r.first_token.map(|f| (f - r.arrived) as f64 / MS as f64))
        .collect();
    ttft.sort_by(f64::total_cmp);
    let mut e2e: Vec<f64> = measured
        .iter()
        .filter_map(|r| r.finished.map(|f| (f - r.arrived) as f64 / MS as f64))
        .collect();
    e2e.sort_by(f64::total_cmp);
    let itls: Vec<f64> = measured
        .iter()
        .filter(|r| r.output > 1)
        .filter_map(|r| {
            let (first, done) = (r.first_token?, r.finished?);
            Some((done - first) as f64 / MS as f64 / (r.output - 1) as f64)
        })
        .collect();
    let good = measured
        .iter()
        .filter(|r| meets_slo(r, per_token_ms))
        .count();
    // Each request counts for the executor that ran it (its last offer).
    let mut served = vec![0usize; load_areas.len()];
    for r in measured.iter().filter(|r| !r.refused) {
        if let Some(&e) = r.tried.last() {
            served[e as usize] += 1;
        }
    }
    let mean = load_areas.iter().sum::<f64>() / load_areas.len().max(1) as f64;
    let max = load_areas.iter().copied().fold(0.0, f64::max);
    Outcome {
        requests: measured.len(),
        ttft_p50_ms: percentile(&ttft, 0.50),
        ttft_p99_ms: percentile(&ttft, 0.99),
        e2e_p50_ms: percentile(&e2e, 0.50),
        itl_mean_ms: itls.iter().sum::<f64>() / itls.len().max(1) as f64,
        goodput: good as f64 / measured.len().max(1) as f64,
        load_max_over_mean: if mean > 0.0 { max / mean } else { 1.0 },
        refused: measured.iter().filter(|r| r.refused).count(),
        served,
        ..Outcome::default()
    }
}
