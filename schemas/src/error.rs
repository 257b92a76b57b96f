//! The OpenAI error body: `{"error": {"message", "type", "param", "code"}}`.
//! The same body is used for HTTP errors and inside an SSE `error` event.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::codes::ErrorCode;

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
    #[schema(schema_with = code_schema)]
    pub code: ErrorCode,
}

/// [`ErrorDetail::code`]'s schema, with the field's description: a
/// `schema_with` schema takes none from the doc comment (and a derived inline
/// one with a description comes out wrapped in a `oneOf`).
fn code_schema() -> utoipa::openapi::Object {
    ErrorCode::openapi_schema()
        .description(Some(
            "Stable machine-readable code from the error catalogue.",
        ))
        .build()
}
