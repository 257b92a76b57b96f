//! What a scenario run prints: one JSON document (`--json`, `--save`) and, on
//! the terminal, a block per phase with a row per tenant, the ratios to each
//! tenant's baseline, and a verdict line per SLO.

use std::fmt::Write as _;

use serde::Serialize;

use super::figures::TenantFigures;
use super::file::Lane;
use super::judge::{PhaseFigures, Ratios, Verdict};
use super::spec::{Scenario, TenantSlo};
use crate::stats::Dist;

/// The whole run, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct ScenarioReport {
    pub scenario: String,
    pub file: String,
    pub url: String,
    pub model: String,
    pub endpoint: String,
    pub seed: u64,
    pub duration_scale: f64,
    /// Prompt token counts were exact (a tokenizer was given).
    pub exact_prompt_lengths: bool,
    pub tenants: Vec<TenantOut>,
    pub phases: Vec<PhaseFigures>,
    pub ratios: Vec<Ratios>,
    pub verdicts: Vec<Verdict>,
    /// Every SLO held.
    pub passed: bool,
}

/// A tenant as the scenario described it (its key left out).
#[derive(Debug, Serialize)]
pub struct TenantOut {
    pub name: String,
    pub lane: Lane,
    pub arrival: Option<String>,
    pub input: String,
    pub output: String,
    pub stream: bool,
    pub start_after_s: f64,
    pub retry: bool,
    pub rows: Option<u32>,
    pub baseline: String,
    pub slo: TenantSlo,
}

impl TenantOut {
    pub fn all(s: &Scenario) -> Vec<TenantOut> {
        s.tenants
            .iter()
            .map(|t| TenantOut {
                name: t.name.clone(),
                lane: t.lane,
                arrival: t.arrival.as_ref().map(ToString::to_string),
                input: t.input.to_string(),
                output: t.output.to_string(),
                stream: t.stream,
                start_after_s: t.start_after.as_secs_f64(),
                retry: t.retry,
                rows: t.rows,
                baseline: s.phases[t.baseline].name.clone(),
                slo: t.slo.clone(),
            })
            .collect()
    }
}

fn three(d: &Option<Dist>) -> String {
    match d {
        Some(d) => format!("{:.1}/{:.1}/{:.1}", d.p50, d.p90, d.p99),
        None => "-".to_owned(),
    }
}

fn lane(l: Lane) -> &'static str {
    match l {
        Lane::Interactive => "interactive",
        Lane::Flex => "flex",
        Lane::Batch => "batch",
    }
}

fn tenant_rows(out: &mut String, t: &TenantFigures) {
    let _ = writeln!(
        out,
        "  {:<10} {:<11} {:<12} {:>6} {:>6} {:>5} {:>9.1} {:>7.2}  {:<23} {:<23} {}",
        t.tenant,
        lane(t.lane),
        t.arrival.as_deref().unwrap_or("-"),
        t.requests,
        t.completed,
        t.refused,
        t.output_tok_s,
        t.goodput,
        three(&t.ttft_ms),
        three(&t.itl_ms),
        three(&t.e2e_ms),
    );
    if !t.failures.is_empty() {
        let list: Vec<String> = t.failures.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let _ = writeln!(out, "  {:<10} failures: {}", "", list.join(", "));
    }
    if let Some(d) = &t.refusal_ms {
        let _ = writeln!(
            out,
            "  {:<10} refused in p50/p90/p99 {} ms (max {:.1})",
            "",
            three(&t.refusal_ms),
            d.max
        );
    }
    if t.retried > 0 {
        let _ = writeln!(
            out,
            "  {:<10} retried {} after Retry-After; {} accepted on the retry",
            "", t.retried, t.accepted_on_first_retry
        );
    }
    if let Some(p) = &t.ttft_over_predicted {
        let _ = writeln!(
            out,
            "  {:<10} TTFT observed / predicted: p50 {:.2}, p99 {:.2} ({} requests)",
            "", p.p50, p.p99, p.requests
        );
    }
    if let Some(b) = &t.batch {
        let _ = writeln!(
            out,
            "  {:<10} batch job {}: {} -> {} of {} rows in {:.1} s = {:.2} rows/s ({}){}",
            "",
            b.job_id,
            b.completed_at_start,
            b.completed_at_end,
            b.rows,
            b.seconds,
            b.rows_per_s,
            b.status,
            if b.exhausted {
                "; every row had finished, so this is a lower bound"
            } else {
                ""
            }
        );
    }
}

/// One phase's block: a row per tenant.
pub fn phase_table(p: &PhaseFigures) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "phase {}: {:.1} s (ran {:.1} s)",
        p.name, p.duration_s, p.elapsed_s
    );
    let _ = writeln!(
        out,
        "  {:<10} {:<11} {:<12} {:>6} {:>6} {:>5} {:>9} {:>7}  {:<23} {:<23} E2E p50/p90/p99 (ms)",
        "tenant",
        "lane",
        "arrival",
        "sent",
        "done",
        "refus",
        "out tok/s",
        "good/s",
        "TTFT p50/p90/p99",
        "ITL p50/p90/p99",
    );
    for t in &p.tenants {
        tenant_rows(&mut out, t);
    }
    out
}

fn verdict_line(v: &Verdict) -> String {
    let op = if v.at_most { "<=" } else { ">=" };
    let figure = match v.figure {
        // Refusals are a count; every other figure is ms or a ratio.
        Some(x) if v.slo == "max_refused" => format!("{x:.0} {op} {}", v.bound),
        Some(x) => format!("{x:.2} {op} {}", v.bound),
        None => format!("not measured (must be {op} {})", v.bound),
    };
    format!(
        "  {}  {:<10} {:<12} {:<21} {figure}",
        if v.pass { "PASS" } else { "FAIL" },
        v.tenant,
        v.phase,
        v.slo
    )
}

/// The ratios, the verdicts and the overall result.
pub fn verdict_table(r: &ScenarioReport) -> String {
    let mut out = String::new();
    if !r.ratios.is_empty() {
        let _ = writeln!(out, "ratios to each tenant's baseline phase");
        for x in &r.ratios {
            let f = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.2}x"));
            let _ = writeln!(
                out,
                "  {:<10} {} / {}: TTFT p99 {}, ITL p50 {}, ITL p99 {}, throughput {}",
                x.tenant,
                x.phase,
                x.baseline,
                f(x.ttft_p99),
                f(x.itl_p50),
                f(x.itl_p99),
                f(x.throughput)
            );
        }
    }
    if r.verdicts.is_empty() {
        let _ = writeln!(out, "no SLOs set: nothing to judge");
        return out;
    }
    let _ = writeln!(out, "verdicts");
    for v in &r.verdicts {
        let _ = writeln!(out, "{}", verdict_line(v));
    }
    let failed = r.verdicts.iter().filter(|v| !v.pass).count();
    let _ = writeln!(
        out,
        "{}: {} of {} SLOs held",
        if failed == 0 { "PASS" } else { "FAIL" },
        r.verdicts.len() - failed,
        r.verdicts.len()
    );
    out
}
