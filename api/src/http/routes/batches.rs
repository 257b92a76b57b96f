//! The Batch API (`/v1/batches`): create from an uploaded file, read, list
//! with cursor paging, cancel. The batch's lifecycle is events in the control
//! plane (its history is in the audit API); the row counts of a running
//! batch come from its shard checkpoints.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use stoker_controlplane::batch::{CreateBatch, Listed, batch_id};
use stoker_schemas::batch::{
    Batch, BatchError, BatchErrors, BatchList, BatchRequestCounts, CreateBatchRequest,
};
use stoker_schemas::ids::BatchId;

use super::files::batches;
use crate::auth::{ForBatch, Scoped};
use crate::error::ApiError;
use crate::http::extract::{ApiJson, ApiQuery};
use crate::http::path_id::PathId;
use crate::state::AppState;

/// Most metadata pairs, and their key and value lengths (OpenAI's limits).
const MAX_METADATA: usize = 16;
const MAX_METADATA_KEY: usize = 64;
const MAX_METADATA_VALUE: usize = 512;

fn ts(t: Option<DateTime<Utc>>) -> Option<i64> {
    t.map(|t| t.timestamp())
}

/// The OpenAI `batch` object.
pub fn batch_object(l: &Listed) -> Batch {
    let v = &l.view;
    let when = |status: &str| {
        if v.status == status {
            ts(v.ended_at)
        } else {
            None
        }
    };
    Batch {
        id: v.batch_id.clone(),
        object: "batch".into(),
        endpoint: v.endpoint.clone(),
        errors: v.error.as_ref().map(|(code, message)| BatchErrors {
            object: "list".into(),
            data: vec![BatchError {
                code: code.clone(),
                message: message.clone(),
                param: None,
                line: None,
            }],
        }),
        input_file_id: v.input_file_id.clone(),
        completion_window: v.completion_window.clone(),
        status: v.status.clone(),
        output_file_id: v.output_file_id.clone(),
        error_file_id: v.error_file_id.clone(),
        created_at: v.created_at.timestamp(),
        in_progress_at: ts(v.in_progress_at),
        expires_at: Some(v.expires_at),
        finalizing_at: ts(v.finalizing_at),
        completed_at: when("completed"),
        failed_at: when("failed"),
        expired_at: when("expired"),
        cancelling_at: ts(v.cancelling_at),
        cancelled_at: when("cancelled"),
        request_counts: BatchRequestCounts {
            total: v.total_rows,
            completed: l.completed,
            failed: l.failed,
        },
        metadata: (!v.metadata.is_empty()).then(|| v.metadata.clone()),
    }
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

/// Creates a batch over an uploaded file.
#[utoipa::path(
    post,
    path = "/v1/batches",
    tag = "batch",
    request_body = CreateBatchRequest,
    responses(
        (status = 200, description = "The batch, already in_progress", body = Batch),
        (status = 400, description = "Bad endpoint, window or metadata; lines whose url differs (named); a batch larger than the whole backlog", body = stoker_schemas::error::ErrorBody),
        (status = 404, description = "Unknown input file (`file_not_found`)", body = stoker_schemas::error::ErrorBody),
        (status = 429, description = "The backlog of open batches is full (`batch_backlog_full`), or the tenant's batch backlog quota is (`tenant_quota_exceeded`); see Retry-After", body = stoker_schemas::error::ErrorBody),
    )
)]
pub async fn create(
    State(state): State<AppState>,
    Scoped(principal, _): Scoped<ForBatch>,
    ApiJson(body): ApiJson<CreateBatchRequest>,
) -> Result<Response, ApiError> {
    let metadata = body.metadata.unwrap_or_default();
    check_metadata(&metadata)?;
    let req = CreateBatch {
        input_file_id: stoker_controlplane::batch::file_id(&body.input_file_id)?,
        endpoint: body.endpoint,
        completion_window: body.completion_window,
        metadata,
    };
    let b = batches(&state)?;
    // The tenant's backlog quota, from its open batches and this file's
    // summary (rows and estimated tokens as validated at upload).
    if let Ok(f) = b.file(&principal.tenant, &req.input_file_id).await
        && let Some(c) = state.control()
    {
        let views = c.cp.projector().views().await;
        state
            .tenancy
            .check_batch(&principal.tenant, &views, f.lines, f.estimated_tokens)?;
    }
    let l = b.create(&principal.tenant, &principal.name, req).await?;
    Ok(axum::Json(batch_object(&l)).into_response())
}

/// One batch, with its live row counts.
#[utoipa::path(
    get,
    path = "/v1/batches/{id}",
    tag = "batch",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "The batch", body = Batch),
        (status = 404, description = "No such batch for this tenant (`batch_not_found`)", body = stoker_schemas::error::ErrorBody),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Scoped(principal, _): Scoped<ForBatch>,
    PathId(id): PathId<BatchId>,
) -> Result<Response, ApiError> {
    let b = batches(&state)?;
    let l = b.get(&principal.tenant, &id).await?;
    Ok(axum::Json(batch_object(&l)).into_response())
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    pub after: Option<String>,
    pub limit: Option<usize>,
}

/// The caller's batches, newest first; `after` a batch id, `limit` 1 to 100.
#[utoipa::path(
    get,
    path = "/v1/batches",
    tag = "batch",
    params(("after" = Option<String>, Query), ("limit" = Option<usize>, Query)),
    responses(
        (status = 200, description = "A page of batches", body = BatchList),
        (status = 400, description = "A limit outside 1 to 100", body = stoker_schemas::error::ErrorBody),
        (status = 404, description = "`after` names no batch", body = stoker_schemas::error::ErrorBody),
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Scoped(principal, _): Scoped<ForBatch>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Response, ApiError> {
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
    let b = batches(&state)?;
    let after = q.after.as_deref().map(batch_id).transpose()?;
    let (page, has_more) = b.list(&principal.tenant, after.as_ref(), limit).await?;
    Ok(axum::Json(BatchList {
        object: "list".into(),
        first_id: page.first().map(|l| l.view.batch_id.clone()),
        last_id: page.last().map(|l| l.view.batch_id.clone()),
        has_more,
        data: page.iter().map(batch_object).collect(),
    })
    .into_response())
}

/// Cancels a batch: running rows stop, completed ones are kept.
#[utoipa::path(
    post,
    path = "/v1/batches/{id}/cancel",
    tag = "batch",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "The batch, cancelling", body = Batch),
        (status = 404, description = "No such batch (`batch_not_found`)", body = stoker_schemas::error::ErrorBody),
        (status = 409, description = "The batch has already ended", body = stoker_schemas::error::ErrorBody),
    )
)]
pub async fn cancel(
    State(state): State<AppState>,
    Scoped(principal, _): Scoped<ForBatch>,
    PathId(id): PathId<BatchId>,
) -> Result<Response, ApiError> {
    let b = batches(&state)?;
    let l = b.cancel(&principal.tenant, &principal.name, &id).await?;
    Ok(axum::Json(batch_object(&l)).into_response())
}
