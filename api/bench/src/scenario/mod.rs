//! `stoker bench scenario FILE.toml`: a multi-tenant scenario harness.
//!
//! `stoker bench serve` measures one workload; fairness and isolation are
//! questions about several at once: does a short-prompt tenant keep its TTFT
//! while another floods the server, does a batch job yield to chat, does the
//! flex lane stay out of the interactive lane's way. A scenario file names
//! tenants (key, lane, arrival, lengths, SLOs) and phases (which tenants run
//! together, for how long); each tenant's SLOs are absolute or ratios to its
//! own baseline phase, so "B's TTFT p99 at most twice what it is alone" is
//! written as it is said. The harness runs the phases in order, prints a
//! block per phase and a PASS/FAIL line per SLO, and exits 0 only when every
//! SLO held.
//!
//! File format (`benchmarks/scenarios/*.toml` are examples):
//!
//! ```toml
//! name = "flood"                 # default: the file name; names plot files
//! endpoint = "chat"              # chat (default) or completions
//! model = "..."                  # default: --model, else the first of /v1/models
//! seed = 1                       # prompts and arrivals (default 0)
//! ignore_eos = true              # exactly max_tokens per request (default false)
//! tokenizer = "models/x.gguf"    # exact prompt lengths; relative to the current directory
//!
//! [[tenant]]
//! name = "A"
//! api_key_env = "STOKER_KEY_A"   # or api_key = "..." (at most one; none: no key)
//! lane = "interactive"           # interactive (default) | flex | batch
//! arrival = "closed:32"          # closed:N, constant:R, poisson:R, burst:N/S (not for batch)
//! input = "fixed:400"            # prompt tokens: N, fixed:N, uniform:A-B, normal:M,S (default fixed:128)
//! output = "fixed:32"            # max_tokens, same forms (default fixed:64)
//! stream = true                  # default true (not for batch)
//! start_after_secs = 3           # delay within each phase (default 0; not for batch)
//! retry = false                  # resend a Retry-After refusal once (not for batch)
//! rows = 2000                    # batch only, required: rows of its Batch API job
//! [tenant.slo]                   # all optional
//! ttft_p99_ms = 500              # absolute: in every phase the tenant is in
//! itl_p50_ms = 100
//! itl_p99_ms = 300
//! max_refused = 0                # 4xx/5xx answers allowed per phase
//! refusal_p99_ms = 50            # p99 from send to a 4xx/5xx status (none refused: met)
//! ttft_p99_ratio = 2.0           # ratios: in every phase but the baseline
//! itl_p50_ratio = 2.0
//! itl_p99_ratio = 2.0
//! throughput_ratio_min = 0.85    # output tok/s (batch: rows/s), at least this share
//! baseline = "alone"             # default: the first phase the tenant is in
//!
//! [[phase]]
//! name = "alone"
//! tenants = ["A"]
//! duration_secs = 20             # multiplied by --duration-scale
//! ```
//!
//! A batch tenant may set only `throughput_ratio_min`; its job is created
//! when its first phase starts, that phase's clock starts once the job has
//! finished a row, and it is cancelled after its last phase. Ratios need the
//! tenant in at least two phases. Every tenant must be in some phase.
//! `start_after_secs` delays the tenant in every phase it is in.
//!
//! stoker sends `x-stoker-ttft-estimate-ms` (its admission estimate of the
//! time to first token, a float in ms) on admitted responses; where it comes,
//! each tenant and phase also reports observed over predicted TTFT (p50,
//! p99). See `crate::target` for how it and `Retry-After` are read.
//!
//! Exit status: 0 when every SLO held, 1 when one failed or the target could
//! not be reached, 2 for a bad scenario file or flags (before any request).

pub mod batch;
pub mod figures;
pub mod file;
pub mod judge;
pub mod plot;
pub mod progress;
pub mod report;
pub mod retry;
pub mod run;
pub mod spec;
mod tenant_spec;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use stoker_executor::tokenizer::ModelTokenizer;

use crate::prompts::PromptSource;
use crate::spec::SpecError;
use crate::target::{HttpTarget, Target};
use crate::{Fail, first_model};
use batch::HttpBatch;
use file::Lane;
use judge::PhaseFigures;
use report::{ScenarioReport, TenantOut, phase_table, verdict_table};
use run::{Backends, PhaseRun, RunConfig};
use spec::Scenario;

#[derive(Args, Debug, Default)]
pub struct ScenarioArgs {
    /// The scenario file (TOML): tenants, phases and SLOs.
    pub file: PathBuf,
    /// Base URL of the server.
    #[arg(long)]
    pub url: String,
    /// Model id to request (overrides the file; default: the first of GET /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// GGUF file whose tokenizer builds prompts of exact lengths (overrides the file).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Multiplies every phase's duration and start delay (0.2: a quick run).
    #[arg(long, default_value_t = 1.0)]
    pub duration_scale: f64,
    /// One JSON document on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON document to this file.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Write one SVG per tenant here, DIR/<scenario>-<tenant>.svg.
    #[arg(long)]
    pub plot_dir: Option<PathBuf>,
    /// Seconds one request may take before it counts as failed (`timeout`).
    #[arg(long, default_value_t = 300.0)]
    pub timeout_secs: f64,
}

/// Reads and checks the scenario and the flags: every refusal before any
/// request.
pub fn load(a: &ScenarioArgs) -> Result<Scenario, SpecError> {
    if !(a.duration_scale.is_finite() && a.duration_scale > 0.0 && a.duration_scale <= 1000.0) {
        return Err(SpecError(format!(
            "--duration-scale {} must be above 0 and at most 1000",
            a.duration_scale
        )));
    }
    if !(a.timeout_secs.is_finite() && a.timeout_secs > 0.0 && a.timeout_secs <= 86_400.0) {
        return Err(SpecError(
            "--timeout-secs must be above 0 and at most 86400".into(),
        ));
    }
    let url = a.url.trim_end_matches('/');
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(SpecError(format!(
            "--url {url:?} must start with http:// or https://"
        )));
    }
    if let Some(d) = &a.plot_dir
        && d.exists()
        && !d.is_dir()
    {
        return Err(SpecError(format!(
            "--plot-dir {}: not a directory",
            d.display()
        )));
    }
    let text = file::read(&a.file)?;
    let shown = a.file.display().to_string();
    Scenario::parse(&shown, &text, &|k| std::env::var(k).ok())
}

/// The prompts: exact lengths when a tokenizer is known (flag over file).
fn prompts(s: &Scenario, a: &ScenarioArgs) -> Result<PromptSource, SpecError> {
    let (path, at) = match (&a.tokenizer, &s.tokenizer) {
        (Some(p), _) => (Some(p), "--tokenizer".to_owned()),
        (None, Some(p)) => (Some(p), format!("{}: tokenizer", s.tokenizer_at)),
        (None, None) => (None, String::new()),
    };
    let tokenizer = match path {
        Some(p) => Some(
            ModelTokenizer::from_gguf_file(p)
                .map_err(|e| SpecError(format!("{at} {}: {e}", p.display())))?,
        ),
        None => None,
    };
    PromptSource::generated(tokenizer)
}

/// Entry point of `stoker bench scenario`.
pub(crate) async fn scenario(a: ScenarioArgs) -> Result<ExitCode, Fail> {
    let s = load(&a)?;
    let prompts = prompts(&s, &a)?;
    let exact = prompts.exact();
    let url = a.url.trim_end_matches('/').to_owned();
    // No idle connections are kept, as in `stoker bench serve`.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| Fail::Run(e.to_string()))?;
    let model = match a.model.as_ref().or(s.model.as_ref()) {
        Some(m) => m.clone(),
        None => {
            let key = s.tenants.iter().find_map(|t| t.key.as_ref());
            first_model(&client, &url, key.map(|k| k.0.as_str())).await?
        }
    };
    let timeout = Duration::from_secs_f64(a.timeout_secs);
    let http = |key: Option<String>, stream: bool| {
        HttpTarget::new(
            client.clone(),
            &url,
            key,
            s.endpoint,
            model.clone(),
            s.ignore_eos,
            timeout,
        )
        .streaming(stream)
    };
    let targets = s
        .tenants
        .iter()
        .map(|t| {
            (t.lane != Lane::Batch).then(|| {
                Arc::new(http(t.key.as_ref().map(|k| k.0.clone()), t.stream)) as Arc<dyn Target>
            })
        })
        .collect();
    let backends = Backends {
        targets,
        batch: Arc::new(HttpBatch::new(
            client.clone(),
            &url,
            http(None, false),
            s.endpoint.path(),
        )),
    };
    let cfg = RunConfig {
        scale: a.duration_scale,
        bars: progress::enabled(a.json),
    };
    let runs = run::run(&s, Arc::new(prompts), &backends, cfg)
        .await
        .map_err(Fail::Run)?;
    let report = build_report(&s, &runs, &url, &model, a.duration_scale, exact);
    if !a.json {
        for p in &report.phases {
            println!("{}", phase_table(p));
        }
        print!("{}", verdict_table(&report));
    }
    let doc = serde_json::to_string_pretty(&report).map_err(|e| Fail::Run(e.to_string()))?;
    if let Some(p) = &a.save {
        std::fs::write(p, format!("{doc}\n"))
            .map_err(|e| Fail::Run(format!("--save {}: {e}", p.display())))?;
    }
    if a.json {
        println!("{doc}");
    }
    if let Some(dir) = &a.plot_dir {
        plot::write_all(dir, &report).map_err(Fail::Run)?;
    }
    Ok(if report.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The figures, ratios and verdicts of a finished run.
pub fn build_report(
    s: &Scenario,
    runs: &[PhaseRun],
    url: &str,
    model: &str,
    scale: f64,
    exact: bool,
) -> ScenarioReport {
    let phases: Vec<PhaseFigures> = runs
        .iter()
        .map(|r| PhaseFigures {
            name: s.phases[r.phase].name.clone(),
            duration_s: r.duration.as_secs_f64(),
            elapsed_s: r.elapsed.as_secs_f64(),
            tenants: r
                .tenants
                .iter()
                .map(|t| figures::of(&s.tenants[t.tenant], t))
                .collect(),
        })
        .collect();
    let ratios = judge::ratios(s, &phases);
    let verdicts = judge::verdicts(s, &phases, &ratios);
    ScenarioReport {
        scenario: s.name.clone(),
        file: s.file.clone(),
        url: url.to_owned(),
        model: model.to_owned(),
        endpoint: format!("{:?}", s.endpoint).to_lowercase(),
        seed: s.seed,
        duration_scale: scale,
        exact_prompt_lengths: exact,
        tenants: TenantOut::all(s),
        passed: verdicts.iter().all(|v| v.pass),
        phases,
        ratios,
        verdicts,
    }
}

#[cfg(test)]
mod tests;
