//! The OpenAI Files and Batch API objects as stoker serves them, and the
//! lines of batch input and output files. Field names, nullability and
//! `object` tags follow OpenAI's so the official SDKs parse them unchanged;
//! absent values are `null`, never omitted, as OpenAI sends them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::ids::{BatchId, FileId, RequestId};

/// A stored file (`object: "file"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FileObject {
    #[schema(value_type = String)]
    pub id: FileId,
    pub object: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Unix seconds.
    pub created_at: i64,
    pub filename: String,
    /// `batch` (uploads) or `batch_output` (result files).
    pub purpose: String,
    /// Always `processed`: a file is stored only once its lines checked out.
    pub status: String,
    pub status_details: Option<String>,
    pub expires_at: Option<i64>,
}

/// `GET /v1/files`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FileList {
    pub object: String,
    pub data: Vec<FileObject>,
    pub has_more: bool,
}

/// `DELETE /v1/files/{id}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FileDeleted {
    #[schema(value_type = String)]
    pub id: FileId,
    pub object: String,
    pub deleted: bool,
}

/// The multipart form of `POST /v1/files`.
#[derive(Clone, Debug, ToSchema)]
pub struct FileUpload {
    /// Must be `batch`.
    pub purpose: String,
    /// The JSONL file.
    #[schema(value_type = String, format = Binary)]
    pub file: Vec<u8>,
}

/// `POST /v1/batches`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CreateBatchRequest {
    // A string, not a `FileId`: the handler parses it, so a malformed id is
    // the same 404 `file_not_found` as an unknown one.
    pub input_file_id: String,
    /// `/v1/chat/completions` or `/v1/completions`; every line's `url`.
    pub endpoint: String,
    /// `24h`, or any whole number of hours up to `168h`.
    pub completion_window: String,
    /// Up to 16 pairs; keys at most 64 characters, values at most 512.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchRequestCounts {
    pub total: u64,
    /// Rows answered 200.
    pub completed: u64,
    /// Rows in the error file.
    pub failed: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchError {
    pub code: String,
    pub message: String,
    pub param: Option<String>,
    pub line: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchErrors {
    pub object: String,
    pub data: Vec<BatchError>,
}

/// A batch (`object: "batch"`). Times are unix seconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Batch {
    #[schema(value_type = String)]
    pub id: BatchId,
    pub object: String,
    pub endpoint: String,
    pub errors: Option<BatchErrors>,
    #[schema(value_type = String)]
    pub input_file_id: FileId,
    pub completion_window: String,
    /// validating, failed, in_progress, finalizing, completed, expired,
    /// cancelling or cancelled.
    pub status: String,
    #[schema(value_type = Option<String>)]
    pub output_file_id: Option<FileId>,
    #[schema(value_type = Option<String>)]
    pub error_file_id: Option<FileId>,
    pub created_at: i64,
    pub in_progress_at: Option<i64>,
    pub expires_at: Option<i64>,
    pub finalizing_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub failed_at: Option<i64>,
    pub expired_at: Option<i64>,
    pub cancelling_at: Option<i64>,
    pub cancelled_at: Option<i64>,
    pub request_counts: BatchRequestCounts,
    pub metadata: Option<BTreeMap<String, String>>,
}

/// `GET /v1/batches`, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchList {
    pub object: String,
    pub data: Vec<Batch>,
    #[schema(value_type = Option<String>)]
    pub first_id: Option<BatchId>,
    #[schema(value_type = Option<String>)]
    pub last_id: Option<BatchId>,
    pub has_more: bool,
}

/// One line of an output or error file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchOutputLine {
    /// `batch_req_…`.
    #[schema(value_type = String)]
    pub id: RequestId,
    pub custom_id: String,
    /// The online API's answer; `null` for a row that never ran.
    pub response: Option<BatchResponse>,
    /// Why a row never ran (`batch_cancelled`, `batch_expired`); else `null`.
    pub error: Option<BatchLineError>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchResponse {
    pub status_code: u16,
    #[schema(value_type = String)]
    pub request_id: RequestId,
    /// The completion object (200, with `system_fingerprint` naming the
    /// revision) or the online API's error body.
    #[schema(value_type = Object)]
    pub body: Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchLineError {
    pub code: String,
    pub message: String,
}
