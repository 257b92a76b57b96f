//! The figures of one load level: latency percentiles, throughput, goodput
//! against the SLOs, refusals by error code, and what the server's own
//! metrics said over the same span.
//!
//! Percentiles interpolate linearly between closest ranks (numpy's default),
//! so a figure can be checked by hand against the raw times. TPOT is per
//! request, (end - first token) / (output tokens - 1); ITL is every gap
//! between streamed chunks of every request; the span of a level is from
//! its first send to its last end.
//!
//! With a lane mix, latencies and SLO attainment describe the interactive
//! lane (the one with latency targets; the batch lane yields to it by
//! design), throughput counts both, and the batch lane gets figures of its
//! own.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::scrape::ServerFigures;
use super::spec::Slo;
use super::target::Outcome;

/// Mean and percentiles of one latency, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Dist {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

/// The workspace's one percentile definition (`stoker-stats`, which the test
/// suites use too, so their figures and the bench's compare).
pub use stoker_stats::percentile;

impl Dist {
    pub fn of(mut xs: Vec<f64>) -> Option<Dist> {
        if xs.is_empty() {
            return None;
        }
        xs.sort_by(f64::total_cmp);
        Some(Dist {
            mean: xs.iter().sum::<f64>() / xs.len() as f64,
            p50: percentile(&xs, 0.50),
            p90: percentile(&xs, 0.90),
            p95: percentile(&xs, 0.95),
            p99: percentile(&xs, 0.99),
            max: xs[xs.len() - 1],
        })
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Token counts of the requests that completed.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Tokens {
    pub mean: f64,
    pub min: u32,
    pub max: u32,
    pub p95: f64,
    pub total: u64,
}

impl Tokens {
    fn of(xs: &[u32]) -> Option<Tokens> {
        let (&min, &max) = (xs.iter().min()?, xs.iter().max()?);
        let total: u64 = xs.iter().map(|&x| u64::from(x)).sum();
        let mut sorted: Vec<f64> = xs.iter().map(|&x| f64::from(x)).collect();
        sorted.sort_by(f64::total_cmp);
        Some(Tokens {
            mean: total as f64 / xs.len() as f64,
            min,
            max,
            p95: percentile(&sorted, 0.95),
            total,
        })
    }
}

/// Everything measured at one level.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// The arrival pattern, e.g. `closed:8`.
    pub arrival: String,
    pub level: f64,
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    /// Failures by error code (`server_overloaded`, `timeout`, ...).
    pub failures: BTreeMap<String, u64>,
    /// Refusals that carried `Retry-After`.
    pub retry_after: u64,
    pub batch_requests: u64,
    pub duration_s: f64,
    pub request_throughput: f64,
    pub output_throughput: f64,
    /// Completed requests per second that met every SLO.
    pub goodput: f64,
    /// Share of requests (failures count as misses) that met every SLO.
    pub slo_attainment: f64,
    /// The level met the SLOs (attainment at or above the target).
    pub meets_slo: bool,
    /// Requests in flight on average (Little's law: sum of latencies / span).
    pub mean_in_flight: f64,
    pub ttft_ms: Option<Dist>,
    pub tpot_ms: Option<Dist>,
    pub itl_ms: Option<Dist>,
    pub e2e_ms: Option<Dist>,
    pub prompt_tokens: Option<Tokens>,
    pub output_tokens: Option<Tokens>,
    /// `max_tokens` asked, mean (what admission reserves).
    pub max_tokens_mean: f64,
    /// The batch lane's own figures, when the level sent any there.
    pub batch: Option<LaneFigures>,
    /// The revision most responses named.
    pub revision: Option<String>,
    pub server: Option<ServerFigures>,
}

/// What the batch lane did at one level.
#[derive(Clone, Debug, Serialize)]
pub struct LaneFigures {
    pub requests: u64,
    pub completed: u64,
    pub output_throughput: f64,
    pub ttft_ms: Option<Dist>,
    pub e2e_ms: Option<Dist>,
}

/// Whether one completed request met every SLO.
pub fn meets(o: &Outcome, slo: &Slo) -> bool {
    if !o.ok() {
        return false;
    }
    let within = |limit: Option<f64>, v: Option<Duration>| match (limit, v) {
        (None, _) => true,
        (Some(l), Some(v)) => ms(v) <= l,
        // A limit on a figure the request never produced (no first token,
        // one token so no TPOT) cannot be judged against it.
        (Some(_), None) => true,
    };
    within(slo.ttft_ms, o.ttft())
        && within(slo.tpot_ms, o.tpot())
        && within(slo.e2e_ms, Some(o.e2e()))
}

pub fn summarize(
    arrival: String,
    level: f64,
    outcomes: &[Outcome],
    slo: &Slo,
    server: Option<ServerFigures>,
) -> Summary {
    let ok: Vec<&Outcome> = outcomes.iter().filter(|o| o.ok()).collect();
    let mut failures = BTreeMap::new();
    let mut retry_after = 0;
    for o in outcomes {
        if let Some(f) = &o.failure {
            *failures.entry(f.code.clone()).or_insert(0) += 1;
            retry_after += u64::from(f.retry_after.is_some());
        }
    }
    let span = match (
        outcomes.iter().map(|o| o.start).min(),
        outcomes.iter().map(|o| o.end).max(),
    ) {
        (Some(a), Some(b)) => (b - a).as_secs_f64(),
        _ => 0.0,
    };
    let per_s = |n: f64| if span > 0.0 { n / span } else { 0.0 };
    // Latency and SLO figures: the interactive lane, or everything when the
    // level sent nothing there.
    let lat: Vec<&Outcome> = if outcomes.iter().any(|o| !o.batch) {
        outcomes.iter().filter(|o| !o.batch).collect()
    } else {
        outcomes.iter().collect()
    };
    let lat_ok: Vec<&Outcome> = lat.iter().copied().filter(|o| o.ok()).collect();
    let good = lat.iter().filter(|o| meets(o, slo)).count();
    let out_tokens: Vec<u32> = ok.iter().map(|o| o.tokens_out()).collect();
    let in_tokens: Vec<u32> = ok.iter().filter_map(|o| o.prompt_tokens).collect();
    let itl: Vec<f64> = lat_ok
        .iter()
        .flat_map(|o| o.chunks.windows(2).map(|w| ms(w[1] - w[0])))
        .collect();
    let mut revisions: BTreeMap<&str, u64> = BTreeMap::new();
    for o in &ok {
        if let Some(r) = &o.revision {
            *revisions.entry(r.as_str()).or_insert(0) += 1;
        }
    }
    let attainment = if lat.is_empty() {
        0.0
    } else {
        good as f64 / lat.len() as f64
    };
    let batch: Vec<&Outcome> = outcomes.iter().filter(|o| o.batch).collect();
    let batch = (!batch.is_empty() && batch.len() < outcomes.len()).then(|| LaneFigures {
        requests: batch.len() as u64,
        completed: batch.iter().filter(|o| o.ok()).count() as u64,
        output_throughput: per_s(
            batch
                .iter()
                .filter(|o| o.ok())
                .map(|o| f64::from(o.tokens_out()))
                .sum(),
        ),
        ttft_ms: Dist::of(batch.iter().filter_map(|o| o.ttft().map(ms)).collect()),
        e2e_ms: Dist::of(
            batch
                .iter()
                .filter(|o| o.ok())
                .map(|o| ms(o.e2e()))
                .collect(),
        ),
    });
    let busy: f64 = outcomes.iter().map(|o| o.e2e().as_secs_f64()).sum();
    Summary {
        arrival,
        level,
        requests: outcomes.len() as u64,
        completed: ok.len() as u64,
        failed: (outcomes.len() - ok.len()) as u64,
        failures,
        retry_after,
        batch_requests: outcomes.iter().filter(|o| o.batch).count() as u64,
        duration_s: span,
        request_throughput: per_s(ok.len() as f64),
        output_throughput: per_s(out_tokens.iter().map(|&t| f64::from(t)).sum()),
        goodput: per_s(good as f64),
        slo_attainment: attainment,
        meets_slo: !outcomes.is_empty() && attainment >= slo.attainment,
        mean_in_flight: if span > 0.0 { busy / span } else { 0.0 },
        ttft_ms: Dist::of(lat_ok.iter().filter_map(|o| o.ttft().map(ms)).collect()),
        tpot_ms: Dist::of(lat_ok.iter().filter_map(|o| o.tpot().map(ms)).collect()),
        itl_ms: Dist::of(itl),
        e2e_ms: Dist::of(lat_ok.iter().map(|o| ms(o.e2e())).collect()),
        prompt_tokens: Tokens::of(&in_tokens),
        output_tokens: Tokens::of(&out_tokens),
        max_tokens_mean: if outcomes.is_empty() {
            0.0
        } else {
            outcomes
                .iter()
                .map(|o| f64::from(o.max_tokens))
                .sum::<f64>()
                / outcomes.len() as f64
        },
        batch,
        revision: revisions
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map(|(r, _)| r.to_owned()),
        server,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 0.5), 50.5);
        assert!((percentile(&xs, 0.99) - 99.01).abs() < 1e-9);
        assert_eq!(percentile(&[3.0], 0.99), 3.0);
        assert!(percentile(&[], 0.5).is_nan());
        let d = Dist::of(vec![4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((d.mean, d.p50, d.max), (2.5, 2.5, 4.0));
    }
}
