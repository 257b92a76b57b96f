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
        let bytes = read_body(req, limit).await?;
        parse(&bytes).map(ApiJson)
    }
}

/// Reads a whole body of at most `limit` bytes: larger is 413, a body that
/// stopped arriving 408, and one the client broke off (a reset connection, a
/// malformed chunk) 400.
pub async fn read_body(req: Request, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(req.into_body(), limit)
        .await
        .map_err(|e| body_error(&e, limit))
}

/// The typed error for a failed body read (see [`read_body`]).
pub fn body_error(e: &(dyn std::error::Error + 'static), limit: usize) -> ApiError {
    if let Some(idle) = crate::http::body_timeout::BodyIdle::find(e) {
        return ApiError::RequestTimeout { idle: idle.0 };
    }
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<http_body_util::LengthLimitError>() {
            return ApiError::PayloadTooLarge { limit };
        }
        cur = err.source();
    }
    ApiError::InvalidValue {
        message: format!("the request body could not be read: {e}"),
        param: None,
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
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::InvalidValue {
            message: "the request body must be a JSON object".into(),
            param: None,
        });
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let msg = friendlier(&inner.to_string());
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

/// serde's messages for untagged enums name Rust types; say what JSON is expected.
fn friendlier(msg: &str) -> String {
    const EXPECT: [(&str, &str); 3] = [
        (
            "MessageContent",
            "expected a string or an array of content parts",
        ),
        (
            "PromptSpec",
            "expected a string, an array of one string, or an array of token ids",
        ),
        ("StopSpec", "expected a string or an array of strings"),
    ];
    let at = msg.rfind(" at line ").map(|i| &msg[i..]).unwrap_or("");
    for (ty, expected) in EXPECT {
        if msg.contains(&format!("untagged enum {ty}")) {
            return format!("{expected}{at}");
        }
    }
    if msg.contains("untagged enum ") {
        return format!("expected one of the documented forms{at}");
    }
    // `expected struct ChatMessageIn`: a JSON object, not our type's name.
    if let Some(i) = msg.find("expected struct ") {
        let rest = &msg[i + "expected struct ".len()..];
        let name_end = rest
            .find(|c: char| !c.is_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        return format!("{}expected a JSON object{}", &msg[..i], &rest[name_end..]);
    }
    msg.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_schemas::codes::ErrorCode;
    use stoker_schemas::openai::ChatCompletionRequest;

    fn err(body: &str) -> ApiError {
        parse::<ChatCompletionRequest>(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn hostile_bodies_are_typed_errors() {
        for body in [
            "",
            "   ",
            "[]",
            "null",
            "\"a string\"",
            "{",
            "{\"model\": \"m\", \"messages\": [",
            "{\"model\": 1e999}",
            "\u{feff}{}",
        ] {
            let e = err(body);
            assert_eq!(e.code(), ErrorCode::InvalidValue, "{body:?}: {e}");
        }
        let deep = format!(
            "{{\"model\": {}{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert_eq!(err(&deep).code(), ErrorCode::InvalidValue);
        let bad_utf8 = b"{\"model\": \"\xff\"}";
        assert_eq!(
            parse::<ChatCompletionRequest>(bad_utf8).unwrap_err().code(),
            ErrorCode::InvalidValue
        );
    }

    #[test]
    fn missing_and_mistyped_fields_name_their_path() {
        let e = err("{\"messages\": []}");
        assert_eq!(e.code(), ErrorCode::MissingField);
        assert_eq!(e.body().error.param.as_deref(), Some("model"));
        let e = err("{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": 5}]}");
        assert_eq!(e.body().error.param.as_deref(), Some("messages[0].content"));
        assert!(
            e.to_string()
                .contains("expected a string or an array of content parts"),
            "{e}"
        );
        let e = err("{\"model\": \"m\", \"messages\": [{\"content\": \"x\"}]}");
        assert_eq!(e.code(), ErrorCode::MissingField);
        assert_eq!(e.body().error.param.as_deref(), Some("messages[0].role"));
    }
}

/// A JSON body that may be absent: an empty body is `T::default()` (writes
/// that carry only an optional reason).
#[derive(Debug)]
pub struct OptJson<T>(pub T);

impl<T: DeserializeOwned + Default> FromRequest<AppState> for OptJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let limit = state.config.limits.max_body_bytes;
        let bytes = read_body(req, limit).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptJson(T::default()));
        }
        parse(&bytes).map(OptJson)
    }
}

/// Query parameters whose failures are 400 `invalid_value`.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| ApiQuery(q.0))
            .map_err(|e| ApiError::InvalidValue {
                message: format!("bad query string: {}", e.body_text()),
                param: None,
            })
    }
}

/// Path parameters whose failures are 400 `invalid_value`.
#[derive(Debug)]
pub struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> axum::extract::FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e| ApiError::InvalidValue {
                message: format!("bad path: {}", e.body_text()),
                param: None,
            })
    }
}
