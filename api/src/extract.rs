//! A JSON body extractor whose every failure is a typed OpenAI error: a body
//! over the configured limit is 413 `payload_too_large`, malformed JSON or a
//! wrong type is 400 `invalid_value` naming the field's path, and a missing
//! required field is 400 `missing_field`.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::AppState;

#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit = state.config.limits.max_body_bytes;
        let body = req.into_body();
        let bytes: Bytes = axum::body::to_bytes(body, limit)
            .await
            .map_err(|_| ApiError::PayloadTooLarge { limit })?;
        parse(&bytes).map(ApiJson)
    }
}

/// Parses a JSON body into `T` with typed, path-naming errors.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::InvalidValue {
            message: "the request body is empty; expected a JSON object".into(),
            param: None,
        });
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.to_string();
        if let Some(rest) = msg.strip_prefix("missing field `") {
            let field = rest.split('`').next().unwrap_or_default();
            let param = if path == "." || path.is_empty() {
                field.to_string()
            } else {
                format!("{path}.{field}")
            };
            return ApiError::MissingField {
                message: format!("missing required field `{param}`"),
                param,
            };
        }
        let param = (path != ".").then_some(path);
        let message = match inner.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                format!("the request body is not valid JSON: {msg}")
            }
            _ => match &param {
                Some(p) => format!("invalid value for `{p}`: {msg}"),
                None => format!("invalid request body: {msg}"),
            },
        };
        ApiError::InvalidValue { message, param }
    })
}
