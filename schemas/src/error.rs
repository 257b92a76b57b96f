//! The OpenAI error body: `{"error": {"message", "type", "param", "code"}}`.
//! The same body is used for HTTP errors and inside an SSE `error` event.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Human-readable; never contains prompt or output text.
    pub message: String,
    /// OpenAI error class: `invalid_request_error`, `authentication_error`,
    /// `permission_error`, `not_found_error`, `rate_limit_error`,
    /// `overloaded_error`, `server_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    /// Stable machine-readable code from the error catalogue.
    pub code: String,
}
