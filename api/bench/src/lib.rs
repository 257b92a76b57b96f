//! `stoker bench serve`: a load generator for any OpenAI-compatible server.
//!
//! "The model is slow" is usually the wrong diagnosis: queue time, prefill
//! and admission decide what users feel. This tool offers a described
//! workload (lengths, arrivals, lane mix), measures what clients see (TTFT,
//! TPOT, ITL, end to end, goodput against SLOs, refusals by code) beside what
//! the server reports, steps the load until the SLOs break (`--sweep`), and
//! can record the knee as the serving revision's capacity profile, which
//! stoker's admission then enforces.
//!
//! `stoker bench scenario` (`scenario/`) runs several tenants at once in
//! phases and judges each against its own baseline: fairness and isolation
//! rather than one workload's knee.
//!
//! Exit status: 0 when the run (or the knee search) succeeded, 1 when the
//! target could not be measured or no level met the SLOs, 2 for bad flags or
//! workload files.

pub mod broker;
pub mod driver;
pub mod paced;
pub mod plot;
pub mod profile;
pub mod prompts;
pub mod report;
pub mod scenario;
pub mod scrape;
pub mod spec;
pub mod stats;
pub mod target;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::Value;
use stoker_executor::tokenizer::ModelTokenizer;

use driver::{Progress, run_level};
use prompts::PromptSource;
use report::{ProgressLine, Report, WorkloadOut, level_table, sweep_table};
use spec::{Arrival, Endpoint, SpecError, Workload, WorkloadFile};
use target::{HttpTarget, Target};

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: BenchCommand,
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Drive an OpenAI-compatible endpoint with a workload and report latency,
    /// throughput and goodput; --sweep finds the knee.
    Serve(Box<ServeArgs>),
    /// Run a multi-tenant scenario file (tenants, phases, SLOs against each
    /// tenant's baseline) and report PASS/FAIL per SLO.
    Scenario(Box<scenario::ScenarioArgs>),
    /// Time one Kafka hop (produce until consumed) on a broker with the
    /// distributed mode's client settings: the floor of what it adds to TTFT.
    Broker(broker::BrokerArgs),
}

#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// Base URL of the server (stoker, vLLM, llama.cpp's llama-server, ...).
    #[arg(long)]
    pub url: String,
    /// API key for the inference routes.
    #[arg(long, env = "STOKER_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Model id to request (default: the first of GET /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// The route to drive.
    #[arg(long, value_enum)]
    pub endpoint: Option<Endpoint>,
    /// TOML workload file; flags override its fields.
    #[arg(long)]
    pub workload: Option<PathBuf>,
    /// Prompt tokens: N, fixed:N, uniform:MIN-MAX or normal:MEAN,STDDEV.
    #[arg(long)]
    pub input: Option<String>,
    /// Output tokens (`max_tokens`), same forms as --input.
    #[arg(long)]
    pub output: Option<String>,
    /// JSONL of {"prompt": ..., "max_tokens"?: N} to sample prompts from.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// GGUF file whose tokenizer builds prompts of exact token lengths.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Closed loop: this many clients, each sending when its last request ends.
    #[arg(long)]
    pub concurrency: Option<u32>,
    /// Open loop: requests per second (Poisson unless --arrival constant).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Spacing of --rate arrivals: poisson or constant.
    #[arg(long)]
    pub arrival: Option<String>,
    /// Bursts: N requests at once every SECONDS, as N/SECONDS.
    #[arg(long)]
    pub burst: Option<String>,
    /// Open loop: most requests in flight at once.
    #[arg(long)]
    pub max_in_flight: Option<u32>,
    /// Share of requests sent in the batch lane (service_tier flex), 0 to 1.
    #[arg(long)]
    pub batch_share: Option<f64>,
    /// Requests per level.
    #[arg(long)]
    pub requests: Option<u64>,
    /// Seconds per level (with --requests, whichever comes first).
    #[arg(long)]
    pub duration: Option<f64>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Ask the server for exactly max_tokens (`ignore_eos`).
    #[arg(long)]
    pub ignore_eos: bool,
    /// SLO: time to first token, ms.
    #[arg(long)]
    pub slo_ttft_ms: Option<f64>,
    /// SLO: time per output token, ms.
    #[arg(long)]
    pub slo_tpot_ms: Option<f64>,
    /// SLO: end-to-end latency, ms.
    #[arg(long)]
    pub slo_e2e_ms: Option<f64>,
    /// Share of requests that must meet the SLOs for a level to pass (0 to 1].
    #[arg(long)]
    pub slo_attainment: Option<f64>,
    /// Step the load until the SLOs break and report the knee.
    #[arg(long)]
    pub sweep: bool,
    /// Levels to try, e.g. 1,2,4,8 (default: doubling from the start level).
    #[arg(long, value_delimiter = ',')]
    pub sweep_levels: Vec<f64>,
    /// Highest level a doubling sweep tries.
    #[arg(long)]
    pub sweep_max: Option<f64>,
    /// One JSON document on stdout instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON document to this file (tables still print).
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Write latency and throughput against load as an SVG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Record the knee (or the single run) as DEPLOYMENT's capacity profile.
    #[arg(long)]
    pub record_profile: Option<String>,
    /// The revision to record the profile for (default: the one that answered).
    #[arg(long)]
    pub revision: Option<String>,
    /// Name of the workload in the profile (default: the file's `name` or `default`).
    #[arg(long)]
    pub workload_name: Option<String>,
    /// Admin key for --record-profile (default: --api-key).
    #[arg(long, env = "STOKER_ADMIN_KEY", hide_env_values = true)]
    pub admin_key: Option<String>,
    /// Seconds one request may take before it counts as failed (`timeout`).
    #[arg(long, default_value_t = 300.0)]
    pub request_timeout: f64,
    /// No progress line on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Entry point of `stoker bench`.
pub async fn run(args: BenchArgs) -> ExitCode {
    match args.command {
        BenchCommand::Serve(a) => match serve(*a).await {
            Ok(code) => code,
            Err(Fail::Usage(e)) => {
                eprintln!("stoker bench serve: {e}");
                ExitCode::from(2)
            }
            Err(Fail::Run(e)) => {
                eprintln!("stoker bench serve: {e}");
                ExitCode::FAILURE
            }
        },
        BenchCommand::Scenario(a) => match scenario::scenario(*a).await {
            Ok(code) => code,
            Err(Fail::Usage(e)) => {
                eprintln!("stoker bench scenario: {e}");
                ExitCode::from(2)
            }
            Err(Fail::Run(e)) => {
                eprintln!("stoker bench scenario: {e}");
                ExitCode::FAILURE
            }
        },
        BenchCommand::Broker(a) => broker::run(a).await,
    }
}

#[derive(Debug)]
enum Fail {
    /// Bad flags or files: exit 2.
    Usage(String),
    /// The target could not be measured: exit 1.
    Run(String),
}

impl From<SpecError> for Fail {
    fn from(e: SpecError) -> Self {
        Fail::Usage(e.0)
    }
}

/// Folds the file and the flags into one workload.
pub fn workload_of(a: &ServeArgs) -> Result<Workload, SpecError> {
    let mut w = Workload::default();
    if let Some(f) = &a.workload {
        WorkloadFile::read(f)?.apply(&mut w)?;
    }
    if let Some(v) = a.endpoint {
        w.endpoint = v;
    }
    if a.model.is_some() {
        w.model = a.model.clone();
    }
    if let Some(v) = &a.input {
        w.input = v.parse()?;
    }
    if let Some(v) = &a.output {
        w.output = v.parse()?;
    }
    if a.prompts.is_some() {
        w.prompts = a.prompts.clone();
    }
    let chosen = [a.concurrency.is_some(), a.rate.is_some(), a.burst.is_some()];
    if chosen.iter().filter(|c| **c).count() > 1 {
        return Err(SpecError(
            "choose one arrival pattern: --concurrency, --rate or --burst".into(),
        ));
    }
    if a.arrival.is_some() && a.rate.is_none() {
        return Err(SpecError("--arrival only shapes --rate".into()));
    }
    if let Some(c) = a.concurrency {
        w.arrival = format!("closed:{c}").parse()?;
    }
    if let Some(r) = a.rate {
        let kind = match a.arrival.as_deref().unwrap_or("poisson") {
            k @ ("poisson" | "constant") => k,
            other => {
                return Err(SpecError(format!(
                    "--arrival `{other}`: use poisson or constant"
                )));
            }
        };
        w.arrival = format!("{kind}:{r}").parse()?;
    }
    if let Some(b) = &a.burst {
        w.arrival = format!("burst:{b}").parse()?;
    }
    if a.max_in_flight.is_some() {
        w.max_in_flight = a.max_in_flight;
    }
    if let Some(v) = a.batch_share {
        w.batch_share = v;
    }
    if a.requests.is_some() {
        w.requests = a.requests;
    }
    if let Some(d) = a.duration {
        w.duration = Some(spec::duration(d)?);
    }
    if let Some(v) = a.seed {
        w.seed = v;
    }
    if a.ignore_eos {
        w.ignore_eos = true;
    }
    w.slo.ttft_ms = a.slo_ttft_ms.or(w.slo.ttft_ms);
    w.slo.tpot_ms = a.slo_tpot_ms.or(w.slo.tpot_ms);
    w.slo.e2e_ms = a.slo_e2e_ms.or(w.slo.e2e_ms);
    if let Some(v) = a.slo_attainment {
        w.slo.attainment = v;
    }
    if let Some(n) = &a.workload_name {
        w.name = n.clone();
    }
    w.check()?;
    Ok(w)
}

/// The levels a sweep runs, in order.
pub fn sweep_levels(a: &ServeArgs, start: &Arrival) -> Result<Vec<f64>, SpecError> {
    if !a.sweep {
        if !a.sweep_levels.is_empty() || a.sweep_max.is_some() {
            return Err(SpecError(
                "--sweep-levels and --sweep-max need --sweep".into(),
            ));
        }
        return Ok(vec![start.level()]);
    }
    let ok = |x: f64| x.is_finite() && x > 0.0 && x <= spec::MAX_LEVEL;
    if !a.sweep_levels.is_empty() {
        if !a.sweep_levels.iter().all(|&x| ok(x)) {
            return Err(SpecError(
                "--sweep-levels must be numbers above 0 and at most 100000".into(),
            ));
        }
        if !a.sweep_levels.windows(2).all(|w| w[0] < w[1]) {
            return Err(SpecError("--sweep-levels must increase".into()));
        }
        if a.sweep_levels.len() > 64 {
            return Err(SpecError("--sweep-levels takes at most 64 levels".into()));
        }
        return Ok(a.sweep_levels.clone());
    }
    let max = a.sweep_max.unwrap_or(start.level() * 64.0);
    if !ok(max) || max < start.level() {
        return Err(SpecError(format!(
            "--sweep-max {max} must be at least the start level {} and at most 100000",
            start.level()
        )));
    }
    let mut levels = vec![start.level()];
    while levels.len() < 64 {
        let next = levels[levels.len() - 1] * 2.0;
        if next > max {
            break;
        }
        levels.push(next);
    }
    Ok(levels)
}

async fn serve(a: ServeArgs) -> Result<ExitCode, Fail> {
    let w = workload_of(&a)?;
    let levels = sweep_levels(&a, &w.arrival)?;
    if a.sweep && w.slo.is_empty() {
        return Err(Fail::Usage(
            "--sweep needs at least one SLO (--slo-ttft-ms, --slo-tpot-ms or --slo-e2e-ms)".into(),
        ));
    }
    if !(a.request_timeout > 0.0 && a.request_timeout <= 86_400.0) {
        return Err(Fail::Usage(
            "--request-timeout must be above 0 and at most 86400 seconds".into(),
        ));
    }
    if let Some(p) = &a.plot
        && !p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
    {
        return Err(Fail::Usage(format!(
            "--plot {}: only .svg is written",
            p.display()
        )));
    }
    let url = a.url.trim_end_matches('/').to_owned();
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(Fail::Usage(format!(
            "--url {url:?} must start with http:// or https://"
        )));
    }
    let tokenizer = match &a.tokenizer {
        Some(p) => Some(
            ModelTokenizer::from_gguf_file(p)
                .map_err(|e| Fail::Usage(format!("--tokenizer {}: {e}", p.display())))?,
        ),
        None => None,
    };
    let prompts = match &w.prompts {
        Some(p) => PromptSource::from_file(p, tokenizer.as_ref())?,
        None => PromptSource::generated(tokenizer)?,
    };
    // No idle connections are kept: servers that close a kept-alive connection
    // after a few requests (llama.cpp's does) would fail the next request sent
    // on it. A fresh loopback connection costs well under a millisecond.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(|e| Fail::Run(e.to_string()))?;
    let model = match &w.model {
        Some(m) => m.clone(),
        None => first_model(&client, &url, a.api_key.as_deref()).await?,
    };
    let target: Arc<dyn Target> = Arc::new(HttpTarget::new(
        client.clone(),
        &url,
        a.api_key.clone(),
        w.endpoint,
        model.clone(),
        w.ignore_eos,
        Duration::from_secs_f64(a.request_timeout),
    ));
    let exact = prompts.exact();
    let prompts = Arc::new(prompts);
    let w = Arc::new(w);
    let mut summaries = Vec::new();
    let mut knee: Option<stats::Summary> = None;
    let mut knee_bounded = false;
    for (ordinal, level) in levels.iter().enumerate() {
        let arrival = w.arrival.at_level(*level);
        let progress = Arc::new(Progress::default());
        let before = scrape::fetch(&client, &url, a.api_key.as_deref()).await;
        let sampler = spawn_kv_sampler(client.clone(), url.clone(), a.api_key.clone());
        let line = ProgressLine::start(arrival.to_string(), w.requests, progress.clone(), !a.quiet);
        let run = run_level(
            target.clone(),
            w.clone(),
            prompts.clone(),
            arrival.clone(),
            ordinal as u32,
            progress,
        )
        .await;
        drop(line);
        let kv = sampler.stop().await;
        let after = scrape::fetch(&client, &url, a.api_key.as_deref()).await;
        let server = match (&before, &after) {
            (Some(b), Some(af)) => Some(scrape::ServerFigures::between(b, af, &kv)),
            _ => None,
        };
        let s = stats::summarize(arrival.to_string(), *level, &run.outcomes, &w.slo, server);
        if !a.json {
            print!("{}", level_table(&s, &w.slo));
        }
        let passed = s.meets_slo;
        summaries.push(s);
        if a.sweep {
            if passed {
                knee = summaries.last().cloned();
            } else {
                knee_bounded = knee.is_some();
                break;
            }
        }
    }
    let mut report = Report {
        url: url.clone(),
        model,
        endpoint: format!("{:?}", w.endpoint).to_lowercase(),
        workload: WorkloadOut::from(w.as_ref()),
        slo: w.slo.clone(),
        exact_prompt_lengths: exact,
        level_name: w.arrival.level_name().to_owned(),
        levels: summaries,
        knee,
        knee_bounded,
        profile: None,
    };
    let mut failure = None;
    if let Some(dep) = &a.record_profile {
        // A single run records itself; a sweep records its knee.
        let at = if a.sweep {
            report.knee.clone()
        } else {
            report.levels.last().cloned()
        };
        match at {
            None => failure = Some("no level met the SLOs; no profile was recorded".to_owned()),
            Some(k) => {
                let arrival = w.arrival.at_level(k.level);
                let key = a.admin_key.as_deref().or(a.api_key.as_deref());
                match profile::record(
                    &client,
                    &url,
                    key,
                    dep,
                    a.revision.as_deref(),
                    &w,
                    &k,
                    &arrival,
                )
                .await
                {
                    Ok(r) => report.profile = Some(r),
                    Err(e) => failure = Some(e),
                }
            }
        }
    }
    if let Some(p) = &a.plot {
        plot::write(p, &report).map_err(Fail::Run)?;
    }
    let doc = serde_json::to_string_pretty(&report).map_err(|e| Fail::Run(e.to_string()))?;
    if let Some(p) = &a.save {
        std::fs::write(p, format!("{doc}\n"))
            .map_err(|e| Fail::Run(format!("--save {}: {e}", p.display())))?;
    }
    if a.json {
        println!("{doc}");
    } else {
        if a.sweep {
            print!("{}", sweep_table(&report));
        }
        if let Some(p) = &report.profile {
            println!(
                "recorded capacity profile {}/{}/{}: {} concurrent, {} active tokens",
                p.deployment_id,
                p.revision_id,
                p.workload,
                p.envelope.concurrency,
                p.envelope.active_tokens
            );
        }
    }
    if let Some(e) = failure {
        return Err(Fail::Run(e));
    }
    if a.sweep && report.knee.is_none() {
        return Err(Fail::Run("no level met the SLOs".into()));
    }
    if report.levels.iter().all(|s| s.completed == 0) {
        let codes: Vec<String> = report
            .levels
            .iter()
            .flat_map(|s| s.failures.iter().map(|(c, n)| format!("{c} {n}")))
            .collect();
        return Err(Fail::Run(format!(
            "no request completed ({})",
            codes.join(", ")
        )));
    }
    Ok(ExitCode::SUCCESS)
}

/// The first model the server lists.
async fn first_model(
    client: &reqwest::Client,
    url: &str,
    key: Option<&str>,
) -> Result<String, Fail> {
    let mut req = client
        .get(format!("{url}/v1/models"))
        .timeout(Duration::from_secs(30));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| Fail::Run(format!("GET {url}/v1/models: {e}")))?;
    let status = resp.status();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        return Err(Fail::Run(format!(
            "GET {url}/v1/models: HTTP {status}: {}",
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("no error body")
        )));
    }
    v.pointer("/data/0/id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| Fail::Run(format!("{url}/v1/models lists no model; give --model")))
}

/// Samples KV-cache usage from `/metrics` every 500 ms while a level runs.
struct KvSampler {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Vec<f64>>,
}

fn spawn_kv_sampler(client: reqwest::Client, url: String, key: Option<String>) -> KvSampler {
    let (stop, mut rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut out = Vec::new();
        loop {
            if let Some(s) = scrape::fetch(&client, &url, key.as_deref()).await
                && let Some(v) = scrape::ServerFigures::kv_usage(&s)
            {
                out.push(v);
            }
            tokio::select! {
                _ = &mut rx => return out,
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    });
    KvSampler { stop, task }
}

impl KvSampler {
    async fn stop(self) -> Vec<f64> {
        let _ = self.stop.send(());
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
