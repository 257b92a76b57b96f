//! What a run prints: a live progress line on stderr while a level runs, a
//! table per level and a sweep table with the knee, or one JSON document
//! on stdout with `--json`.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;

use super::driver::Progress;
use super::profile::Recorded;
use super::spec::{Slo, Workload};
use super::stats::{Dist, Summary};

/// The whole run, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct Report {
    pub url: String,
    pub model: String,
    pub endpoint: String,
    pub workload: WorkloadOut,
    pub slo: Slo,
    /// Prompt token counts were exact (the target's tokenizer was known).
    pub exact_prompt_lengths: bool,
    pub levels: Vec<Summary>,
    /// What a sweep steps (`concurrency`, `rate (req/s)`, `burst size`).
    pub level_name: String,
    /// The highest level that met the SLOs (sweeps only).
    pub knee: Option<Summary>,
    /// The sweep stopped at a level that broke the SLOs (rather than at its
    /// last level with the SLOs still met).
    pub knee_bounded: bool,
    pub profile: Option<Recorded>,
}

#[derive(Debug, Serialize)]
pub struct WorkloadOut {
    pub name: String,
    pub input: String,
    pub output: String,
    pub prompts: Option<String>,
    pub arrival: String,
    pub batch_share: f64,
    pub requests: Option<u64>,
    pub duration_s: Option<f64>,
    pub seed: u64,
    pub ignore_eos: bool,
}

impl From<&Workload> for WorkloadOut {
    fn from(w: &Workload) -> Self {
        WorkloadOut {
            name: w.name.clone(),
            input: w.input.to_string(),
            output: w.output.to_string(),
            prompts: w.prompts.as_ref().map(|p| p.display().to_string()),
            arrival: w.arrival.to_string(),
            batch_share: w.batch_share,
            requests: w.requests,
            duration_s: w.duration.map(|d| d.as_secs_f64()),
            seed: w.seed,
            ignore_eos: w.ignore_eos,
        }
    }
}

/// Draws `done/total` on stderr every 200 ms until dropped: redrawn in place
/// on a terminal, a line every 5 s otherwise.
pub struct ProgressLine {
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ProgressLine {
    pub fn start(label: String, total: Option<u64>, p: Arc<Progress>, enabled: bool) -> Self {
        if !enabled {
            return ProgressLine { task: None };
        }
        let tty = std::io::stderr().is_terminal();
        let task = tokio::spawn(async move {
            let every = if tty {
                Duration::from_millis(200)
            } else {
                Duration::from_secs(5)
            };
            let t0 = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(every).await;
                let done = p.done.load(Ordering::Relaxed);
                let failed = p.failed.load(Ordering::Relaxed);
                let in_flight = p.sent.load(Ordering::Relaxed).saturating_sub(done);
                let bar = match total {
                    Some(t) if t > 0 => {
                        let filled = ((done as f64 / t as f64) * 24.0).round() as usize;
                        format!(
                            "[{}{}] {done}/{t}",
                            "#".repeat(filled.min(24)),
                            ".".repeat(24 - filled.min(24))
                        )
                    }
                    _ => format!("{done} done"),
                };
                let line = format!(
                    "{label} {bar}  in flight {in_flight}  failed {failed}  {:.0}s",
                    t0.elapsed().as_secs_f64()
                );
                let mut err = std::io::stderr().lock();
                let _ = if tty {
                    write!(err, "\r\x1b[2K{line}")
                } else {
                    writeln!(err, "{line}")
                };
                let _ = err.flush();
            }
        });
        ProgressLine { task: Some(task) }
    }
}

impl Drop for ProgressLine {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            if std::io::stderr().is_terminal() {
                eprint!("\r\x1b[2K");
            }
        }
    }
}

fn dist_row(out: &mut String, name: &str, d: &Option<Dist>) {
    match d {
        Some(d) => {
            let _ = writeln!(
                out,
                "  {name:<6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                d.mean, d.p50, d.p95, d.p99, d.max
            );
        }
        None => {
            let _ = writeln!(out, "  {name:<6} {:>9}", "-");
        }
    }
}

/// One level's figures as a table.
pub fn level_table(s: &Summary, slo: &Slo) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {} requests, {} completed, {} failed ({} batch lane) in {:.2} s",
        s.arrival, s.requests, s.completed, s.failed, s.batch_requests, s.duration_s
    );
    let _ = writeln!(
        out,
        "  throughput {:.2} req/s, {:.1} output tok/s; in flight {:.1} on average",
        s.request_throughput, s.output_throughput, s.mean_in_flight
    );
    if !slo.is_empty() {
        let _ = writeln!(
            out,
            "  goodput {:.2} req/s; {:.1} % within SLO (target {:.1} %): {}",
            s.goodput,
            s.slo_attainment * 100.0,
            slo.attainment * 100.0,
            if s.meets_slo { "met" } else { "BROKEN" }
        );
    }
    let _ = writeln!(
        out,
        "  {:<6} {:>9} {:>9} {:>9} {:>9} {:>9}   (ms)",
        "", "mean", "p50", "p95", "p99", "max"
    );
    dist_row(&mut out, "TTFT", &s.ttft_ms);
    dist_row(&mut out, "TPOT", &s.tpot_ms);
    dist_row(&mut out, "ITL", &s.itl_ms);
    dist_row(&mut out, "E2E", &s.e2e_ms);
    if let (Some(p), Some(o)) = (&s.prompt_tokens, &s.output_tokens) {
        let _ = writeln!(
            out,
            "  tokens: prompt {:.1} mean ({}..{}), output {:.1} mean ({}..{})",
            p.mean, p.min, p.max, o.mean, o.min, o.max
        );
    }
    if let Some(sv) = &s.server {
        let f = |v: Option<f64>, scale: f64, unit: &str| {
            v.map_or("-".to_owned(), |v| format!("{:.1}{unit}", v * scale))
        };
        let _ = writeln!(
            out,
            "  server: queue {} mean, KV usage {} mean / {} max, prefill {}",
            f(sv.queue_time_ms_mean, 1.0, " ms"),
            f(sv.kv_usage_mean, 100.0, " %"),
            f(sv.kv_usage_max, 100.0, " %"),
            f(sv.prefill_tok_s, 1.0, " tok/s"),
        );
    }
    if let Some(b) = &s.batch {
        let _ = writeln!(
            out,
            "  batch lane: {} of {} completed, {:.1} output tok/s, E2E p50 {} ms \
             (latencies above: interactive lane)",
            b.completed,
            b.requests,
            b.output_throughput,
            b.e2e_ms.map_or("-".to_owned(), |d| format!("{:.1}", d.p50)),
        );
    }
    if !s.failures.is_empty() {
        let list: Vec<String> = s.failures.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let _ = writeln!(
            out,
            "  failures: {} ({} with Retry-After)",
            list.join(", "),
            s.retry_after
        );
    }
    out
}

/// The sweep table: one row per level, the knee marked.
pub fn sweep_table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>12} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7} {:>7}",
        r.level_name,
        "req/s",
        "out tok/s",
        "TTFT p50",
        "TTFT p99",
        "TPOT p99",
        "E2E p99",
        "SLO %",
        "failed"
    );
    let knee = r.knee.as_ref().map(|k| k.level);
    let p = |d: &Option<Dist>, f: fn(&Dist) -> f64| d.as_ref().map_or(f64::NAN, f);
    for s in &r.levels {
        let _ = writeln!(
            out,
            "{:>12} {:>8.2} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>7.1} {:>7}{}",
            trim_level(s.level),
            s.request_throughput,
            s.output_throughput,
            p(&s.ttft_ms, |d| d.p50),
            p(&s.ttft_ms, |d| d.p99),
            p(&s.tpot_ms, |d| d.p99),
            p(&s.e2e_ms, |d| d.p99),
            s.slo_attainment * 100.0,
            s.failed,
            if Some(s.level) == knee {
                "  <- knee"
            } else {
                ""
            }
        );
    }
    match &r.knee {
        Some(k) => {
            let _ = writeln!(
                out,
                "knee: {} {} ({}): TTFT p99 {:.1} ms, {:.1} output tok/s, {:.2} req/s",
                r.level_name,
                trim_level(k.level),
                if r.knee_bounded {
                    "the next level broke the SLOs"
                } else {
                    "the SLOs held at every level tried; the real knee is higher"
                },
                k.ttft_ms.map_or(f64::NAN, |d| d.p99),
                k.output_throughput,
                k.request_throughput
            );
        }
        None => {
            let _ = writeln!(out, "knee: none; the SLOs broke at the first level");
        }
    }
    out
}

pub fn trim_level(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}
