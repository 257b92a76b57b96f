//! Operations and audit: capacity profiles, executors and drain, the audit
//! query, one request's log row, and rebuilding the read models.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use stoker_controlplane::domain::ExecutorCommand;
use stoker_controlplane::store::{Actor, AuditQuery, Page, Position};
use stoker_schemas::events::CapacityEnvelope;
use stoker_schemas::ids::{DeploymentId, ExecutorId, RequestId, RevisionId};

use super::{Admin, EventOut, ReasonBody, check_name, check_reason, written};
use crate::error::ApiError;
use crate::http::extract::{ApiJson, ApiQuery, OptJson};
use crate::http::path_id::PathId;
use crate::state::AppState;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFilter {
    #[serde(default)]
    pub deployment: Option<String>,
    #[serde(default)]
    pub revision: Option<String>,
}

pub async fn list_profiles(admin: Admin, ApiQuery(f): ApiQuery<ProfileFilter>) -> Response {
    let v = admin.cp().views().await;
    let data = v
        .capacity_profiles
        .values()
        .filter(|p| f.deployment.as_ref().is_none_or(|d| *d == p.deployment_id))
        .filter(|p| f.revision.as_ref().is_none_or(|r| *r == p.revision_id))
        .cloned()
        .collect();
    super::list(data).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordProfile {
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
    pub workload: String,
    pub envelope: CapacityEnvelope,
    #[serde(default)]
    pub reason: Option<String>,
}

pub async fn record_profile(
    State(state): State<AppState>,
    admin: Admin,
    ApiJson(b): ApiJson<RecordProfile>,
) -> Result<Response, ApiError> {
    let (deployment, revision) = (b.deployment_id, b.revision_id);
    check_name("workload", &b.workload)?;
    check_reason(&b.reason)?;
    let events = admin
        .cp()
        .record_capacity_profile(
            &deployment,
            &revision,
            &b.workload,
            b.envelope,
            &admin.meta(b.reason),
        )
        .await?;
    let key = format!("{deployment}/{revision}/{}", b.workload);
    let view = admin
        .cp()
        .views()
        .await
        .capacity_profiles
        .get(&key)
        .cloned();
    // In force at once here; other instances pick it up on their next refresh.
    crate::edge::artifacts::apply_capacity_profile(&state).await;
    let mut resp = written(events, view).into_response();
    *resp.status_mut() = axum::http::StatusCode::CREATED;
    Ok(resp)
}

/// What admission enforces now: the capacity profile in force (or the static
/// limits), the live counters and where the deadline estimate's rates come from.
pub async fn admission(State(state): State<AppState>, _admin: Admin) -> Response {
    let stats = state
        .served()
        .map(|s| s.backend.stats())
        .unwrap_or_default();
    Json(state.admission.report(&stats)).into_response()
}

/// The executors the events know, each with `live`: what its latest
/// capacity report says (distributed mode; `null` when this process has
/// heard nothing from it, and always in `stoker serve`).
pub async fn list_executors(State(state): State<AppState>, admin: Admin) -> Response {
    let v = admin.cp().views().await;
    let mut live: std::collections::HashMap<ExecutorId, serde_json::Value> = state
        .live_executors()
        .into_iter()
        .map(|e| {
            let (r, alive) = (&e.report, e.alive);
            let v = serde_json::json!({
                        "alive": alive,
                        "ready": r.ready && alive,
                        "draining": r.draining,
                        "slot": r.slot,
                        "revision_id": r.revision_id,
                        "model_sha256": r.model_sha256,
                        "running": r.running,
                        "waiting": r.waiting,
                        "waiting_tokens": r.waiting_tokens,
                        "kv_blocks_free": r.kv_blocks_free,
                        "kv_blocks_total": r.kv_blocks_total,
                        "max_num_seqs": r.max_num_seqs,
                        "tokens_per_second": r.tokens_per_second,
                        "last_report_ms_ago": e.since_report.as_millis() as u64,
            });
            (r.executor_id.clone(), v)
        })
        .collect();
    let mut out: Vec<serde_json::Value> = v
        .executors
        .values()
        .map(|e| {
            let mut j = serde_json::to_value(e).unwrap_or_default();
            j["live"] = live
                .remove(e.executor_id.as_str())
                .unwrap_or(serde_json::Value::Null);
            j
        })
        .collect();
    // Reporting, but not (yet) in the read model here.
    for (id, l) in live {
        out.push(serde_json::json!({ "executor_id": id, "live": l }));
    }
    super::list(out).into_response()
}

/// Records the drain; when it names this process's own executor, the server
/// turns not-ready, finishes in-flight requests and records `drained`.
pub async fn drain(
    State(state): State<AppState>,
    admin: Admin,
    PathId(id): PathId<ExecutorId>,
    OptJson(body): OptJson<ReasonBody>,
) -> Result<Response, ApiError> {
    check_reason(&body.reason)?;
    let events = admin
        .cp()
        .executor_command(&id, ExecutorCommand::Drain, &admin.meta(body.reason))
        .await?;
    if id == state.config.executor_id {
        state.request_drain();
    }
    let view = admin.cp().views().await.executors.get(id.as_str()).cloned();
    let mut resp = written(events, view).into_response();
    *resp.status_mut() = axum::http::StatusCode::ACCEPTED;
    Ok(resp)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditParams {
    #[serde(default)]
    pub deployment: Option<String>,
    #[serde(default, alias = "type")]
    pub event_type: Option<String>,
    #[serde(default)]
    pub actor: Option<String>,
    /// RFC 3339, inclusive.
    #[serde(default)]
    pub from: Option<String>,
    /// RFC 3339, exclusive.
    #[serde(default)]
    pub to: Option<String>,
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
}

fn time(name: &str, v: &Option<String>) -> Result<Option<DateTime<Utc>>, ApiError> {
    v.as_deref()
        .map(|s| {
            DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| {
                    ApiError::invalid(
                        format!("`{name}` must be an RFC 3339 time ({e})"),
                        name.to_owned(),
                    )
                })
        })
        .transpose()
}

/// One audit page as the API shows it.
#[derive(Debug, Serialize)]
pub struct PageOut {
    pub object: &'static str,
    pub data: Vec<EventOut>,
    /// Pass as `cursor` for the next page; null on the last one.
    pub next_cursor: Option<String>,
    pub has_more: bool,
}

pub fn page_out(p: Page) -> PageOut {
    PageOut {
        object: "list",
        data: p.events.into_iter().map(EventOut::from).collect(),
        has_more: p.next_cursor.is_some(),
        next_cursor: p.next_cursor.map(|c| c.to_string()),
    }
}

pub async fn audit(admin: Admin, ApiQuery(p): ApiQuery<AuditParams>) -> Result<Response, ApiError> {
    if p.limit == Some(0) || p.limit.is_some_and(|l| l > 1000) {
        return Err(ApiError::invalid("`limit` must be 1 to 1000", "limit"));
    }
    let q = AuditQuery {
        deployment: p.deployment,
        event_type: p.event_type,
        actor: p.actor.map(Actor::new),
        from: time("from", &p.from)?,
        to: time("to", &p.to)?,
        after: p
            .cursor
            .as_deref()
            .map(Position::parse_cursor)
            .transpose()?,
        limit: p.limit.unwrap_or(0),
    };
    Ok(Json(page_out(admin.cp().audit(&q).await?)).into_response())
}

/// Which revision, executor and timings served request X.
pub async fn request(admin: Admin, PathId(id): PathId<RequestId>) -> Result<Response, ApiError> {
    let not_found = |id: &str| ApiError::NotFound {
        message: format!("no request {id:?} in the request log"),
        code: stoker_schemas::codes::ErrorCode::NotFound,
    };
    let log = &admin.control.log;
    // Rows are written in batches; a request that just ended may still be queued.
    log.flush()
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    match log
        .get(&id)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
    {
        Some(r) => Ok(Json(r).into_response()),
        None => Err(not_found(id.as_str())),
    }
}

pub async fn rebuild_projections(admin: Admin) -> Result<Response, ApiError> {
    let report = admin
        .cp()
        .projector()
        .rebuild()
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    tracing::info!(actor = %admin.principal.name, events = report.events, "read models rebuilt");
    Ok(Json(report).into_response())
}
