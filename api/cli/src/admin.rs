//! `stoker admin …`: the admin API from the command line. Each command is one
//! HTTP call to `/admin/v1/*`; the output is a table, or the server's JSON with
//! `--json`. The server records the API key's name as the actor. Exit codes
//! follow the client's one rule (`client.rs`).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::{Api, CliError, ServerArgs, enc, print_json, report};
use crate::table::{Cols, EVENT_COLS, table};

#[derive(Args, Debug)]
pub struct AdminArgs {
    #[command(flatten)]
    pub server: ServerArgs,
    #[command(subcommand)]
    pub command: AdminCommand,
}

#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Deployments: list, show, create, retire, set the serving revision, history.
    #[command(subcommand)]
    Deployments(DeploymentCmd),
    /// Revisions of a deployment: list, register.
    #[command(subcommand)]
    Revisions(RevisionCmd),
    /// Rollouts: list, show, start, advance, pause, resume, rollback, complete.
    #[command(subcommand)]
    Rollouts(RolloutCmd),
    /// Capacity profiles: list.
    Profiles {
        #[arg(long)]
        deployment: Option<String>,
    },
    /// Executors: list, drain.
    #[command(subcommand)]
    Executors(ExecutorCmd),
    /// The audit log in global order.
    Audit(AuditArgs),
    /// Which revision, executor and timings served one request.
    Request { id: String },
    /// What admission enforces now: the capacity profile in force or the static limits.
    Admission,
    /// Rebuild every read model from the events.
    RebuildProjections,
    /// Tenants: list, show, create, set the quota.
    #[command(subcommand)]
    Tenants(crate::tenants::TenantCmd),
    /// API keys: list, issue, revoke.
    #[command(subcommand)]
    Keys(crate::tenants::KeyCmd),
}

#[derive(Subcommand, Debug)]
pub enum DeploymentCmd {
    List,
    Get {
        id: String,
    },
    Create {
        id: String,
        /// A JSON file with the limits; default: what the served model allows.
        #[arg(long)]
        limits_file: Option<std::path::PathBuf>,
        #[arg(long)]
        reason: Option<String>,
    },
    Retire {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    SetRevision {
        id: String,
        revision: String,
        #[arg(long)]
        reason: Option<String>,
    },
    History {
        id: String,
        #[arg(long)]
        limit: Option<u32>,
    },
}

#[derive(Subcommand, Debug)]
pub enum RevisionCmd {
    List {
        deployment: String,
    },
    Register {
        deployment: String,
        #[arg(long)]
        model_uri: String,
        #[arg(long)]
        sha256: String,
        /// Revision id; default: the first 12 hex digits of the sha256.
        #[arg(long)]
        id: Option<String>,
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum RolloutCmd {
    List {
        #[arg(long)]
        deployment: Option<String>,
    },
    Get {
        id: String,
    },
    Start {
        deployment: String,
        #[arg(long)]
        to: String,
        /// Comma-separated percents, ending at 100.
        #[arg(long, value_delimiter = ',', default_value = "5,25,50,100")]
        steps: Vec<u8>,
        #[arg(long)]
        ttft_p99_ms: Option<f64>,
        #[arg(long)]
        max_error_rate: Option<f64>,
        #[arg(long)]
        max_overload_rate: Option<f64>,
        #[arg(long, default_value_t = 20)]
        min_requests: u32,
        #[arg(long)]
        reason: Option<String>,
    },
    Advance {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    Pause {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    Resume {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    Rollback {
        id: String,
        #[arg(long)]
        reason: String,
    },
    Complete {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum ExecutorCmd {
    List,
    Drain {
        id: String,
        #[arg(long)]
        reason: String,
    },
}

#[derive(Args, Debug)]
pub struct AuditArgs {
    #[arg(long)]
    deployment: Option<String>,
    #[arg(long = "type")]
    event_type: Option<String>,
    #[arg(long)]
    actor: Option<String>,
    /// RFC 3339, inclusive.
    #[arg(long)]
    from: Option<String>,
    /// RFC 3339, exclusive.
    #[arg(long)]
    to: Option<String>,
    #[arg(long)]
    cursor: Option<String>,
    #[arg(long)]
    limit: Option<u32>,
}

enum Call {
    Get(String, Vec<(&'static str, String)>),
    Post(String, Value),
    Put(String, Value),
}

fn reason_body(reason: Option<String>) -> Value {
    json!({ "reason": reason })
}

fn plan(cmd: AdminCommand) -> Result<(Call, Shape), String> {
    use AdminCommand as A;
    let q = |pairs: Vec<(&'static str, Option<String>)>| {
        pairs
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect::<Vec<_>>()
    };
    Ok(match cmd {
        A::Deployments(d) => match d {
            DeploymentCmd::List => (
                Call::Get("/admin/v1/deployments".into(), vec![]),
                Shape::List(DEPLOYMENT_COLS),
            ),
            DeploymentCmd::Get { id } => (
                Call::Get(format!("/admin/v1/deployments/{}", enc(&id)), vec![]),
                Shape::One(DEPLOYMENT_COLS),
            ),
            DeploymentCmd::Create {
                id,
                limits_file,
                reason,
            } => {
                let limits = match limits_file {
                    Some(f) => {
                        let text = std::fs::read_to_string(&f)
                            .map_err(|e| format!("reading {}: {e}", f.display()))?;
                        Some(
                            serde_json::from_str::<Value>(&text)
                                .map_err(|e| format!("{} is not JSON: {e}", f.display()))?,
                        )
                    }
                    None => None,
                };
                (
                    Call::Post(
                        "/admin/v1/deployments".into(),
                        json!({"id": id, "limits": limits, "reason": reason}),
                    ),
                    Shape::Written(DEPLOYMENT_COLS),
                )
            }
            DeploymentCmd::Retire { id, reason } => (
                Call::Post(
                    format!("/admin/v1/deployments/{}/retire", enc(&id)),
                    reason_body(reason),
                ),
                Shape::Written(DEPLOYMENT_COLS),
            ),
            DeploymentCmd::SetRevision {
                id,
                revision,
                reason,
            } => (
                Call::Put(
                    format!("/admin/v1/deployments/{}/serving-revision", enc(&id)),
                    json!({"revision_id": revision, "reason": reason}),
                ),
                Shape::Written(DEPLOYMENT_COLS),
            ),
            DeploymentCmd::History { id, limit } => (
                Call::Get(
                    format!("/admin/v1/deployments/{}/history", enc(&id)),
                    q(vec![("limit", limit.map(|l| l.to_string()))]),
                ),
                Shape::List(EVENT_COLS),
            ),
        },
        A::Revisions(r) => match r {
            RevisionCmd::List { deployment } => (
                Call::Get(
                    format!("/admin/v1/deployments/{}/revisions", enc(&deployment)),
                    vec![],
                ),
                Shape::List(REVISION_COLS),
            ),
            RevisionCmd::Register {
                deployment,
                model_uri,
                sha256,
                id,
                reason,
            } => (
                Call::Post(
                    format!("/admin/v1/deployments/{}/revisions", enc(&deployment)),
                    json!({"revision_id": id, "model_uri": model_uri,
                           "model_sha256": sha256, "reason": reason}),
                ),
                Shape::Written(REVISION_COLS),
            ),
        },
        A::Rollouts(r) => match r {
            RolloutCmd::List { deployment } => (
                Call::Get(
                    "/admin/v1/rollouts".into(),
                    q(vec![("deployment", deployment)]),
                ),
                Shape::List(ROLLOUT_COLS),
            ),
            RolloutCmd::Get { id } => (
                Call::Get(format!("/admin/v1/rollouts/{}", enc(&id)), vec![]),
                Shape::One(ROLLOUT_COLS),
            ),
            RolloutCmd::Start {
                deployment,
                to,
                steps,
                ttft_p99_ms,
                max_error_rate,
                max_overload_rate,
                min_requests,
                reason,
            } => {
                let gated = ttft_p99_ms.is_some()
                    || max_error_rate.is_some()
                    || max_overload_rate.is_some();
                let gates = gated.then(|| {
                    json!({"ttft_p99_ms": ttft_p99_ms, "max_error_rate": max_error_rate,
                           "max_overload_rate": max_overload_rate, "min_requests": min_requests})
                });
                (
                    Call::Post(
                        format!("/admin/v1/deployments/{}/rollouts", enc(&deployment)),
                        json!({"to_revision": to, "steps": steps, "gates": gates, "reason": reason}),
                    ),
                    Shape::Written(ROLLOUT_COLS),
                )
            }
            RolloutCmd::Advance { id, reason } => act(&id, "advance", reason),
            RolloutCmd::Pause { id, reason } => act(&id, "pause", reason),
            RolloutCmd::Resume { id, reason } => act(&id, "resume", reason),
            RolloutCmd::Rollback { id, reason } => act(&id, "rollback", Some(reason)),
            RolloutCmd::Complete { id, reason } => act(&id, "complete", reason),
        },
        A::Profiles { deployment } => (
            Call::Get(
                "/admin/v1/capacity-profiles".into(),
                q(vec![("deployment", deployment)]),
            ),
            Shape::List(PROFILE_COLS),
        ),
        A::Executors(e) => match e {
            ExecutorCmd::List => (
                Call::Get("/admin/v1/executors".into(), vec![]),
                Shape::List(EXECUTOR_COLS),
            ),
            ExecutorCmd::Drain { id, reason } => (
                Call::Post(
                    format!("/admin/v1/executors/{}/drain", enc(&id)),
                    reason_body(Some(reason)),
                ),
                Shape::Written(EXECUTOR_COLS),
            ),
        },
        A::Audit(a) => (
            Call::Get(
                "/admin/v1/audit".into(),
                q(vec![
                    ("deployment", a.deployment),
                    ("event_type", a.event_type),
                    ("actor", a.actor),
                    ("from", a.from),
                    ("to", a.to),
                    ("cursor", a.cursor),
                    ("limit", a.limit.map(|l| l.to_string())),
                ]),
            ),
            Shape::List(EVENT_COLS),
        ),
        A::Request { id } => (
            Call::Get(format!("/admin/v1/requests/{}", enc(&id)), vec![]),
            Shape::One(REQUEST_COLS),
        ),
        A::Admission => (
            Call::Get("/admin/v1/admission".into(), vec![]),
            Shape::One(ADMISSION_COLS),
        ),
        A::RebuildProjections => (
            Call::Post("/admin/v1/projections/rebuild".into(), json!({})),
            Shape::One(REBUILD_COLS),
        ),
        A::Tenants(_) | A::Keys(_) => return Err("run by tenants.rs".into()),
    })
}

fn act(id: &str, action: &str, reason: Option<String>) -> (Call, Shape) {
    (
        Call::Post(
            format!("/admin/v1/rollouts/{}/{action}", enc(id)),
            reason_body(reason),
        ),
        Shape::Written(ROLLOUT_COLS),
    )
}

/// How a response is printed as a table.
enum Shape {
    /// `{"data": [..]}`.
    List(Cols),
    /// One object.
    One(Cols),
    /// `{"events": [..], "data": {..}}`.
    Written(Cols),
}

const ADMISSION_COLS: Cols = &[
    ("SOURCE", "/source"),
    ("WORKLOAD", "/profile/workload"),
    ("REVISION", "/profile/revision_id"),
    ("MAX_OUTSTANDING", "/max_outstanding"),
    ("MAX_ACTIVE_TOKENS", "/max_active_tokens"),
    ("RUNNING", "/running"),
    ("WAITING", "/waiting"),
    ("PREFILL_RATE", "/prefill_rate_source"),
];

const DEPLOYMENT_COLS: Cols = &[
    ("DEPLOYMENT", "/deployment_id"),
    ("SERVING", "/serving_revision"),
    ("ROLLOUT", "/active_rollout"),
    ("RETIRED", "/retired"),
    ("CONTEXT", "/limits/context_window"),
    ("UPDATED", "/updated_at"),
];
const REVISION_COLS: Cols = &[
    ("REVISION", "/revision_id"),
    ("DEPLOYMENT", "/deployment_id"),
    ("SHA256", "/model_sha256"),
    ("PRECISION", "/precision"),
    ("URI", "/model_uri"),
    ("BY", "/registered_by"),
];
const ROLLOUT_COLS: Cols = &[
    ("ROLLOUT", "/rollout_id"),
    ("DEPLOYMENT", "/deployment_id"),
    ("FROM", "/from_revision"),
    ("TO", "/to_revision"),
    ("PERCENT", "/percent"),
    ("STATUS", "/status"),
    ("BY", "/updated_by"),
    ("REASON", "/last_reason"),
];
const PROFILE_COLS: Cols = &[
    ("DEPLOYMENT", "/deployment_id"),
    ("REVISION", "/revision_id"),
    ("WORKLOAD", "/workload"),
    ("CONCURRENCY", "/envelope/concurrency"),
    ("TTFT_P95_MS", "/envelope/ttft_p95_ms"),
    ("TOK/S", "/envelope/throughput_tok_s"),
];
const EXECUTOR_COLS: Cols = &[
    ("EXECUTOR", "/executor_id"),
    ("DEPLOYMENT", "/deployment_id"),
    ("REVISION", "/revision_id"),
    ("STATUS", "/status"),
    ("REASON", "/reason"),
    ("UPDATED", "/updated_at"),
];
const REQUEST_COLS: Cols = &[
    ("REQUEST", "/request_id"),
    ("DEPLOYMENT", "/deployment_id"),
    ("REVISION", "/revision_id"),
    ("EXECUTOR", "/executor_id"),
    ("STATUS", "/status_code"),
    ("FINISH", "/finish_reason"),
    ("ERROR", "/error_code"),
    ("TTFT_MS", "/ttft_ms"),
    ("E2E_MS", "/e2e_ms"),
];
const REBUILD_COLS: Cols = &[
    ("EVENTS", "/events"),
    ("DOCUMENTS", "/documents"),
    ("POSITION", "/position"),
    ("UNCHANGED", "/unchanged"),
];

fn render(v: &Value, shape: &Shape) -> String {
    match shape {
        Shape::List(cols) => {
            let rows = v["data"].as_array().cloned().unwrap_or_default();
            let mut s = table(&rows, cols);
            if let Some(c) = v.get("next_cursor").and_then(Value::as_str) {
                s.push_str(&format!("(more: --cursor {c})\n"));
            }
            s
        }
        Shape::One(cols) => table(std::slice::from_ref(v), cols),
        Shape::Written(cols) => {
            let events = v["events"].as_array().cloned().unwrap_or_default();
            let mut s = table(std::slice::from_ref(&v["data"]), cols);
            s.push_str(&format!("recorded {} event(s):\n", events.len()));
            s.push_str(&table(&events, EVENT_COLS));
            s
        }
    }
}

/// Runs one admin command; prints the result or the server's error.
pub async fn run(args: AdminArgs) -> ExitCode {
    let json_out = args.server.json;
    let command = match args.command {
        AdminCommand::Tenants(c) => return crate::tenants::run_tenants(args.server, c).await,
        AdminCommand::Keys(c) => return crate::tenants::run_keys(args.server, c).await,
        c => c,
    };
    let (call, shape) = match plan(command) {
        Ok(p) => p,
        Err(e) => return report("admin", &CliError::Input(e), json_out),
    };
    let api = match Api::new(&args.server.url, args.server.api_key) {
        Ok(api) => api,
        Err(e) => return report("admin", &e, json_out),
    };
    let req = match call {
        Call::Get(p, q) => api.request(Method::GET, &p).query(&q),
        Call::Post(p, b) => api.request(Method::POST, &p).json(&b),
        Call::Put(p, b) => api.request(Method::PUT, &p).json(&b),
    };
    match api.json(req).await {
        Ok(body) if json_out => print_json(&body),
        Ok(body) => print!("{}", render(&body, &shape)),
        Err(e) => return report("admin", &e, json_out),
    }
    ExitCode::SUCCESS
}
