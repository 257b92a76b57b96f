//! The Files API (`/v1/files`), for batch input and output files. Uploads are
//! multipart (`purpose=batch`, `file`); every line's structure is checked
//! before anything is stored, and a refusal names the lines at fault.

use axum::extract::{Multipart, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use stoker_controlplane::batch::Batches;
use stoker_controlplane::batch::files::FileRecord;
use stoker_schemas::batch::{FileDeleted, FileList, FileObject};
use stoker_schemas::ids::FileId;

use crate::auth::{ForBatch, Scoped};
use crate::error::ApiError;
use crate::http::extract::ApiQuery;
use crate::http::path_id::PathId;
use crate::state::AppState;

/// Longest `filename` kept.
const MAX_FILENAME_BYTES: usize = 255;

pub(crate) fn batches(state: &AppState) -> Result<&Batches, ApiError> {
    state
        .control()
        .map(|c| &c.batches)
        .ok_or_else(|| ApiError::Internal("the control plane is not open".into()))
}

/// The OpenAI `file` object.
pub fn file_object(f: &FileRecord) -> FileObject {
    FileObject {
        id: f.id.clone(),
        object: "file".into(),
        bytes: f.bytes,
        created_at: f.created_at / 1000,
        filename: f.filename.clone(),
        purpose: f.purpose.clone(),
        status: "processed".into(),
        status_details: None,
        expires_at: None,
    }
}

fn multipart_error(e: axum::extract::multipart::MultipartError, limit: usize) -> ApiError {
    if let Some(idle) = crate::http::body_timeout::BodyIdle::find(&e) {
        ApiError::RequestTimeout { idle: idle.0 }
    } else if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge { limit }
    } else {
        ApiError::InvalidValue {
            message: format!("the multipart body is malformed: {}", e.body_text()),
            param: None,
        }
    }
}

/// Upload a batch input file (`purpose=batch`); every line is checked first.
#[utoipa::path(
    post,
    path = "/v1/files",
    tag = "batch",
    request_body(content = stoker_schemas::batch::FileUpload, content_type = "multipart/form-data"),
    responses(
        (status = 200, description = "The stored file", body = FileObject),
        (status = 400, description = "Wrong purpose, missing part, or invalid lines (named by number)", body = stoker_schemas::error::ErrorBody),
        (status = 403, description = "Key lacks the batch scope", body = stoker_schemas::error::ErrorBody),
        (status = 413, description = "Larger than batch.max_file_bytes", body = stoker_schemas::error::ErrorBody),
    )
)]
pub async fn upload(
    State(state): State<AppState>,
    Scoped(principal, _): Scoped<ForBatch>,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Result<Response, ApiError> {
    let b = batches(&state)?;
    let limit = b.settings().limits.max_bytes;
    let mut multipart = multipart.map_err(|e| ApiError::InvalidValue {
        message: format!(
            "the body must be multipart/form-data with `purpose` and `file`: {}",
            e.body_text()
        ),
        param: None,
    })?;
    let mut purpose: Option<String> = None;
    let mut file: Option<(String, Vec<u8>)> = None;
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| multipart_error(e, limit))?
    {
        match field.name() {
            Some("purpose") => {
                let text = field.text().await.map_err(|e| multipart_error(e, limit))?;
                purpose = Some(text.trim().to_owned());
            }
            Some("file") => {
                let name = field
                    .file_name()
                    .unwrap_or("upload.jsonl")
                    .chars()
                    .filter(|c| !c.is_control())
                    .collect::<String>();
                let name = crate::error::truncate(&name, MAX_FILENAME_BYTES);
                let bytes = field.bytes().await.map_err(|e| multipart_error(e, limit))?;
                if bytes.len() > limit {
                    return Err(ApiError::PayloadTooLarge { limit });
                }
                file = Some((name, bytes.to_vec()));
            }
            // Unknown parts are ignored, as for unknown JSON fields.
            _ => {}
        }
    }
    let purpose = purpose.ok_or_else(|| ApiError::MissingField {
        message: "missing required field `purpose`".into(),
        param: "purpose".into(),
    })?;
    let (name, bytes) = file.ok_or_else(|| ApiError::MissingField {
        message: "missing required field `file`".into(),
        param: "file".into(),
    })?;
    if state.tenancy.has_file_quota(&principal.tenant) {
        let stored = b.tenant_file_bytes(&principal.tenant).await?;
        state
            .tenancy
            .check_file(&principal.tenant, stored, bytes.len() as u64)?;
    }
    let f = b.upload(&principal.tenant, &name, &purpose, bytes).await?;
    Ok(axum::Json(file_object(&f)).into_response())
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    pub limit: Option<u32>,
    pub purpose: Option<String>,
}

/// The caller's files, newest first.
#[utoipa::path(
    get,
    path = "/v1/files",
    tag = "batch",
    params(("purpose" = Option<String>, Query, description = "Only files of this purpose"),
           ("limit" = Option<u32>, Query, description = "At most this many (1 to 10000)")),
    responses((status = 200, description = "The files", body = FileList),
              (status = 400, description = "A malformed query (`limit` not 1 to 10000)", body = stoker_schemas::error::ErrorBody))
)]
pub async fn list(
    State(state): State<AppState>,
    Scoped(principal, _): Scoped<ForBatch>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Response, ApiError> {
    let limit = q.limit.unwrap_or(10_000).clamp(1, 10_000);
    let files = batches(&state)?.files(&principal.tenant, limit).await?;
    let data = files
        .iter()
        .filter(|f| q.purpose.as_deref().is_none_or(|p| p == f.purpose))
        .map(file_object)
        .collect();
    Ok(axum::Json(FileList {
        object: "list".into(),
        data,
        has_more: false,
    })
    .into_response())
}

/// One file's metadata.
#[utoipa::path(
    get,
    path = "/v1/files/{id}",
    tag = "batch",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "The file", body = FileObject),
        (status = 404, description = "No such file for this tenant (`file_not_found`)", body = stoker_schemas::error::ErrorBody),
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Scoped(principal, _): Scoped<ForBatch>,
    PathId(id): PathId<FileId>,
) -> Result<Response, ApiError> {
    let b = batches(&state)?;
    let f = b.file(&principal.tenant, &id).await?;
    Ok(axum::Json(file_object(&f)).into_response())
}

/// The file's bytes as uploaded or written (JSONL).
#[utoipa::path(
    get,
    path = "/v1/files/{id}/content",
    tag = "batch",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "The JSONL content", content_type = "application/jsonl", body = String),
        (status = 404, description = "No such file (`file_not_found`)", body = stoker_schemas::error::ErrorBody),
    )
)]
pub async fn content(
    State(state): State<AppState>,
    Scoped(principal, _): Scoped<ForBatch>,
    PathId(id): PathId<FileId>,
) -> Result<Response, ApiError> {
    let b = batches(&state)?;
    let bytes = b.file_content(&principal.tenant, &id).await?;
    let mut resp = bytes.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/jsonl"),
    );
    Ok(resp)
}

/// Deletes a file; refused (409 `conflict`) while an open batch reads it.
#[utoipa::path(
    delete,
    path = "/v1/files/{id}",
    tag = "batch",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "Deleted", body = FileDeleted),
        (status = 404, description = "No such file (`file_not_found`)", body = stoker_schemas::error::ErrorBody),
        (status = 409, description = "An open batch reads it", body = stoker_schemas::error::ErrorBody),
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    Scoped(principal, _): Scoped<ForBatch>,
    PathId(id): PathId<FileId>,
) -> Result<Response, ApiError> {
    let b = batches(&state)?;
    b.delete_file(&principal.tenant, &id).await?;
    Ok(axum::Json(FileDeleted {
        id,
        object: "file".into(),
        deleted: true,
    })
    .into_response())
}
