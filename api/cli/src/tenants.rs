//! `stoker admin tenants …` and `stoker admin keys …`: tenants, their quotas
//! and their API keys. Each command is one HTTP call to `/admin/v1/tenants*`
//! or `/admin/v1/keys*`; the output is a table, or the server's JSON with
//! `--json`. A quota is set whole: a limit not given is unlimited. An issued
//! key's secret is printed once, by `keys issue`; the server keeps only its
//! hash. Exit codes follow the client's one rule (`client.rs`).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use crate::client::{Api, ServerArgs, enc, print_json, report};
use crate::table::{Cols, EVENT_COLS, table};

#[derive(Subcommand, Debug)]
pub enum TenantCmd {
    /// Tenants with their quotas, active keys and requests in flight.
    List,
    /// One tenant: its whole quota, active keys and live usage.
    Get { id: String },
    /// Create a tenant: no limits, fair-share weight 1.
    Create {
        id: String,
        #[arg(long)]
        display_name: Option<String>,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Set a tenant's whole quota: a limit not given is unlimited.
    Quota(QuotaArgs),
}

#[derive(Args, Debug)]
pub struct QuotaArgs {
    id: String,
    /// Requests in flight at once (chat and completions).
    #[arg(long)]
    concurrent: Option<u32>,
    /// Tokens (prompt + max_tokens) per minute.
    #[arg(long)]
    tokens_per_minute: Option<u64>,
    /// Rows queued in open batches.
    #[arg(long)]
    batch_rows: Option<u64>,
    /// Tokens queued in open batches.
    #[arg(long)]
    batch_tokens: Option<u64>,
    /// Bytes of stored files.
    #[arg(long)]
    file_bytes: Option<u64>,
    /// Fair-share weight in the executors' schedulers, 1 to 1000.
    #[arg(long, default_value_t = 1)]
    weight: u32,
    #[arg(long)]
    reason: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum KeyCmd {
    /// API keys (never their secrets), of one tenant or all.
    List {
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Issue a key to a tenant; its secret is printed this once.
    Issue {
        #[arg(long)]
        tenant: String,
        #[arg(long)]
        name: String,
        /// inference, batch or admin; repeatable or comma-separated.
        #[arg(long = "scope", required = true, value_delimiter = ',')]
        scopes: Vec<String>,
        #[arg(long)]
        reason: Option<String>,
    },
    /// Revoke a key on every API instance (within the read-model refresh).
    Revoke {
        key_id: String,
        #[arg(long)]
        reason: String,
    },
}

enum Call {
    Get(String, Vec<(&'static str, String)>),
    Post(String, Value),
    Put(String, Value),
}

/// How a successful answer is printed without `--json`.
type Render = fn(&Value) -> String;

pub async fn run_tenants(server: ServerArgs, cmd: TenantCmd) -> ExitCode {
    let (call, render): (Call, Render) = match cmd {
        TenantCmd::List => (Call::Get("/admin/v1/tenants".into(), vec![]), tenant_list),
        TenantCmd::Get { id } => (
            Call::Get(format!("/admin/v1/tenants/{}", enc(&id)), vec![]),
            tenant_one,
        ),
        TenantCmd::Create {
            id,
            display_name,
            reason,
        } => (
            Call::Post(
                "/admin/v1/tenants".into(),
                json!({"tenant_id": id, "display_name": display_name, "reason": reason}),
            ),
            tenant_written,
        ),
        TenantCmd::Quota(q) => (
            Call::Put(
                format!("/admin/v1/tenants/{}/quota", enc(&q.id)),
                json!({
                    "quota": {
                        "max_concurrent_requests": q.concurrent,
                        "tokens_per_minute": q.tokens_per_minute,
                        "max_batch_queued_rows": q.batch_rows,
                        "max_batch_queued_tokens": q.batch_tokens,
                        "max_file_bytes": q.file_bytes,
                        "weight": q.weight,
                    },
                    "reason": q.reason,
                }),
            ),
            tenant_written,
        ),
    };
    call_and_print(server, call, render).await
}

pub async fn run_keys(server: ServerArgs, cmd: KeyCmd) -> ExitCode {
    let (call, render): (Call, Render) = match cmd {
        KeyCmd::List { tenant } => (
            Call::Get(
                "/admin/v1/keys".into(),
                tenant.map(|t| ("tenant", t)).into_iter().collect(),
            ),
            key_list,
        ),
        KeyCmd::Issue {
            tenant,
            name,
            scopes,
            reason,
        } => (
            Call::Post(
                "/admin/v1/keys".into(),
                json!({"tenant_id": tenant, "name": name, "scopes": scopes, "reason": reason}),
            ),
            key_issued,
        ),
        KeyCmd::Revoke { key_id, reason } => (
            Call::Post(
                format!("/admin/v1/keys/{}/revoke", enc(&key_id)),
                json!({ "reason": reason }),
            ),
            key_written,
        ),
    };
    call_and_print(server, call, render).await
}

async fn call_and_print(server: ServerArgs, call: Call, render: Render) -> ExitCode {
    let json_out = server.json;
    let api = match Api::new(&server.url, server.api_key) {
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
        Ok(body) => print!("{}", render(&body)),
        Err(e) => return report("admin", &e, json_out),
    }
    ExitCode::SUCCESS
}

const TENANT_COLS: Cols = &[
    ("TENANT", "/tenant_id"),
    ("NAME", "/display_name"),
    ("WEIGHT", "/weight"),
    ("CONCURRENT", "/max_concurrent_requests"),
    ("TOKENS/MIN", "/tokens_per_minute"),
    ("KEYS", "/keys_active"),
    ("IN_FLIGHT", "/concurrent_requests"),
];
const TENANT_FULL_COLS: Cols = &[
    ("TENANT", "/tenant_id"),
    ("NAME", "/display_name"),
    ("WEIGHT", "/weight"),
    ("CONCURRENT", "/max_concurrent_requests"),
    ("TOKENS/MIN", "/tokens_per_minute"),
    ("BATCH_ROWS", "/max_batch_queued_rows"),
    ("BATCH_TOKENS", "/max_batch_queued_tokens"),
    ("FILE_BYTES", "/max_file_bytes"),
    ("KEYS", "/keys_active"),
    ("CREATED", "/created_at"),
    ("BY", "/created_by"),
];
const USAGE_COLS: Cols = &[
    ("IN_FLIGHT", "/concurrent_requests"),
    ("TOKENS_RESERVED", "/tokens_reserved"),
    ("TOKENS_AVAILABLE", "/tokens_available"),
    ("BATCH_ROWS", "/batch_queued_rows"),
    ("BATCH_TOKENS", "/batch_queued_tokens"),
    ("FILE_BYTES", "/file_bytes"),
];
const KEY_COLS: Cols = &[
    ("KEY", "/key_id"),
    ("TENANT", "/tenant_id"),
    ("NAME", "/name"),
    ("SCOPES", "/scopes"),
    ("STATUS", "/status"),
    ("ISSUED", "/issued_at"),
];

/// A quota's limit as a cell: null (or absent) is unlimited.
fn limit(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => "unlimited".into(),
        Some(v) => v.clone(),
    }
}

/// A tenant flattened into [`TENANT_FULL_COLS`]' cells.
fn tenant_row(t: &Value) -> Value {
    let q = |k: &str| limit(t.pointer(&format!("/quota/{k}")));
    json!({
        "tenant_id": t["tenant_id"],
        "display_name": t["display_name"],
        "weight": t["quota"]["weight"],
        "max_concurrent_requests": q("max_concurrent_requests"),
        "tokens_per_minute": q("tokens_per_minute"),
        "max_batch_queued_rows": q("max_batch_queued_rows"),
        "max_batch_queued_tokens": q("max_batch_queued_tokens"),
        "max_file_bytes": q("max_file_bytes"),
        "keys_active": t["keys_active"],
        "concurrent_requests": t["usage"]["concurrent_requests"],
        "created_at": t["created_at"],
        "created_by": t["created_by"],
    })
}

/// A key flattened into [`KEY_COLS`]' cells: scopes comma-separated.
fn key_row(k: &Value) -> Value {
    let scopes: Vec<&str> = k["scopes"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut row = k.clone();
    row["scopes"] = scopes.join(",").into();
    row
}

fn rows(v: &Value, f: fn(&Value) -> Value) -> Vec<Value> {
    v["data"]
        .as_array()
        .map(|a| a.iter().map(f).collect())
        .unwrap_or_default()
}

fn events(v: &Value) -> String {
    let events = v["events"].as_array().cloned().unwrap_or_default();
    format!(
        "recorded {} event(s):\n{}",
        events.len(),
        table(&events, EVENT_COLS)
    )
}

fn tenant_list(v: &Value) -> String {
    table(&rows(v, tenant_row), TENANT_COLS)
}

fn tenant_one(v: &Value) -> String {
    let mut usage = v["usage"].clone();
    if usage.is_object() {
        usage["tokens_available"] = limit(v.pointer("/usage/tokens_available"));
    }
    format!(
        "{}usage (as this API instance sees it):\n{}",
        table(&[tenant_row(v)], TENANT_FULL_COLS),
        table(&[usage], USAGE_COLS)
    )
}

fn tenant_written(v: &Value) -> String {
    table(&[tenant_row(&v["data"])], TENANT_COLS) + &events(v)
}

fn key_list(v: &Value) -> String {
    table(&rows(v, key_row), KEY_COLS)
}

fn key_written(v: &Value) -> String {
    table(&[key_row(&v["data"])], KEY_COLS) + &events(v)
}

fn key_issued(v: &Value) -> String {
    let secret = v["data"]["secret"].as_str().unwrap_or("-");
    format!(
        "{}secret: {secret}\nThis secret will not be shown again: store it now.\n{}",
        table(&[key_row(&v["data"])], KEY_COLS),
        events(v)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_show_null_limits_as_unlimited() {
        let v = json!({"object": "list", "data": [{
            "tenant_id": "acme", "display_name": null, "keys_active": 2,
            "quota": {"max_concurrent_requests": 4, "tokens_per_minute": null, "weight": 3},
            "usage": {"concurrent_requests": 1},
        }]});
        assert_eq!(
            tenant_list(&v),
            "TENANT  NAME  WEIGHT  CONCURRENT  TOKENS/MIN  KEYS  IN_FLIGHT\n\
             acme    -     3       4           unlimited   2     1\n"
        );
    }

    #[test]
    fn an_issued_key_prints_its_secret_once_with_a_warning() {
        let v = json!({"events": [], "data": {
            "key_id": "k1", "tenant_id": "acme", "name": "prod", "scopes": ["inference", "batch"],
            "status": "active", "issued_at": "2026-01-01T00:00:00Z", "secret": "stk_k1_s3cr3t",
        }});
        let out = key_issued(&v);
        assert!(out.contains("inference,batch"), "{out}");
        assert_eq!(out.matches("stk_k1_s3cr3t").count(), 1, "{out}");
        assert!(out.contains("will not be shown again"), "{out}");
    }
}
