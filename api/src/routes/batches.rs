//! The Batch API (`/v1/batches`): create from an uploaded file, read, list
//! with cursor paging, cancel. The batch's lifecycle is events in the control
//! plane (its history is in the audit API); the row counts of a running
//! batch come from its shard checkpoints.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use stoker_controlplane::batch::{CreateBatch, Listed};

use super::files::batches;
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;

/// Most metadata pairs, and their key and value lengths (OpenAI's limits).
const MAX_METADATA: usize = 16;
const MAX_METADATA_KEY: usize = 64;
const MAX_METADATA_VALUE: usize = 512;

#[derive(Debug, Deserialize)]
pub struct CreateBody {
    pub input_file_id: String,
    pub endpoint: String,
    pub completion_window: String,
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

fn ts(t: Option<DateTime<Utc>>) -> Value {
    t.map(|t| Value::from(t.timestamp())).unwrap_or(Value::Null)
}

/// The OpenAI `batch` object.
pub fn batch_object(l: &Listed) -> Value {
    let v = &l.view;
    let when = |status: &str| {
        if v.status == status {
            ts(v.ended_at)
        } else {
            Value::Null
        }
    };
    let errors = match &v.error {
        Some((code, message)) => json!({
            "object": "list",
            "data": [{"code": code, "message": message, "param": Value::Null, "line": Value::Null}],
        }),
        None => Value::Null,
    };
    json!({
        "id": v.batch_id,
        "object": "batch",
        "endpoint": v.endpoint,
        "errors": errors,
        "input_file_id": v.input_file_id,
        "completion_window": v.completion_window,
        "status": v.status,
        "output_file_id": v.output_file_id,
        "error_file_id": v.error_file_id,
        "created_at": v.created_at.timestamp(),
        "in_progress_at": ts(v.in_progress_at),
        "expires_at": v.expires_at,
        "finalizing_at": ts(v.finalizing_at),
        "completed_at": when("completed"),
        "failed_at": when("failed"),
        "expired_at": when("expired"),
        "cancelling_at": ts(v.cancelling_at),
        "cancelled_at": when("cancelled"),
        "request_counts": {
            "total": v.total_rows,
            "completed": l.completed,
            "failed": l.failed,
        },
        "metadata": if v.metadata.is_empty() { Value::Null } else { json!(v.metadata) },
    })
}

fn check_metadata(m: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if m.len() > MAX_METADATA {
        return Err(ApiError::invalid(
            format!("`metadata` may hold at most {MAX_METADATA} pairs"),
            "metadata",
        ));
    }
    for (k, v) in m {
        if k.chars().count() > MAX_METADATA_KEY || v.chars().count() > MAX_METADATA_VALUE {
            return Err(ApiError::invalid(
                format!(
                    "`metadata` keys are at most {MAX_METADATA_KEY} characters and values at most \
                     {MAX_METADATA_VALUE}"
                ),
                "metadata",
            ));
        }
    }
    Ok(())
}

/// `POST /v1/batches`.
pub async fn create(
    State(state): State<AppState>,
    principal: Principal,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<Response, ApiError> {
    principal.require(Scope::Batch)?;
    let metadata = body.metadata.unwrap_or_default();
    check_metadata(&metadata)?;
    let req = CreateBatch {
        input_file_id: body.input_file_id,
        endpoint: body.endpoint,
        completion_window: body.completion_window,
        metadata,
    };
    let l = batches(&state)?
        .create(&principal.tenant, &principal.name, req)
        .await?;
    Ok(axum::Json(batch_object(&l)).into_response())
}

/// `GET /v1/batches/{id}`.
pub async fn get(
    State(state): State<AppState>,
    principal: Principal,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    principal.require(Scope::Batch)?;
    let l = batches(&state)?.get(&principal.tenant, &id).await?;
    Ok(axum::Json(batch_object(&l)).into_response())
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    pub after: Option<String>,
    pub limit: Option<usize>,
}

/// `GET /v1/batches`: newest first, `after` a batch id, `limit` 1 to 100.
pub async fn list(
    State(state): State<AppState>,
    principal: Principal,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Response, ApiError> {
    principal.require(Scope::Batch)?;
    let limit = match q.limit {
        None => 20,
        Some(n @ 1..=100) => n,
        Some(_) => {
            return Err(ApiError::invalid(
                "`limit` must be between 1 and 100",
                "limit",
            ));
        }
    };
    let (page, has_more) = batches(&state)?
        .list(&principal.tenant, q.after.as_deref(), limit)
        .await?;
    let data: Vec<Value> = page.iter().map(batch_object).collect();
    Ok(axum::Json(json!({
        "object": "list",
        "first_id": page.first().map(|l| l.view.batch_id.clone()),
        "last_id": page.last().map(|l| l.view.batch_id.clone()),
        "has_more": has_more,
        "data": data,
    }))
    .into_response())
}

/// `POST /v1/batches/{id}/cancel`: running rows stop, completed ones are kept.
pub async fn cancel(
    State(state): State<AppState>,
    principal: Principal,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    principal.require(Scope::Batch)?;
    let l = batches(&state)?
        .cancel(&principal.tenant, &principal.name, &id)
        .await?;
    Ok(axum::Json(batch_object(&l)).into_response())
}
