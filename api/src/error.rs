//! The API layer's one error enum, and the one place it becomes HTTP.
//!
//! Every refusal the server makes is a variant here; [`ApiError::status`],
//! [`ApiError::code`] and [`ApiError::body`] give its status, catalogue code
//! and OpenAI body, and `IntoResponse` adds `Retry-After` where the catalogue
//! says the client may retry. Streams that fail after they started send the
//! same body in an SSE `error` event (see `stream.rs`).

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use stoker_controlplane::batch::input::InputError;
use stoker_controlplane::batch::{BatchError, StorageError};
use stoker_controlplane::domain::ErrorKind;
use stoker_controlplane::service::CpError;
use stoker_controlplane::store::StoreError;
use stoker_executor::{EngineError, ValidationError};
use stoker_schemas::codes::ErrorCode;
use stoker_schemas::error::{ErrorBody, ErrorDetail};

/// How long a refused client should wait, computed from the measured drain rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryAfter(pub Duration);

impl RetryAfter {
    /// Whole seconds for the `Retry-After` header (at least 1).
    pub fn secs(self) -> u64 {
        self.0.as_millis().div_ceil(1000).max(1) as u64
    }
    pub fn millis(self) -> u64 {
        (self.0.as_millis() as u64).max(1)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    InvalidValue {
        message: String,
        param: Option<String>,
    },
    #[error("{message}")]
    MissingField { message: String, param: String },
    #[error("{message}")]
    Unsupported { message: String, param: String },
    #[error("{0}")]
    ContextLengthExceeded(String),
    #[error("the model `{0}` does not exist")]
    ModelNotFound(String),
    #[error("no route for {0}")]
    RouteNotFound(String),
    #[error("method {0} is not allowed here")]
    MethodNotAllowed(String),
    #[error("{0}")]
    InvalidApiKey(&'static str),
    #[error("this API key lacks the `{0}` scope")]
    InsufficientScope(&'static str),
    #[error("the request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// The body stopped arriving: a slow or stalled client.
    #[error("no part of the request body arrived for {} ms; send it at once", .idle.as_millis())]
    RequestTimeout { idle: Duration },
    #[error("{message}")]
    Overloaded {
        message: String,
        retry_after: RetryAfter,
    },
    #[error("{message}")]
    DeadlineInfeasible {
        message: String,
        retry_after: RetryAfter,
    },
    #[error("{message}")]
    NotReady {
        message: String,
        retry_after: RetryAfter,
    },
    /// A control-plane write that contradicts the current state (or lost a race):
    /// re-read and decide again.
    #[error("{0}")]
    Conflict(String),
    /// A control-plane object that does not exist.
    #[error("{message}")]
    NotFound { message: String, code: ErrorCode },
    /// The open batches already hold as much estimated work as allowed.
    #[error("{message}")]
    BatchBacklogFull {
        message: String,
        retry_after: RetryAfter,
    },
    /// The tenant is over one of its quotas; `Retry-After` is when its own
    /// budget refills.
    #[error("{message}")]
    TenantQuotaExceeded {
        message: String,
        retry_after: RetryAfter,
    },
    /// The executor running the request stopped reporting (distributed
    /// mode). Retryable when no token had been delivered yet.
    #[error("{message}")]
    ExecutorLost {
        message: String,
        retry_after: Option<RetryAfter>,
    },
    /// The disk under the database or the object storage is full: nothing
    /// was written.
    #[error("{message}")]
    StorageFull {
        message: String,
        retry_after: RetryAfter,
    },
    /// Opaque to the client; the detail only goes to the log.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    pub fn invalid(message: impl Into<String>, param: impl Into<String>) -> Self {
        ApiError::InvalidValue {
            message: message.into(),
            param: Some(param.into()),
        }
    }

    pub fn unsupported(param: &str, what: &str) -> Self {
        ApiError::Unsupported {
            message: format!("`{param}`: {what} is not supported by this server yet"),
            param: param.to_string(),
        }
    }

    pub fn status(&self) -> StatusCode {
        use ApiError::*;
        match self {
            InvalidValue { .. }
            | MissingField { .. }
            | Unsupported { .. }
            | ContextLengthExceeded(_) => StatusCode::BAD_REQUEST,
            ModelNotFound(_) | RouteNotFound(_) | NotFound { .. } => StatusCode::NOT_FOUND,
            Conflict(_) => StatusCode::CONFLICT,
            MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            InvalidApiKey(_) => StatusCode::UNAUTHORIZED,
            InsufficientScope(_) => StatusCode::FORBIDDEN,
            PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            RequestTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Overloaded { .. }
            | DeadlineInfeasible { .. }
            | NotReady { .. }
            | ExecutorLost { .. } => StatusCode::SERVICE_UNAVAILABLE,
            BatchBacklogFull { .. } | TenantQuotaExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            StorageFull { .. } => StatusCode::INSUFFICIENT_STORAGE,
            Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The catalogue code (DESIGN section 9).
    pub fn code(&self) -> ErrorCode {
        use ApiError::*;
        match self {
            InvalidValue { .. } | Unsupported { .. } => ErrorCode::InvalidValue,
            MissingField { .. } => ErrorCode::MissingField,
            ContextLengthExceeded(_) => ErrorCode::ContextLengthExceeded,
            ModelNotFound(_) => ErrorCode::ModelNotFound,
            RouteNotFound(_) => ErrorCode::NotFound,
            NotFound { code, .. } => *code,
            Conflict(_) => ErrorCode::Conflict,
            MethodNotAllowed(_) => ErrorCode::MethodNotAllowed,
            InvalidApiKey(_) => ErrorCode::InvalidApiKey,
            InsufficientScope(_) => ErrorCode::InsufficientScope,
            PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            RequestTimeout { .. } => ErrorCode::RequestTimeout,
            Overloaded { .. } => ErrorCode::ServerOverloaded,
            DeadlineInfeasible { .. } => ErrorCode::DeadlineInfeasible,
            NotReady { .. } => ErrorCode::NotReady,
            BatchBacklogFull { .. } => ErrorCode::BatchBacklogFull,
            TenantQuotaExceeded { .. } => ErrorCode::TenantQuotaExceeded,
            ExecutorLost { .. } => ErrorCode::ExecutorLost,
            StorageFull { .. } => ErrorCode::StorageFull,
            Internal(_) => ErrorCode::InternalError,
        }
    }

    fn kind(&self) -> &'static str {
        match self.status() {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::FORBIDDEN => "permission_error",
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::CONFLICT => "conflict_error",
            StatusCode::SERVICE_UNAVAILABLE => "overloaded_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }

    fn param(&self) -> Option<String> {
        use ApiError::*;
        match self {
            InvalidValue { param, .. } => param.clone(),
            MissingField { param, .. } | Unsupported { param, .. } => Some(param.clone()),
            ContextLengthExceeded(_) => Some("messages".into()),
            ModelNotFound(_) => Some("model".into()),
            _ => None,
        }
    }

    pub fn retry_after(&self) -> Option<RetryAfter> {
        match self {
            ApiError::Overloaded { retry_after, .. }
            | ApiError::DeadlineInfeasible { retry_after, .. }
            | ApiError::NotReady { retry_after, .. }
            | ApiError::BatchBacklogFull { retry_after, .. }
            | ApiError::TenantQuotaExceeded { retry_after, .. }
            | ApiError::StorageFull { retry_after, .. } => Some(*retry_after),
            ApiError::ExecutorLost { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    pub fn body(&self) -> ErrorBody {
        let message = match self {
            // Never leak internals to the client.
            ApiError::Internal(_) => "internal server error; see the server log".to_string(),
            other => other.to_string(),
        };
        ErrorBody {
            error: ErrorDetail {
                message,
                kind: self.kind().to_string(),
                param: self.param(),
                code: self.code(),
            },
        }
    }

    /// A refusal that the engine decided (queue full, cannot fit, stopped).
    pub fn from_engine(e: EngineError, retry_after: RetryAfter) -> Self {
        match e {
            EngineError::Invalid(v) => v.into(),
            EngineError::QueueFull { .. } => ApiError::Overloaded {
                message: "the server's waiting queue is full; retry later".into(),
                retry_after,
            },
            // The engine refuses only what can never fit its KV cache.
            EngineError::CannotFit => ApiError::ContextLengthExceeded(
                "the prompt plus max_tokens does not fit this deployment's KV cache".into(),
            ),
            EngineError::ShuttingDown => ApiError::NotReady {
                message: "the server is shutting down".into(),
                retry_after,
            },
            EngineError::Stopped(m) | EngineError::Internal(m) => ApiError::Internal(m),
        }
    }

    /// Rebuilds an error another process named by its catalogue code. Codes
    /// that only the edge produces, and unknown ones, are internal errors.
    pub fn from_remote(code: ErrorCode, message: String, retry_after: RetryAfter) -> Self {
        use ErrorCode::*;
        match code {
            InvalidValue => ApiError::InvalidValue {
                message,
                param: None,
            },
            ContextLengthExceeded => ApiError::ContextLengthExceeded(message),
            ServerOverloaded => ApiError::Overloaded {
                message,
                retry_after,
            },
            DeadlineInfeasible => ApiError::DeadlineInfeasible {
                message,
                retry_after,
            },
            NotReady => ApiError::NotReady {
                message,
                retry_after,
            },
            ExecutorLost => ApiError::ExecutorLost {
                message,
                retry_after: Some(retry_after),
            },
            ExecutorLostAfterOutput => ApiError::ExecutorLost {
                message,
                retry_after: None,
            },
            MissingField | ModelNotFound | NotFound | RevisionAbsent | FileNotFound
            | BatchNotFound | Conflict | MethodNotAllowed | InvalidApiKey | InsufficientScope
            | PayloadTooLarge | RequestTimeout | TenantQuotaExceeded | BatchBacklogFull
            | StorageFull | InternalError | InputFileMissing | BatchCancelled | BatchExpired
            | Unknown => ApiError::Internal(format!("remote error {code}: {message}")),
        }
    }
}

/// The control plane's errors, mapped in this one place (DESIGN section 9):
/// a refused command is 404, 409 or 400 by its kind; a lost optimistic race is
/// 409 `conflict`; a bad audit cursor is 400; the rest is an opaque 500.
impl From<CpError> for ApiError {
    fn from(e: CpError) -> Self {
        match e {
            CpError::Domain(d) => {
                let message = d.to_string();
                match d.kind() {
                    ErrorKind::NotFound => ApiError::NotFound {
                        message,
                        code: d.error_code(),
                    },
                    ErrorKind::Conflict => ApiError::Conflict(message),
                    ErrorKind::Invalid => ApiError::InvalidValue {
                        message,
                        param: None,
                    },
                }
            }
            CpError::NotFound { .. } => ApiError::NotFound {
                message: e.to_string(),
                code: ErrorCode::NotFound,
            },
            CpError::Store(s) => s.into(),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// The batch path's errors, mapped here with the rest.
impl From<BatchError> for ApiError {
    fn from(e: BatchError) -> Self {
        match e {
            BatchError::NotFound { what, .. } => ApiError::NotFound {
                message: e.to_string(),
                code: if what == "file" {
                    ErrorCode::FileNotFound
                } else {
                    ErrorCode::BatchNotFound
                },
            },
            BatchError::Input(InputError::TooLarge { max, .. }) => {
                ApiError::PayloadTooLarge { limit: max }
            }
            BatchError::Input(i) => ApiError::invalid(i.to_string(), "file"),
            BatchError::Invalid { message, param } => ApiError::invalid(message, param),
            BatchError::BacklogFull {
                retry_after_secs, ..
            } => ApiError::BatchBacklogFull {
                message: e.to_string(),
                retry_after: RetryAfter(Duration::from_secs(retry_after_secs)),
            },
            BatchError::InUse { .. } => ApiError::Conflict(e.to_string()),
            BatchError::ControlPlane(c) => c.into(),
            BatchError::Db(d) if stoker_controlplane::store::is_unavailable(&d) => {
                database_unavailable(&d.to_string())
            }
            BatchError::Db(d) if stoker_controlplane::store::is_full(&d) => {
                storage_full(&d.to_string())
            }
            BatchError::Storage(StorageError::Full(detail)) => storage_full(&detail),
            BatchError::Storage(StorageError::Unavailable(detail)) => {
                tracing::warn!(%detail, "batch object storage unreachable");
                ApiError::NotReady {
                    message: "the batch object storage is unreachable; nothing was changed, \
                              retry shortly"
                        .into(),
                    retry_after: RetryAfter(std::time::Duration::from_secs(2)),
                }
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// The disk under the database or the object storage is full: nothing was
/// written, reads still work, and the same request can succeed once an operator
/// frees space (no restart needed).
fn storage_full(detail: &str) -> ApiError {
    tracing::error!(%detail, "storage full: writes are refused until space is freed");
    ApiError::StorageFull {
        message: "the server's storage is full; nothing was changed, retry once space is freed"
            .into(),
        retry_after: RetryAfter(std::time::Duration::from_secs(30)),
    }
}

/// The database is down or cut off: nothing was written, and the same
/// request can succeed once it is back.
fn database_unavailable(detail: &str) -> ApiError {
    tracing::warn!(%detail, "control-plane database unreachable");
    ApiError::NotReady {
        message: "the control-plane database is unreachable; nothing was changed, retry shortly"
            .into(),
        retry_after: RetryAfter(std::time::Duration::from_secs(2)),
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict { .. } => ApiError::Conflict(format!(
                "{e}; someone else changed it first: re-read and retry"
            )),
            StoreError::BadCursor(_) => ApiError::invalid(e.to_string(), "cursor"),
            StoreError::Unavailable(detail) => database_unavailable(&detail),
            StoreError::Full(detail) => storage_full(&detail),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        use ValidationError::*;
        let param = match &e {
            EmptyPrompt | TokenOutOfRange { .. } => "prompt",
            PromptTooLong { .. } | ContextLengthExceeded { .. } => {
                return ApiError::ContextLengthExceeded(e.to_string());
            }
            InputTooLong { .. } => "messages",
            ZeroMaxTokens | MaxTokensTooLarge { .. } => "max_tokens",
            BadTemperature(_) => "temperature",
            BadTopP(_) => "top_p",
            BadTopK => "top_k",
            TooManyTopLogprobs { .. } => "top_logprobs",
            BadPenalty { name, .. } => *name,
            BadRepetitionPenalty(_) => "repetition_penalty",
            TooManyLogitBiases { .. }
            | BadLogitBias { .. }
            | UnsortedLogitBias
            | LogitBiasOutOfVocabulary { .. } => "logit_bias",
            MinTokensAboveMax { .. } => "min_tokens",
            TooManyStops { .. } | BadStop { .. } => "stop",
            ResponseFormat(_) => "response_format",
        };
        ApiError::invalid(e.to_string(), param)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        let status = self.status();
        let retry = self.retry_after();
        let mut resp = (status, axum::Json(self.body())).into_response();
        if let Some(r) = retry {
            let h = resp.headers_mut();
            h.insert(header::RETRY_AFTER, HeaderValue::from(r.secs()));
            h.insert("retry-after-ms", HeaderValue::from(r.millis()));
        }
        resp.extensions_mut().insert(RejectedCode(self.code()));
        resp
    }
}

/// Attached to every error response so the metrics layer can count
/// rejections by code without parsing bodies.
#[derive(Clone, Copy, Debug)]
pub struct RejectedCode(pub ErrorCode);

/// Client text quoted in an error message, cut at `max` bytes (on a char
/// boundary) with `...`: messages stay bounded whatever the client sent.
pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}
