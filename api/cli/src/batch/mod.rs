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

mod input;
mod progress;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use futures_util::StreamExt;
use serde_json::{Value, json};

pub use input::{first_line_url, parse_metadata, read_input};
pub use progress::{
    Counts, Progress, RateMeter, eta_secs, fmt_duration, fmt_rate, is_terminal, progress_line,
    summary_line,
};

use crate::client::{Api, CliError, ServerArgs, enc, print_json, report};
use crate::table::{cell, table};

/// Without a terminal, one progress line per this many seconds (and one per
/// status change), so logs stay readable.
const PLAIN_PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How long `--wait` keeps polling through a server that cannot be reached or
/// answers 5xx (a restart) before giving up.
const UNREACHABLE_GRACE: Duration = Duration::from_secs(180);

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

impl Api {
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

/// Runs one batch command; prints the result or the error.
pub async fn run(args: BatchArgs) -> ExitCode {
    let json_out = args.server.json;
    let result = match Api::new(&args.server.url, args.server.api_key) {
        Ok(api) => dispatch(&api, args.command, json_out).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(code) => code,
        Err(e) => report("batch", &e, json_out),
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
        .unwrap_or_else(|| input::DEFAULT_ENDPOINT.to_owned());
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
    let mut meter = RateMeter::new(progress::RATE_WINDOW_SECS);
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
}
