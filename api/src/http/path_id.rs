//! Ids in the request path, parsed once at the edge: a handler takes
//! `PathId<BatchId>` and never sees the raw string. An id that breaks its
//! kind's rule names nothing, so it is refused exactly as an unknown one:
//! the kind's 404, with the id as sent (truncated) in the message.

use std::str::FromStr;

use stoker_controlplane::batch::BatchError;
use stoker_schemas::codes::ErrorCode;
use stoker_schemas::ids::{
    BatchId, DeploymentId, ExecutorId, FileId, KeyId, RequestId, RolloutId, TenantId,
};

use crate::error::{ApiError, truncate};

/// An id kind a path may carry, and how a malformed one is refused.
pub trait FromPath: FromStr {
    /// The answer to a path id that does not parse as this kind.
    fn refuse(raw: &str) -> ApiError;
}

/// The 404 of an admin resource that does not exist.
fn admin_not_found(kind: &str, raw: &str) -> ApiError {
    ApiError::NotFound {
        message: format!("{kind} {:?} does not exist", truncate(raw, 64)),
        code: ErrorCode::NotFound,
    }
}

macro_rules! admin_ids {
    ($($t:ty => $kind:literal),* $(,)?) => {$(
        impl FromPath for $t {
            fn refuse(raw: &str) -> ApiError {
                admin_not_found($kind, raw)
            }
        }
    )*};
}

admin_ids!(
    DeploymentId => "deployment",
    RolloutId => "rollout",
    ExecutorId => "executor",
    TenantId => "tenant",
    KeyId => "API key",
);

impl FromPath for BatchId {
    fn refuse(raw: &str) -> ApiError {
        BatchError::NotFound {
            what: "batch",
            id: truncate(raw, 128),
        }
        .into()
    }
}

impl FromPath for FileId {
    fn refuse(raw: &str) -> ApiError {
        BatchError::NotFound {
            what: "file",
            id: truncate(raw, 128),
        }
        .into()
    }
}

impl FromPath for RequestId {
    fn refuse(raw: &str) -> ApiError {
        if raw.len() > RequestId::MAX_LEN {
            return ApiError::invalid("request ids are at most 128 bytes", "id");
        }
        ApiError::NotFound {
            message: format!("no request {raw:?} in the request log"),
            code: ErrorCode::NotFound,
        }
    }
}

/// Parses `raw` as an id of kind `T` as [`PathId`] does, for a route with
/// more parameters than the id.
pub fn parse<T: FromPath>(raw: &str) -> Result<T, ApiError> {
    raw.parse().map_err(|_| T::refuse(raw))
}

/// The route's one path parameter, as an id of kind `T`.
#[derive(Debug)]
pub struct PathId<T>(pub T);

impl<T: FromPath + Send, S: Send + Sync> axum::extract::FromRequestParts<S> for PathId<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        let super::extract::ApiPath(raw) =
            super::extract::ApiPath::<String>::from_request_parts(parts, state).await?;
        parse(&raw).map(PathId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    /// The status and body a one-route router answers for `path`.
    async fn answer<T: FromPath + Send + 'static>(path: &str) -> (StatusCode, String) {
        let app = axum::Router::new().route(
            "/x/{id}",
            axum::routing::get(|PathId(_): PathId<T>| async { "found" }),
        );
        let req = Request::builder().uri(path).body(Body::empty()).unwrap();
        let resp = app.oneshot(req).await.unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn well_formed_ids_reach_the_handler() {
        assert_eq!(answer::<BatchId>("/x/batch_1").await.0, StatusCode::OK);
        assert_eq!(answer::<DeploymentId>("/x/default").await.0, StatusCode::OK);
        assert_eq!(answer::<RequestId>("/x/req-1").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn malformed_ids_are_refused_as_unknown_ones_of_their_kind() {
        let (s, body) = answer::<BatchId>("/x/nope").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(body.contains("batch_not_found"), "{body}");
        let (s, body) = answer::<FileId>("/x/batch_1").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(body.contains("file_not_found"), "{body}");
        let (s, body) = answer::<DeploymentId>("/x/a%20b").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(
            body.contains(r#"deployment \"a b\" does not exist"#),
            "{body}"
        );
        let (s, body) = answer::<ExecutorId>("/x/%E2%9C%93").await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(body.contains("executor"), "{body}");
    }

    #[tokio::test]
    async fn hostile_ids_are_truncated_in_the_answer() {
        let long = "x".repeat(5000);
        let (s, body) = answer::<TenantId>(&format!("/x/{long}")).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
        assert!(body.len() < 1000, "{} bytes", body.len());
        // A request id over its length limit is a bad request, not a 404.
        let (s, body) = answer::<RequestId>(&format!("/x/{}", "r".repeat(129))).await;
        assert_eq!(s, StatusCode::BAD_REQUEST);
        assert!(body.contains("at most 128"), "{body}");
    }
}
