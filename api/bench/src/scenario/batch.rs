//! A batch tenant's one Batch API job: upload a JSONL of its rows
//! (`POST /v1/files`, purpose `batch`), create the job (`POST /v1/batches`,
//! window `24h`), read `request_counts` (`GET /v1/batches/{id}`), and cancel
//! it (`POST /v1/batches/{id}/cancel`) when the tenant's last phase or the
//! run ends.
//!
//! The harness sees jobs through [`BatchJobs`] so its phase bookkeeping can
//! be tested on tokio's virtual clock without a server.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use super::spec::Tenant;
use crate::target::{HttpTarget, Planned};

/// What `GET /v1/batches/{id}` said.
#[derive(Clone, Debug, PartialEq)]
pub struct JobStatus {
    pub status: String,
    pub completed: u64,
    pub failed: u64,
    pub total: u64,
}

impl JobStatus {
    /// The job will make no more progress.
    pub fn terminal(&self) -> bool {
        matches!(
            self.status.as_str(),
            "completed" | "failed" | "expired" | "cancelled" | "cancelling"
        )
    }
}

/// The Batch API as the harness uses it.
pub trait BatchJobs: Send + Sync {
    /// Uploads `rows` as the tenant's input file and creates the job: its id.
    fn create<'a>(
        &'a self,
        tenant: &'a Tenant,
        rows: Vec<Planned>,
    ) -> BoxFuture<'a, Result<String, String>>;
    fn status<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a str,
    ) -> BoxFuture<'a, Result<JobStatus, String>>;
    fn cancel<'a>(&'a self, tenant: &'a Tenant, id: &'a str) -> BoxFuture<'a, Result<(), String>>;
}

/// The Batch API of an OpenAI-compatible server.
#[derive(Debug)]
pub struct HttpBatch {
    client: reqwest::Client,
    url: String,
    /// Builds each row's body exactly as an online request's (not streamed).
    rows: HttpTarget,
    endpoint_path: &'static str,
}

/// How long one Batch API call may take (an upload of many rows included).
const CALL_TIMEOUT: Duration = Duration::from_secs(120);

impl HttpBatch {
    /// `rows` is a non-streaming target of the scenario's route and model.
    pub fn new(
        client: reqwest::Client,
        url: &str,
        rows: HttpTarget,
        endpoint_path: &'static str,
    ) -> Self {
        HttpBatch {
            client,
            url: url.trim_end_matches('/').to_owned(),
            rows,
            endpoint_path,
        }
    }

    /// The JSONL the job runs: one request line per row.
    pub fn jsonl(&self, tenant: &Tenant, rows: &[Planned]) -> String {
        let mut out = String::new();
        for p in rows {
            let line = json!({
                "custom_id": format!("{}-{}", tenant.name, p.index),
                "method": "POST",
                "url": self.endpoint_path,
                "body": self.rows.body(p),
            });
            out.push_str(&line.to_string());
            out.push('\n');
        }
        out
    }

    fn request(
        &self,
        tenant: &Tenant,
        method: reqwest::Method,
        path: &str,
    ) -> reqwest::RequestBuilder {
        let mut r = self
            .client
            .request(method, format!("{}{path}", self.url))
            .timeout(CALL_TIMEOUT);
        if let Some(k) = &tenant.key {
            r = r.bearer_auth(&k.0);
        }
        r
    }

    async fn call(&self, what: &str, req: reqwest::RequestBuilder) -> Result<Value, String> {
        let resp = req.send().await.map_err(|e| format!("{what}: {e}"))?;
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(format!(
                "{what}: HTTP {status}: {}",
                v.pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("no error body")
            ));
        }
        Ok(v)
    }

    async fn create_job(&self, tenant: &Tenant, rows: Vec<Planned>) -> Result<String, String> {
        let data = self.jsonl(tenant, &rows).into_bytes();
        let part = reqwest::multipart::Part::bytes(data)
            .file_name(format!("{}.jsonl", tenant.name))
            .mime_str("application/jsonl")
            .map_err(|e| format!("building the upload: {e}"))?;
        let form = reqwest::multipart::Form::new()
            .text("purpose", "batch")
            .part("file", part);
        let req = self
            .request(tenant, reqwest::Method::POST, "/v1/files")
            .multipart(form);
        let file = self.call("POST /v1/files", req).await?;
        let file_id = file
            .get("id")
            .and_then(Value::as_str)
            .ok_or("POST /v1/files: the answer has no `id`")?
            .to_owned();
        let body = json!({
            "input_file_id": file_id,
            "endpoint": self.endpoint_path,
            "completion_window": "24h",
            "metadata": {"stoker_bench_tenant": tenant.name},
        });
        let req = self
            .request(tenant, reqwest::Method::POST, "/v1/batches")
            .json(&body);
        let job = self.call("POST /v1/batches", req).await?;
        job.get("id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| "POST /v1/batches: the answer has no `id`".to_owned())
    }

    async fn job_status(&self, tenant: &Tenant, id: &str) -> Result<JobStatus, String> {
        let path = format!("/v1/batches/{id}");
        let v = self
            .call(
                &format!("GET {path}"),
                self.request(tenant, reqwest::Method::GET, &path),
            )
            .await?;
        Ok(parse_status(&v))
    }

    async fn cancel_job(&self, tenant: &Tenant, id: &str) -> Result<(), String> {
        let path = format!("/v1/batches/{id}/cancel");
        self.call(
            &format!("POST {path}"),
            self.request(tenant, reqwest::Method::POST, &path),
        )
        .await
        .map(drop)
    }
}

/// The fields of a batch object the harness reads.
pub fn parse_status(v: &Value) -> JobStatus {
    let n = |k: &str| {
        v.pointer(&format!("/request_counts/{k}"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    JobStatus {
        status: v
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned(),
        completed: n("completed"),
        failed: n("failed"),
        total: n("total"),
    }
}

impl BatchJobs for HttpBatch {
    fn create<'a>(
        &'a self,
        tenant: &'a Tenant,
        rows: Vec<Planned>,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(self.create_job(tenant, rows))
    }

    fn status<'a>(
        &'a self,
        tenant: &'a Tenant,
        id: &'a str,
    ) -> BoxFuture<'a, Result<JobStatus, String>> {
        Box::pin(self.job_status(tenant, id))
    }

    fn cancel<'a>(&'a self, tenant: &'a Tenant, id: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.cancel_job(tenant, id))
    }
}
