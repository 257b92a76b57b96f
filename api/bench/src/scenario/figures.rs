//! The figures of one tenant in one phase, from the outcomes the driver
//! kept: the load figures of `crate::stats::summarize` (requests, latency
//! percentiles, output tok/s over the tenant's own span), refusals by status
//! and code, goodput against the tenant's absolute SLOs, TTFT observed over
//! TTFT predicted, retries, and a batch job's rows per second.
//!
//! Goodput counts a request when it completed and met each absolute SLO the
//! tenant sets, judged on that request: its TTFT at most `ttft_p99_ms`, the
//! median of its own token gaps at most `itl_p50_ms`, their p99 at most
//! `itl_p99_ms`. (A percentile SLO is a statement about many requests; per
//! request, the request's own figure is the one it can be held to.)

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::file::Lane;
use super::run::{BatchSpan, TenantRun};
use super::spec::{Tenant, TenantSlo};
use crate::spec::Slo;
use crate::stats::{Dist, percentile, summarize};
use crate::target::Outcome;

/// Observed TTFT divided by the server's estimate, over the requests that
/// have both.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Predicted {
    pub requests: u64,
    pub p50: f64,
    pub p99: f64,
}

/// A batch job's progress in one phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchFigures {
    pub job_id: String,
    pub rows: u64,
    pub completed_at_start: u64,
    pub completed_at_end: u64,
    pub failed_at_end: u64,
    pub seconds: f64,
    pub rows_per_s: f64,
    pub status: String,
    /// Every row had finished by the phase's end: `rows_per_s` is then a
    /// lower bound (the job ran out of work, not out of capacity).
    pub exhausted: bool,
}

/// One tenant in one phase.
#[derive(Clone, Debug, Serialize)]
pub struct TenantFigures {
    pub tenant: String,
    pub lane: Lane,
    /// The arrival pattern (online tenants).
    pub arrival: Option<String>,
    pub requests: u64,
    pub completed: u64,
    /// Answers with a 4xx or 5xx status.
    pub refused: u64,
    /// Failures by `STATUS code` (`503 server_overloaded`), or by code alone
    /// when no status came (`timeout`, `connect`).
    pub failures: BTreeMap<String, u64>,
    /// How long the server took to answer with a refusal (4xx or 5xx):
    /// from the send to the status line, over every refusal, retried ones
    /// too. Admission promises it in under
    /// 50 ms under overload, so that refusing costs less than serving.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal_ms: Option<Dist>,
    /// Refusals with `Retry-After` sent again (`retry = true`).
    pub retried: u64,
    /// Of those, the ones the retry got accepted.
    pub accepted_on_first_retry: u64,
    /// From the tenant's first send to its last answer in the phase.
    pub duration_s: f64,
    pub output_tok_s: f64,
    /// Completed requests per second that met the absolute SLOs.
    pub goodput: f64,
    pub ttft_ms: Option<Dist>,
    pub itl_ms: Option<Dist>,
    pub e2e_ms: Option<Dist>,
    /// Absent when the server sent no `x-stoker-ttft-estimate-ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_over_predicted: Option<Predicted>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchFigures>,
}

impl TenantFigures {
    /// What `throughput_ratio_min` compares: rows/s for a batch tenant,
    /// output tok/s otherwise.
    pub fn throughput(&self) -> f64 {
        self.batch
            .as_ref()
            .map_or(self.output_tok_s, |b| b.rows_per_s)
    }

    /// The unit of [`TenantFigures::throughput`].
    pub fn throughput_unit(&self) -> &'static str {
        if self.batch.is_some() {
            "rows/s"
        } else {
            "tok/s"
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Whether one request met each absolute SLO (see the module header).
pub fn meets_absolute(o: &Outcome, slo: &TenantSlo) -> bool {
    if !o.ok() {
        return false;
    }
    if let (Some(limit), Some(t)) = (slo.ttft_p99_ms, o.ttft())
        && ms(t) > limit
    {
        return false;
    }
    let mut gaps: Vec<f64> = o.chunks.windows(2).map(|w| ms(w[1] - w[0])).collect();
    if gaps.is_empty() {
        return true;
    }
    gaps.sort_by(f64::total_cmp);
    let within = |limit: Option<f64>, q: f64| limit.is_none_or(|l| percentile(&gaps, q) <= l);
    within(slo.itl_p50_ms, 0.50) && within(slo.itl_p99_ms, 0.99)
}

/// Observed / predicted TTFT over the requests with both (and an estimate
/// above 0).
pub fn predicted(outcomes: &[Outcome]) -> Option<Predicted> {
    let mut r: Vec<f64> = outcomes
        .iter()
        .filter(|o| o.ok())
        .filter_map(|o| Some(ms(o.ttft()?) / o.predicted_ttft_ms.filter(|p| *p > 0.0)?))
        .collect();
    if r.is_empty() {
        return None;
    }
    r.sort_by(f64::total_cmp);
    Some(Predicted {
        requests: r.len() as u64,
        p50: percentile(&r, 0.50),
        p99: percentile(&r, 0.99),
    })
}

fn batch_figures(b: &BatchSpan) -> BatchFigures {
    let done = b.completed_at_end.saturating_sub(b.completed_at_start);
    BatchFigures {
        job_id: b.job_id.clone(),
        rows: b.rows,
        completed_at_start: b.completed_at_start,
        completed_at_end: b.completed_at_end,
        failed_at_end: b.failed_at_end,
        seconds: b.seconds,
        rows_per_s: if b.seconds > 0.0 {
            done as f64 / b.seconds
        } else {
            0.0
        },
        status: b.status.clone(),
        exhausted: b.completed_at_end + b.failed_at_end >= b.rows,
    }
}

/// The figures of `r`, one tenant's part of a phase.
pub fn of(t: &Tenant, r: &TenantRun) -> TenantFigures {
    let arrival = t.arrival.as_ref().map(ToString::to_string);
    let level = t.arrival.as_ref().map_or(0.0, crate::spec::Arrival::level);
    let s = summarize(
        arrival.clone().unwrap_or_default(),
        level,
        &r.outcomes,
        &Slo::default(),
        None,
    );
    let mut failures = BTreeMap::new();
    let mut refused = 0;
    let mut refusal_ms = Vec::new();
    for o in &r.outcomes {
        if let Some(d) = o.refused_first_in {
            refusal_ms.push(ms(d));
        }
        let Some(f) = &o.failure else { continue };
        let key = match f.status {
            Some(st) if st != 200 => format!("{st} {}", f.code),
            _ => f.code.clone(),
        };
        *failures.entry(key).or_insert(0) += 1;
        if f.status.is_some_and(|st| st >= 400) {
            refused += 1;
            refusal_ms.push(ms(o.end - o.start));
        }
    }
    let good = r
        .outcomes
        .iter()
        .filter(|o| meets_absolute(o, &t.slo))
        .count();
    TenantFigures {
        tenant: t.name.clone(),
        lane: t.lane,
        arrival,
        requests: s.requests,
        completed: s.completed,
        refused,
        failures,
        refusal_ms: Dist::of(refusal_ms),
        retried: r.retried,
        accepted_on_first_retry: r.accepted_on_first_retry,
        duration_s: s.duration_s,
        // `+ 0.0`: an empty sum is -0.0, which would print as such.
        output_tok_s: s.output_throughput + 0.0,
        goodput: if s.duration_s > 0.0 {
            good as f64 / s.duration_s
        } else {
            0.0
        },
        ttft_ms: s.ttft_ms,
        itl_ms: s.itl_ms,
        e2e_ms: s.e2e_ms,
        ttft_over_predicted: predicted(&r.outcomes),
        batch: r.batch.as_ref().map(batch_figures),
    }
}
