//! The verdicts: each SLO a tenant sets, in each phase it applies to, as
//! PASS or FAIL with the figure and the bound. Absolute SLOs and
//! `max_refused` apply in every phase the tenant is in; ratios divide a
//! phase's figure by the same figure in the tenant's baseline phase and
//! apply in every other phase. A figure that could not be measured (no
//! request completed, a baseline of 0) fails: an SLO nobody could check has
//! not held.

use serde::Serialize;

use super::figures::TenantFigures;
use super::spec::Scenario;
use crate::stats::Dist;

/// The figures of one phase.
#[derive(Clone, Debug, Serialize)]
pub struct PhaseFigures {
    pub name: String,
    /// The phase's duration after `--duration-scale`.
    pub duration_s: f64,
    /// From its start until its last request ended.
    pub elapsed_s: f64,
    pub tenants: Vec<TenantFigures>,
}

/// A tenant's figures in a phase over those in its baseline phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ratios {
    pub tenant: String,
    pub phase: String,
    pub baseline: String,
    pub ttft_p99: Option<f64>,
    pub itl_p50: Option<f64>,
    pub itl_p99: Option<f64>,
    /// Output tok/s (rows/s for a batch tenant).
    pub throughput: Option<f64>,
}

/// One SLO in one phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub tenant: String,
    pub phase: String,
    /// The SLO's name as the scenario file writes it.
    pub slo: &'static str,
    /// `None` when it could not be measured.
    pub figure: Option<f64>,
    pub bound: f64,
    /// The figure must be at most the bound (else at least).
    pub at_most: bool,
    pub pass: bool,
}

fn quotient(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() => Some(a / b),
        _ => None,
    }
}

fn p(d: &Option<Dist>, f: fn(&Dist) -> f64) -> Option<f64> {
    d.as_ref().map(f).filter(|v| v.is_finite())
}

fn find<'a>(phase: &'a PhaseFigures, tenant: &str) -> Option<&'a TenantFigures> {
    phase.tenants.iter().find(|t| t.tenant == tenant)
}

/// The ratios of every tenant in every phase but its baseline.
pub fn ratios(s: &Scenario, phases: &[PhaseFigures]) -> Vec<Ratios> {
    let mut out = Vec::new();
    for (pi, phase) in phases.iter().enumerate() {
        for t in &s.tenants {
            if t.baseline == pi {
                continue;
            }
            let base_phase = &phases[t.baseline];
            let (Some(now), Some(base)) = (find(phase, &t.name), find(base_phase, &t.name)) else {
                continue;
            };
            out.push(Ratios {
                tenant: t.name.clone(),
                phase: phase.name.clone(),
                baseline: base_phase.name.clone(),
                ttft_p99: quotient(p(&now.ttft_ms, |d| d.p99), p(&base.ttft_ms, |d| d.p99)),
                itl_p50: quotient(p(&now.itl_ms, |d| d.p50), p(&base.itl_ms, |d| d.p50)),
                itl_p99: quotient(p(&now.itl_ms, |d| d.p99), p(&base.itl_ms, |d| d.p99)),
                throughput: quotient(Some(now.throughput()), Some(base.throughput())),
            });
        }
    }
    out
}

/// Every SLO of every tenant in every phase it applies to.
pub fn verdicts(s: &Scenario, phases: &[PhaseFigures], ratios: &[Ratios]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for phase in phases {
        for t in &s.tenants {
            let Some(f) = find(phase, &t.name) else {
                continue;
            };
            let mut add =
                |slo: &'static str, bound: Option<f64>, figure: Option<f64>, at_most: bool| {
                    if let Some(bound) = bound {
                        let pass =
                            figure.is_some_and(|x| if at_most { x <= bound } else { x >= bound });
                        out.push(Verdict {
                            tenant: t.name.clone(),
                            phase: phase.name.clone(),
                            slo,
                            figure,
                            bound,
                            at_most,
                            pass,
                        });
                    }
                };
            let slo = &t.slo;
            add(
                "ttft_p99_ms",
                slo.ttft_p99_ms,
                p(&f.ttft_ms, |d| d.p99),
                true,
            );
            add("itl_p50_ms", slo.itl_p50_ms, p(&f.itl_ms, |d| d.p50), true);
            add("itl_p99_ms", slo.itl_p99_ms, p(&f.itl_ms, |d| d.p99), true);
            add(
                "max_refused",
                slo.max_refused.map(|n| n as f64),
                Some(f.refused as f64),
                true,
            );
            // Nothing refused: nothing was refused slowly.
            let refusal = match &f.refusal_ms {
                None => Some(0.0),
                some => p(some, |d| d.p99),
            };
            add("refusal_p99_ms", slo.refusal_p99_ms, refusal, true);
            if let Some(r) = ratios
                .iter()
                .find(|r| r.tenant == t.name && r.phase == phase.name)
            {
                add("ttft_p99_ratio", slo.ttft_p99_ratio, r.ttft_p99, true);
                add("itl_p50_ratio", slo.itl_p50_ratio, r.itl_p50, true);
                add("itl_p99_ratio", slo.itl_p99_ratio, r.itl_p99, true);
                add(
                    "throughput_ratio_min",
                    slo.throughput_ratio_min,
                    r.throughput,
                    false,
                );
            }
        }
    }
    out
}
