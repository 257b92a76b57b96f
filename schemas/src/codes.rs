//! The error catalogue: [`ErrorCode`], every machine-readable error code
//! stoker emits, in one enum. The same code names a refusal in the HTTP error
//! body (`error.code`), in an error reply on the transport
//! ([`crate::transport::ReplyEvent::Error`]), in the request log's
//! `error_code` column, and in batch failures and batch error file lines.
//!
//! Each code's string form is written once, in the table below; serde, the
//! OpenAPI and JSON Schema `enum`, and [`ErrorCode::as_str`] all read it from
//! there. A string this build does not know (a newer peer's message, a newer
//! instance's request log row) reads as [`ErrorCode::Unknown`] instead of
//! failing the whole message or row.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! catalogue {
    ($($(#[doc = $doc:literal])* $variant:ident = $code:literal,)*) => {
        /// A machine-readable error code from the catalogue (see the module
        /// docs). Serializes as its snake_case string.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant,)*
            /// A code this build does not know, read from a newer peer's
            /// message or a newer instance's request log row; the original
            /// string is not kept. This build never emits it on its own: an
            /// error reply with it becomes `internal_error` at the edge. It
            /// is written back as `unknown`.
            Unknown,
        }

        impl ErrorCode {
            /// Every code this build emits, in catalogue order (all but
            /// [`ErrorCode::Unknown`]).
            pub const ALL: &[ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The code's string form, as it appears on the wire.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $code,)*
                    ErrorCode::Unknown => "unknown",
                }
            }

            /// The code named `s`, or [`ErrorCode::Unknown`] for a string this
            /// build does not know.
            pub fn parse(s: &str) -> ErrorCode {
                match s {
                    $($code => ErrorCode::$variant,)*
                    _ => ErrorCode::Unknown,
                }
            }
        }
    };
}

catalogue! {
    /// 400: a request field (or the body, or a query parameter) has a value
    /// the server does not accept, or asks for something it does not support.
    InvalidValue = "invalid_value",
    /// 400: a required request field is absent.
    MissingField = "missing_field",
    /// 400: the prompt plus `max_tokens` does not fit the model's context
    /// window or the deployment's KV cache.
    ContextLengthExceeded = "context_length_exceeded",
    /// 404: the `model` the request names is not served here.
    ModelNotFound = "model_not_found",
    /// 404: no route for the path, or no such control-plane object.
    NotFound = "not_found",
    /// 404: a revision's model artifact is not where its URI points.
    RevisionAbsent = "revision_absent",
    /// 404: no such file (for this tenant).
    FileNotFound = "file_not_found",
    /// 404: no such batch (for this tenant).
    BatchNotFound = "batch_not_found",
    /// 409: a control-plane write contradicts the current state or lost a
    /// race; re-read and decide again.
    Conflict = "conflict",
    /// 405: the route exists but not with this method.
    MethodNotAllowed = "method_not_allowed",
    /// 401: the API key is missing or not valid.
    InvalidApiKey = "invalid_api_key",
    /// 403: the API key lacks the scope the route needs.
    InsufficientScope = "insufficient_scope",
    /// 413: the request body is larger than the configured limit.
    PayloadTooLarge = "payload_too_large",
    /// 408: the client sent the request body too slowly (nothing arrived
    /// for `limits.body_idle_timeout_ms`).
    RequestTimeout = "request_timeout",
    /// 503 with `Retry-After`: the waiting queue is full, or admission
    /// control refused the request for now.
    ServerOverloaded = "server_overloaded",
    /// 503 with `Retry-After`: the request's deadline cannot be met with the
    /// work already queued.
    DeadlineInfeasible = "deadline_infeasible",
    /// 503 with `Retry-After`: no engine or executor is ready to take the
    /// request (starting, shutting down, the control-plane database is
    /// unreachable, or a distributed job never started).
    NotReady = "not_ready",
    /// 429 with `Retry-After`: the tenant is over one of its quotas
    /// (concurrent requests, tokens per minute, batch backlog, stored file
    /// bytes); the message names the quota, and `Retry-After` is when the
    /// tenant's own budget refills. The request log counts it as an overload.
    TenantQuotaExceeded = "tenant_quota_exceeded",
    /// 429 with `Retry-After`: the open batches already hold as much estimated
    /// work as allowed.
    BatchBacklogFull = "batch_backlog_full",
    /// 503: the executor running the request (distributed mode) stopped
    /// reporting or its replies went missing. With `Retry-After` when no
    /// output had been delivered yet.
    ExecutorLost = "executor_lost",
    /// On the transport only: like `executor_lost`, but output had already
    /// been delivered, so the request cannot be retried. The edge reports it
    /// as `executor_lost` without `Retry-After`.
    ExecutorLostAfterOutput = "executor_lost_after_output",
    /// 507 with `Retry-After`: the disk under the control-plane database or
    /// the batch object storage is full; nothing was written. Reads are still
    /// served, and the same write succeeds once space is freed.
    StorageFull = "storage_full",
    /// 500: something broke inside the server; the detail goes to its log
    /// only.
    InternalError = "internal_error",
    /// A batch failed as a whole because its input file vanished from
    /// storage.
    InputFileMissing = "input_file_missing",
    /// A batch error file line: the batch was cancelled before the row ran.
    BatchCancelled = "batch_cancelled",
    /// A batch error file line: the batch expired before the row ran.
    BatchExpired = "batch_expired",
}

impl ErrorCode {
    /// The service saying "not now" (full or not ready) rather than broken:
    /// the request log's figures count these as overloads, apart from errors,
    /// so a rollout is not blamed for a full fleet.
    pub const fn is_overload(self) -> bool {
        matches!(
            self,
            ErrorCode::ServerOverloaded
                | ErrorCode::DeadlineInfeasible
                | ErrorCode::NotReady
                | ErrorCode::TenantQuotaExceeded
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<'de, str>::deserialize(d)?;
        Ok(ErrorCode::parse(&s))
    }
}

/// A string restricted to [`ErrorCode::ALL`], inlined where it is used.
impl JsonSchema for ErrorCode {
    fn schema_name() -> Cow<'static, str> {
        "ErrorCode".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        json_schema!({ "type": "string", "enum": codes })
    }
}

impl ErrorCode {
    /// The OpenAPI schema of a field holding a code: a string restricted to
    /// [`ErrorCode::ALL`]. A field takes it with `#[schema(schema_with = ...)]`
    /// and adds its description.
    pub fn openapi_schema() -> utoipa::openapi::ObjectBuilder {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(ErrorCode::ALL.iter().map(|c| c.as_str())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_string() {
        let mut seen = std::collections::HashSet::new();
        for &c in ErrorCode::ALL.iter().chain([&ErrorCode::Unknown]) {
            let s = c.as_str();
            assert!(seen.insert(s), "{s} twice");
            assert!(
                !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{s} is not snake_case"
            );
            assert_eq!(ErrorCode::parse(s), c);
            assert_eq!(c.to_string(), s);
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<ErrorCode>(&json).unwrap(), c);
        }
        assert!(!ErrorCode::ALL.contains(&ErrorCode::Unknown));
    }

    #[test]
    fn unknown_strings_read_as_the_fallback() {
        assert_eq!(ErrorCode::parse("from_a_newer_peer"), ErrorCode::Unknown);
        let c: ErrorCode = serde_json::from_str("\"from_a_newer_peer\"").unwrap();
        assert_eq!(c, ErrorCode::Unknown);
        // Not a string at all is still an error.
        assert!(serde_json::from_str::<ErrorCode>("7").is_err());
    }

    #[test]
    fn overloads_are_the_not_now_codes() {
        use ErrorCode::*;
        let overloads: Vec<ErrorCode> = ErrorCode::ALL
            .iter()
            .copied()
            .filter(|c| c.is_overload())
            .collect();
        assert_eq!(
            overloads,
            [
                ServerOverloaded,
                DeadlineInfeasible,
                NotReady,
                TenantQuotaExceeded
            ]
        );
    }
}
