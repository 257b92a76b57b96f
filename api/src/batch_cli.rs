//! `stoker batch …`: the OpenAI Batch API from the command line. `submit`
//! uploads a JSONL file (`POST /v1/files`, purpose `batch`) and creates a batch
//! on it (`POST /v1/batches`); with `--wait` it follows the batch to its end
//! with a one-line progress bar on stderr. `status`, `list`, `cancel` and
//! `download` are one or two calls each. Output is a table, or the server's
//! JSON with `--json`; the key needs the `batch` scope.
//!
//! Exit codes: 0 on success (with `--wait`: the batch completed); 1 when a
//! followed batch ended failed, expired or cancelled, when the server cannot
//! be reached, or when it answers 5xx; 2 for bad local input (a missing file,
//! bad `--metadata`) and for the server's 4xx answers, whose message and code
//! are printed.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};

use crate::admin_cli::{ServerArgs, cell, enc, table};

/// The endpoint of a submitted file whose first line names none.
const DEFAULT_ENDPOINT: &str = "/v1/chat/completions";
/// Width of the progress bar, in characters.
const BAR_WIDTH: usize = 24;
/// Without a terminal, one progress line per this many seconds (and one per
/// status change), so logs stay readable.
const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// The window the rows/s figure is measured over.
const RATE_WINDOW_SECS: f64 = 30.0;
/// How long `--wait` keeps polling through a server that cannot be reached or
/// answers 5xx (a restart) before giving up.
const UNREACHABLE_GRACE: Duration = Duration::from_secs(180);
/// OpenAI's limits on batch metadata.
const MAX_METADATA_PAIRS: usize = 16;
const MAX_METADATA_KEY: usize = 64;
const MAX_METADATA_VALUE: usize = 512;

#[derive(Args, Debug)]
pub struct BatchArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(subcommand)]
    pub command: BatchCommand,
}

#[derive(Subcommand, Debug)]
pub enum BatchCommand {
    /// Upload a JSONL file of requests and create a batch on it; prints the batch id.
    Submit(SubmitArgs),
    /// One batch: status, row counts, files, validation errors.
    Status { id: String },
    /// Batches, newest first.
    List {
        #[arg(long)]
        limit: Option<u32>,
        /// A batch id: list the ones after it (the previous page's last id).
        #[arg(long)]
        after: Option<String>,
    },
    /// Cancel a batch: running rows stop, rows not run end as `batch_cancelled`.
    Cancel { id: String },
    /// Write a batch's output file (and, with --errors, its error file).
    Download {
        id: String,
        /// Where the output lines go; default: stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
        /// Where the error lines go; default: not downloaded.
        #[arg(long)]
        errors: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
pub struct SubmitArgs {
    /// JSONL, one request a line: {"custom_id", "method": "POST", "url", "body"}.
    pub file: PathBuf,
    /// The endpoint every line targets; default: the first line's `url`, else
    /// /v1/chat/completions.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Follow the batch to its end with a progress bar on stderr; exit 0 only
    /// if it completed.
    #[arg(long)]
    pub wait: bool,
    /// Metadata stored with the batch; repeatable.
    #[arg(long = "metadata", value_name = "KEY=VALUE")]
    pub metadata: Vec<String>,
    /// Seconds between status polls with --wait.
    #[arg(long, default_value_t = 1.0)]
    pub poll_interval: f64,
}

/// Why a command failed, and so its exit code.
#[derive(Debug, PartialEq)]
enum CliError {
    /// Bad local input: a file, an argument. Exit 2.
    Input(String),
    /// The server could not be reached, answered something unreadable, or the
    /// request cannot be served yet. Exit 1.
    Failed(String),
    /// The server refused with its error body. Exit 2 for 4xx, 1 otherwise.
    Server {
        status: u16,
        code: String,
        message: String,
        retry_after: Option<String>,
        body: Value,
    },
}

impl CliError {
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Input(_) => 2,
            CliError::Failed(_) => 1,
            CliError::Server { status, .. } if (400..500).contains(status) => 2,
            CliError::Server { .. } => 1,
        }
    }

    /// Worth retrying while following a batch: the server may be restarting.
    fn is_transient(&self) -> bool {
        match self {
            CliError::Failed(_) => true,
            CliError::Server { status, .. } => *status >= 500,
            CliError::Input(_) => false,
        }
    }

    fn describe(&self) -> String {
        match self {
            CliError::Input(m) | CliError::Failed(m) => m.clone(),
            CliError::Server {
                status,
                code,
                message,
                retry_after,
                ..
            } => {
                let mut s = format!("the server answered {status} {code}: {message}");
                if let Some(r) = retry_after {
                    s.push_str(&format!(" (retry after {r} s)"));
                }
                s
            }
        }
    }
}

/// Parses repeated `KEY=VALUE` arguments into the batch's metadata object,
/// with OpenAI's limits (16 pairs, keys up to 64 and values up to 512 chars).
pub fn parse_metadata(pairs: &[String]) -> Result<Map<String, Value>, String> {
    if pairs.len() > MAX_METADATA_PAIRS {
        return Err(format!(
            "--metadata: at most {MAX_METADATA_PAIRS} pairs, got {}",
            pairs.len()
        ));
    }
    let mut out = Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("--metadata {pair:?}: expected KEY=VALUE"));
        };
        if key.trim().is_empty() {
            return Err(format!("--metadata {pair:?}: the key is empty"));
        }
        if key.chars().count() > MAX_METADATA_KEY {
            return Err(format!(
                "--metadata {pair:?}: keys are at most {MAX_METADATA_KEY} characters"
            ));
        }
        if value.chars().count() > MAX_METADATA_VALUE {
            return Err(format!(
                "--metadata key {key:?}: values are at most {MAX_METADATA_VALUE} characters"
            ));
        }
        if out
            .insert(key.to_owned(), Value::String(value.to_owned()))
            .is_some()
        {
            return Err(format!("--metadata: key {key:?} given twice"));
        }
    }
    Ok(out)
}

/// Reads the file to submit, with a message that names it on any failure.
/// An empty file is refused here: a batch needs at least one line.
pub fn read_input(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::ErrorKind;
    let shown = path.display();
    let data = std::fs::read(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => format!("{shown}: no such file"),
        ErrorKind::PermissionDenied => format!("{shown}: permission denied"),
        ErrorKind::IsADirectory => format!("{shown} is a directory, not a JSONL file"),
        _ => format!("reading {shown}: {e}"),
    })?;
    if data.iter().all(u8::is_ascii_whitespace) {
        return Err(format!(
            "{shown} is empty; a batch needs at least one request line"
        ));
    }
    Ok(data)
}

/// The `url` of the first non-blank line, if it is a JSON object naming one.
pub fn first_line_url(data: &[u8]) -> Option<String> {
    let line = data
        .split(|&b| b == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace))?;
    let v: Value = serde_json::from_slice(line).ok()?;
    v.get("url")?.as_str().map(str::to_owned)
}

/// `45s`, `3m05s`, `2h03m`; `--` for an unknown (non-finite or negative) span.
pub fn fmt_duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "--".into();
    }
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Rows per second with two or three significant digits.
pub fn fmt_rate(rows_per_sec: f64) -> String {
    if !rows_per_sec.is_finite() || rows_per_sec < 0.0 {
        return "-- rows/s".into();
    }
    if rows_per_sec < 10.0 {
        format!("{rows_per_sec:.2} rows/s")
    } else if rows_per_sec < 100.0 {
        format!("{rows_per_sec:.1} rows/s")
    } else {
        format!("{rows_per_sec:.0} rows/s")
    }
}

/// Seconds until `remaining` rows are done at `rate`; `None` when the rate is
/// unknown or zero.
pub fn eta_secs(remaining: u64, rate: Option<f64>) -> Option<f64> {
    match rate {
        _ if remaining == 0 => Some(0.0),
        Some(r) if r.is_finite() && r > 0.0 => Some(remaining as f64 / r),
        _ => None,
    }
}

/// A batch's row counts, read from its `request_counts`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: u64,
    pub completed: u64,
    pub failed: u64,
}

impl Counts {
    pub fn of(batch: &Value) -> Counts {
        let n = |k: &str| batch["request_counts"][k].as_u64().unwrap_or(0);
        Counts {
            total: n("total"),
            completed: n("completed"),
            failed: n("failed"),
        }
    }

    /// Rows that have ended, either way.
    pub fn done(&self) -> u64 {
        self.completed + self.failed
    }
}

/// Rows/s over a sliding window of `(seconds, rows done)` observations. The
/// count may go down (rows run again after a server restart); the window then
/// starts over, so the rate never goes negative.
#[derive(Debug)]
pub struct RateMeter {
    window_secs: f64,
    samples: VecDeque<(f64, u64)>,
}

impl RateMeter {
    pub fn new(window_secs: f64) -> RateMeter {
        RateMeter {
            window_secs,
            samples: VecDeque::new(),
        }
    }

    pub fn observe(&mut self, at_secs: f64, done: u64) {
        if self.samples.back().is_some_and(|&(_, d)| done < d) {
            self.samples.clear();
        }
        self.samples.push_back((at_secs, done));
        // Keep one sample at or before the window's start so the span covers it.
        while self.samples.len() > 2 && self.samples[1].0 <= at_secs - self.window_secs {
            self.samples.pop_front();
        }
    }

    /// `None` until two observations at least half a second apart.
    pub fn rate(&self) -> Option<f64> {
        let (&(t0, d0), &(t1, d1)) = (self.samples.front()?, self.samples.back()?);
        let span = t1 - t0;
        (span >= 0.5).then(|| (d1 - d0) as f64 / span)
    }
}

/// What one progress line shows.
#[derive(Debug)]
pub struct Progress<'a> {
    pub status: &'a str,
    pub counts: Counts,
    pub rate: Option<f64>,
}

/// `[#########...............]  750/2000  37%  41.2 rows/s  ETA 30s  in_progress  3 failed`
pub fn progress_line(p: &Progress<'_>) -> String {
    let Counts { total, failed, .. } = p.counts;
    let done = p.counts.done();
    let filled = if total == 0 {
        0
    } else {
        ((done as u128 * BAR_WIDTH as u128) / total as u128).min(BAR_WIDTH as u128) as usize
    };
    let bar = format!("[{}{}]", "#".repeat(filled), ".".repeat(BAR_WIDTH - filled));
    let mut line = if total == 0 {
        format!("{bar}  {done}/?")
    } else {
        let pct = done as f64 * 100.0 / total as f64;
        format!("{bar}  {done}/{total}  {pct:.0}%")
    };
    let rate = p.rate.map_or("-- rows/s".into(), fmt_rate);
    // No total yet (validating): nothing to estimate.
    let eta = (total > 0)
        .then(|| eta_secs(total.saturating_sub(done), p.rate))
        .flatten()
        .map_or("--".into(), fmt_duration);
    line.push_str(&format!("  {rate}  ETA {eta}  {}", p.status));
    if failed > 0 {
        line.push_str(&format!("  {failed} failed"));
    }
    line
}

/// The line `--wait` ends with, on stdout.
pub fn summary_line(batch: &Value, elapsed_secs: Option<f64>) -> String {
    let c = Counts::of(batch);
    let mut s = format!(
        "{} {}: {}/{} rows, {} completed, {} failed",
        cell(batch, "/id"),
        cell(batch, "/status"),
        c.done(),
        c.total,
        c.completed,
        c.failed
    );
    if let Some(e) = elapsed_secs {
        s.push_str(&format!(" in {}", fmt_duration(e)));
    }
    for (label, ptr) in [("output", "/output_file_id"), ("errors", "/error_file_id")] {
        if batch.pointer(ptr).and_then(Value::as_str).is_some() {
            s.push_str(&format!("; {label} {}", cell(batch, ptr)));
        }
    }
    s
}

/// Statuses a batch never leaves.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "expired" | "cancelled")
}

/// `2026-01-31T12:00:00Z` for Unix seconds; `-` when absent.
fn fmt_time(v: &Value) -> String {
    v.as_i64()
        .and_then(|s| chrono::DateTime::from_timestamp(s, 0))
        .map_or("-".into(), |t| {
            t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        })
}

const BATCH_COLS: &[(&str, &str)] = &[
    ("BATCH", "/id"),
    ("STATUS", "/status"),
    ("ENDPOINT", "/endpoint"),
    ("ROWS", "/rows"),
    ("FAILED", "/failed"),
    ("CREATED", "/created"),
    ("OUTPUT", "/output"),
    ("ERRORS", "/errors"),
];

/// A batch flattened into [`BATCH_COLS`]' cells.
fn batch_row(b: &Value) -> Value {
    let c = Counts::of(b);
    json!({
        "id": b["id"], "status": b["status"], "endpoint": b["endpoint"],
        "rows": format!("{}/{}", c.done(), c.total), "failed": c.failed,
        "created": fmt_time(&b["created_at"]),
        "output": b["output_file_id"], "errors": b["error_file_id"],
    })
}

/// The batch table plus its validation errors, one per line.
fn render_batch(b: &Value) -> String {
    let mut s = table(&[batch_row(b)], BATCH_COLS);
    for e in b["errors"]["data"].as_array().into_iter().flatten() {
        let line = e["line"]
            .as_u64()
            .map_or(String::new(), |l| format!("line {l}: "));
        s.push_str(&format!(
            "error {}: {line}{}\n",
            cell(e, "/code"),
            cell(e, "/message")
        ));
    }
    s
}

/// The HTTP side: one base URL, one optional key.
struct Api {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

impl Api {
    fn new(url: &str, key: Option<String>) -> Result<Api, CliError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| CliError::Failed(format!("building the HTTP client: {e}")))?;
        Ok(Api {
            http,
            base: url.trim_end_matches('/').to_owned(),
            key,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(k) => req.bearer_auth(k),
            None => req,
        }
    }

    /// Sends; a non-2xx answer becomes [`CliError::Server`].
    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, CliError> {
        let resp = req
            .send()
            .await
            .map_err(|e| CliError::Failed(format!("cannot reach {}: {e}", self.base)))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = resp.text().await.unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let message = match body.pointer("/error/message").and_then(Value::as_str) {
            Some(m) => m.to_owned(),
            None => text.trim().chars().take(300).collect(),
        };
        Err(CliError::Server {
            status: status.as_u16(),
            code: cell(&body, "/error/code"),
            message,
            retry_after,
            body,
        })
    }

    async fn json(&self, req: reqwest::RequestBuilder) -> Result<Value, CliError> {
        let resp = self.send(req).await?;
        let status = resp.status();
        resp.json().await.map_err(|e| {
            CliError::Failed(format!("the server answered {status} without JSON: {e}"))
        })
    }

    async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.json(self.request(reqwest::Method::GET, path)).await
    }

    async fn batch(&self, id: &str) -> Result<Value, CliError> {
        self.get(&format!("/v1/batches/{}", enc(id))).await
    }

    /// Streams a file's content into `out`; returns the bytes written.
    async fn download(&self, file_id: &str, out: &mut dyn Write) -> Result<u64, CliError> {
        let resp = self
            .send(self.request(
                reqwest::Method::GET,
                &format!("/v1/files/{}/content", enc(file_id)),
            ))
            .await?;
        let mut stream = resp.bytes_stream();
        let mut n = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| CliError::Failed(format!("reading {file_id}: {e}")))?;
            out.write_all(&chunk)
                .map_err(|e| CliError::Failed(format!("writing {file_id}: {e}")))?;
            n += chunk.len() as u64;
        }
        out.flush()
            .map_err(|e| CliError::Failed(format!("writing {file_id}: {e}")))?;
        Ok(n)
    }
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Runs one batch command; prints the result or the error.
pub async fn run(args: BatchArgs) -> ExitCode {
    let json_out = args.server.json;
    let result = match Api::new(&args.server.url, args.server.api_key) {
        Ok(api) => dispatch(&api, args.command, json_out).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if let (true, CliError::Server { body, .. }) = (json_out, &e)
                && !body.is_null()
            {
                println!("{body}");
            }
            eprintln!("stoker batch: {}", e.describe());
            ExitCode::from(e.exit_code())
        }
    }
}

async fn dispatch(api: &Api, cmd: BatchCommand, json_out: bool) -> Result<ExitCode, CliError> {
    match cmd {
        BatchCommand::Submit(a) => submit(api, a, json_out).await,
        BatchCommand::Status { id } => {
            let b = api.batch(&id).await?;
            if json_out {
                print_json(&b);
            } else {
                print!("{}", render_batch(&b));
            }
            Ok(ExitCode::SUCCESS)
        }
        BatchCommand::List { limit, after } => {
            let mut q: Vec<(&str, String)> = Vec::new();
            if let Some(l) = limit {
                q.push(("limit", l.to_string()));
            }
            if let Some(a) = after {
                q.push(("after", a));
            }
            let page = api
                .json(api.request(reqwest::Method::GET, "/v1/batches").query(&q))
                .await?;
            if json_out {
                print_json(&page);
            } else {
                let rows: Vec<Value> = page["data"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(batch_row)
                    .collect();
                print!("{}", table(&rows, BATCH_COLS));
                if page["has_more"].as_bool() == Some(true) {
                    println!("(more: --after {})", cell(&page, "/last_id"));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        BatchCommand::Cancel { id } => {
            let b = api
                .json(api.request(
                    reqwest::Method::POST,
                    &format!("/v1/batches/{}/cancel", enc(&id)),
                ))
                .await?;
            if json_out {
                print_json(&b);
            } else {
                print!("{}", render_batch(&b));
            }
            Ok(ExitCode::SUCCESS)
        }
        BatchCommand::Download { id, output, errors } => download(api, &id, output, errors).await,
    }
}

async fn submit(api: &Api, a: SubmitArgs, json_out: bool) -> Result<ExitCode, CliError> {
    let metadata = parse_metadata(&a.metadata).map_err(CliError::Input)?;
    if !(a.poll_interval.is_finite() && a.poll_interval > 0.0) {
        return Err(CliError::Input(
            "--poll-interval must be a positive number of seconds".into(),
        ));
    }
    let data = read_input(&a.file).map_err(CliError::Input)?;
    let endpoint = a
        .endpoint
        .clone()
        .or_else(|| first_line_url(&data))
        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
    let filename = a
        .file
        .file_name()
        .map_or("batch.jsonl".into(), |n| n.to_string_lossy().into_owned());
    let size = data.len();
    let part = reqwest::multipart::Part::bytes(data)
        .file_name(filename.clone())
        .mime_str("application/jsonl")
        .map_err(|e| CliError::Failed(format!("building the upload: {e}")))?;
    let form = reqwest::multipart::Form::new()
        .text("purpose", "batch")
        .part("file", part);
    let file = api
        .json(
            api.request(reqwest::Method::POST, "/v1/files")
                .multipart(form),
        )
        .await?;
    let file_id = cell(&file, "/id");
    eprintln!("stoker batch: uploaded {filename} ({size} bytes) as {file_id}");

    let mut body = json!({
        "input_file_id": file_id,
        "endpoint": endpoint,
        "completion_window": "24h",
    });
    if !metadata.is_empty() {
        body["metadata"] = Value::Object(metadata);
    }
    let batch = match api
        .json(
            api.request(reqwest::Method::POST, "/v1/batches")
                .json(&body),
        )
        .await
    {
        Ok(b) => b,
        Err(e) => {
            // No batch uses the file: don't leave it behind.
            let _ = api
                .send(api.request(
                    reqwest::Method::DELETE,
                    &format!("/v1/files/{}", enc(&file_id)),
                ))
                .await;
            return Err(e);
        }
    };
    let id = cell(&batch, "/id");
    if !a.wait {
        if json_out {
            print_json(&batch);
        } else {
            println!("{id}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !json_out {
        println!("{id}");
    }
    let started = Instant::now();
    let end = follow(api, &id, Duration::from_secs_f64(a.poll_interval)).await?;
    if json_out {
        print_json(&end);
    } else {
        println!(
            "{}",
            summary_line(&end, Some(started.elapsed().as_secs_f64()))
        );
    }
    Ok(if end["status"] == "completed" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Polls a batch until it ends, drawing progress on stderr: redrawn in place
/// on a terminal, a line every few seconds otherwise. Survives a server that
/// is briefly unreachable (a restart) for up to [`UNREACHABLE_GRACE`].
async fn follow(api: &Api, id: &str, interval: Duration) -> Result<Value, CliError> {
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut meter = RateMeter::new(RATE_WINDOW_SECS);
    let mut last_plain: Option<Instant> = None;
    let mut last_status = String::new();
    let mut unreachable_since: Option<Instant> = None;
    loop {
        let b = match api.batch(id).await {
            Ok(b) => {
                unreachable_since = None;
                b
            }
            Err(e) if e.is_transient() => {
                let since = *unreachable_since.get_or_insert_with(Instant::now);
                if since.elapsed() > UNREACHABLE_GRACE {
                    if tty {
                        eprintln!();
                    }
                    return Err(e);
                }
                if since.elapsed() < interval {
                    let sep = if tty { "\n" } else { "" };
                    eprintln!("{sep}stoker batch: {} (still trying)", e.describe());
                }
                tokio::time::sleep(interval).await;
                continue;
            }
            Err(e) => {
                if tty {
                    eprintln!();
                }
                return Err(e);
            }
        };
        let status = b["status"].as_str().unwrap_or("?").to_owned();
        let counts = Counts::of(&b);
        meter.observe(started.elapsed().as_secs_f64(), counts.done());
        let line = progress_line(&Progress {
            status: &status,
            counts,
            rate: meter.rate(),
        });
        let ended = is_terminal(&status);
        if tty {
            eprint!("\r{line}\x1b[K");
            if ended {
                eprintln!();
            }
        } else if ended
            || status != last_status
            || last_plain.is_none_or(|t| t.elapsed() >= PLAIN_PROGRESS_EVERY)
        {
            eprintln!("{line}");
            last_plain = Some(Instant::now());
        }
        let _ = std::io::stderr().flush();
        if ended {
            return Ok(b);
        }
        last_status = status;
        tokio::time::sleep(interval).await;
    }
}

/// Opens a file to write into, or stdout for `None`.
fn sink(path: Option<&Path>) -> Result<Box<dyn Write>, CliError> {
    match path {
        None => Ok(Box::new(std::io::stdout().lock())),
        Some(p) => std::fs::File::create(p)
            .map(|f| Box::new(std::io::BufWriter::new(f)) as Box<dyn Write>)
            .map_err(|e| CliError::Input(format!("creating {}: {e}", p.display()))),
    }
}

async fn download(
    api: &Api,
    id: &str,
    output: Option<PathBuf>,
    errors: Option<PathBuf>,
) -> Result<ExitCode, CliError> {
    if output.is_some() && output == errors {
        return Err(CliError::Input(
            "--output and --errors name the same file".into(),
        ));
    }
    let b = api.batch(id).await?;
    let status = cell(&b, "/status");
    let out_id = b["output_file_id"].as_str();
    let err_id = b["error_file_id"].as_str();
    if out_id.is_none() && err_id.is_none() {
        return Err(CliError::Failed(format!(
            "batch {id} is {status} and has no output yet"
        )));
    }
    // Files are created even when the batch has none of their kind, so a
    // script always finds them.
    let mut out = sink(output.as_deref())?;
    match out_id {
        Some(f) => {
            let n = api.download(f, &mut *out).await?;
            if let Some(p) = &output {
                eprintln!("stoker batch: wrote {n} bytes of {f} to {}", p.display());
            }
        }
        None => eprintln!("stoker batch: batch {id} has no output file (no row succeeded)"),
    }
    drop(out);
    match (err_id, &errors) {
        (Some(f), Some(p)) => {
            let mut sink = sink(Some(p))?;
            let n = api.download(f, &mut *sink).await?;
            eprintln!("stoker batch: wrote {n} bytes of {f} to {}", p.display());
        }
        (None, Some(p)) => {
            drop(sink(Some(p))?);
        }
        (Some(f), None) => {
            let failed = Counts::of(&b).failed;
            eprintln!(
                "stoker batch: {failed} row(s) failed; their lines are in {f} (--errors FILE writes them)"
            );
        }
        (None, None) => {}
    }
    if !is_terminal(&status) {
        eprintln!("stoker batch: batch {id} is still {status}; the files may grow");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn metadata_pairs_become_an_object() {
        let m = parse_metadata(&strings(&["team=search", "run=2026-01-31", "note=a=b"])).unwrap();
        assert_eq!(
            Value::Object(m),
            json!({"team": "search", "run": "2026-01-31", "note": "a=b"})
        );
        assert!(parse_metadata(&[]).unwrap().is_empty());
        // An empty value is a value.
        assert_eq!(parse_metadata(&strings(&["k="])).unwrap()["k"], "");
    }

    #[test]
    fn bad_metadata_is_refused_with_the_pair_named() {
        for (args, needle) in [
            (vec!["novalue"], "expected KEY=VALUE"),
            (vec!["=v"], "key is empty"),
            (vec!["  =v"], "key is empty"),
            (vec!["a=1", "a=2"], "given twice"),
        ] {
            let e = parse_metadata(&strings(&args)).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
        let long_key = format!("{}=v", "k".repeat(65));
        assert!(
            parse_metadata(&[long_key])
                .unwrap_err()
                .contains("at most 64")
        );
        let long_value = format!("k={}", "v".repeat(513));
        assert!(
            parse_metadata(&[long_value])
                .unwrap_err()
                .contains("at most 512")
        );
        let many: Vec<String> = (0..17).map(|i| format!("k{i}=v")).collect();
        assert!(parse_metadata(&many).unwrap_err().contains("at most 16"));
    }

    fn temp_path(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("stoker-batch-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn input_files_that_cannot_be_submitted_are_named_in_the_error() {
        let dir = temp_path("inputs");
        let missing = dir.join("missing.jsonl");
        let e = read_input(&missing).unwrap_err();
        assert!(
            e.contains("missing.jsonl") && e.contains("no such file"),
            "{e}"
        );

        let e = read_input(&dir).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");

        let empty = dir.join("empty.jsonl");
        std::fs::write(&empty, "").unwrap();
        assert!(read_input(&empty).unwrap_err().contains("is empty"));
        std::fs::write(&empty, "\n \n").unwrap();
        assert!(read_input(&empty).unwrap_err().contains("is empty"));

        let good = dir.join("good.jsonl");
        std::fs::write(&good, "{\"custom_id\":\"a\"}\n").unwrap();
        assert_eq!(read_input(&good).unwrap(), b"{\"custom_id\":\"a\"}\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn an_unreadable_file_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_path("unreadable");
        let path = dir.join("secret.jsonl");
        std::fs::write(&path, "{}\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        // root reads anything; the check only means something for other users.
        if std::fs::read(&path).is_err() {
            let e = read_input(&path).unwrap_err();
            assert!(
                e.contains("secret.jsonl") && e.contains("permission denied"),
                "{e}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_endpoint_defaults_to_the_first_lines_url() {
        let data = b"\n{\"custom_id\":\"a\",\"url\":\"/v1/completions\"}\n{\"url\":\"x\"}\n";
        assert_eq!(first_line_url(data).as_deref(), Some("/v1/completions"));
        assert_eq!(first_line_url(b"not json\n"), None);
        assert_eq!(first_line_url(b"{\"url\": 3}\n"), None);
        assert_eq!(first_line_url(b""), None);
    }

    #[test]
    fn durations_and_rates_read_at_a_glance() {
        assert_eq!(fmt_duration(0.0), "0s");
        assert_eq!(fmt_duration(44.6), "45s");
        assert_eq!(fmt_duration(59.4), "59s");
        assert_eq!(fmt_duration(60.0), "1m00s");
        assert_eq!(fmt_duration(185.0), "3m05s");
        assert_eq!(fmt_duration(7380.0), "2h03m");
        assert_eq!(fmt_duration(f64::INFINITY), "--");
        assert_eq!(fmt_duration(f64::NAN), "--");
        assert_eq!(fmt_duration(-1.0), "--");

        assert_eq!(fmt_rate(0.25), "0.25 rows/s");
        assert_eq!(fmt_rate(41.23), "41.2 rows/s");
        assert_eq!(fmt_rate(1234.4), "1234 rows/s");
        assert_eq!(fmt_rate(f64::NAN), "-- rows/s");
    }

    #[test]
    fn eta_needs_a_positive_rate() {
        assert_eq!(eta_secs(100, Some(10.0)), Some(10.0));
        assert_eq!(eta_secs(0, None), Some(0.0));
        assert_eq!(eta_secs(100, None), None);
        assert_eq!(eta_secs(100, Some(0.0)), None);
        assert_eq!(eta_secs(100, Some(f64::NAN)), None);
    }

    #[test]
    fn the_rate_follows_a_sliding_window_and_restarts_after_a_setback() {
        let mut m = RateMeter::new(30.0);
        assert_eq!(m.rate(), None);
        m.observe(0.0, 0);
        assert_eq!(m.rate(), None);
        m.observe(0.2, 5);
        assert_eq!(m.rate(), None, "under half a second is no measurement");
        m.observe(10.0, 100);
        assert_eq!(m.rate(), Some(10.0));
        // Old samples leave the window: only the last ~30 s count.
        m.observe(40.0, 100);
        m.observe(70.0, 700);
        assert_eq!(m.rate(), Some(20.0));
        // Rows lost in a restart: start over rather than report a negative rate.
        m.observe(71.0, 650);
        assert_eq!(m.rate(), None);
        m.observe(73.0, 660);
        assert_eq!(m.rate(), Some(5.0));
    }

    #[test]
    fn progress_lines_show_bar_counts_rate_and_eta() {
        let counts = Counts {
            total: 2000,
            completed: 747,
            failed: 3,
        };
        let line = progress_line(&Progress {
            status: "in_progress",
            counts,
            rate: Some(25.0),
        });
        assert_eq!(
            line,
            "[#########...............]  750/2000  38%  25.0 rows/s  ETA 50s  in_progress  3 failed"
        );
        let line = progress_line(&Progress {
            status: "validating",
            counts: Counts::default(),
            rate: None,
        });
        assert_eq!(
            line,
            "[........................]  0/?  -- rows/s  ETA --  validating"
        );
        let line = progress_line(&Progress {
            status: "completed",
            counts: Counts {
                total: 10,
                completed: 10,
                failed: 0,
            },
            rate: None,
        });
        assert_eq!(
            line,
            "[########################]  10/10  100%  -- rows/s  ETA 0s  completed"
        );
    }

    #[test]
    fn counts_and_summary_come_from_the_batch_object() {
        let b = json!({
            "id": "batch_1", "status": "completed",
            "request_counts": {"total": 12, "completed": 10, "failed": 2},
            "output_file_id": "file-out", "error_file_id": "file-err",
        });
        assert_eq!(
            Counts::of(&b),
            Counts {
                total: 12,
                completed: 10,
                failed: 2
            }
        );
        assert_eq!(
            summary_line(&b, Some(65.0)),
            "batch_1 completed: 12/12 rows, 10 completed, 2 failed in 1m05s; output file-out; errors file-err"
        );
        let b = json!({"id": "batch_2", "status": "cancelled", "output_file_id": null});
        assert_eq!(
            summary_line(&b, None),
            "batch_2 cancelled: 0/0 rows, 0 completed, 0 failed"
        );
        assert!(is_terminal("cancelled") && is_terminal("expired"));
        assert!(!is_terminal("cancelling") && !is_terminal("finalizing"));
    }

    #[test]
    fn a_batch_renders_as_a_table_with_its_errors() {
        let b = json!({
            "id": "batch_1", "status": "failed", "endpoint": "/v1/completions",
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "created_at": 1_767_225_600, "output_file_id": null, "error_file_id": null,
            "errors": {"object": "list", "data": [
                {"code": "invalid_value", "message": "url differs", "line": 3}]},
        });
        let s = render_batch(&b);
        assert!(s.starts_with("BATCH"), "{s}");
        assert!(s.contains("2026-01-01T00:00:00Z"), "{s}");
        assert!(s.contains("0/0"), "{s}");
        assert!(
            s.ends_with("error invalid_value: line 3: url differs\n"),
            "{s}"
        );
    }

    #[test]
    fn server_errors_exit_2_for_4xx_and_1_otherwise() {
        let server = |status| CliError::Server {
            status,
            code: "x".into(),
            message: "m".into(),
            retry_after: Some("7".into()),
            body: Value::Null,
        };
        assert_eq!(server(404).exit_code(), 2);
        assert_eq!(server(429).exit_code(), 2);
        assert_eq!(server(503).exit_code(), 1);
        assert!(server(503).is_transient() && !server(429).is_transient());
        assert_eq!(
            server(429).describe(),
            "the server answered 429 x: m (retry after 7 s)"
        );
        assert_eq!(CliError::Input("bad".into()).exit_code(), 2);
        assert_eq!(CliError::Failed("down".into()).exit_code(), 1);
    }
}
