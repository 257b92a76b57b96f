//! The router: OpenAI routes, health, metrics, and the layers every response
//! passes through (provenance headers, rejection counting, JSON 404/405).

pub mod completions;
pub mod health;
pub mod models;

pub use completions::{chat_completions, completions};
pub use health::{live, metrics, ready};
pub use models::{get_model, list_models};

use axum::Router;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, Uri};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

use crate::auth::Principal;
use crate::error::{ApiError, RejectedCode};
use crate::state::AppState;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{id}", get(get_model))
        .route("/health/live", get(live))
        .route("/health/ready", get(ready))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), edge))
        .with_state(state)
}

async fn not_found(uri: Uri) -> ApiError {
    let p = uri.path();
    let p = if p.len() > 128 {
        &p[..p.floor_char_boundary(128)]
    } else {
        p
    };
    ApiError::RouteNotFound(p.to_string())
}

async fn method_not_allowed(method: Method) -> ApiError {
    ApiError::MethodNotAllowed(method.to_string())
}

/// Adds provenance headers and a request id to every response, and counts
/// error responses by code.
async fn edge(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let served = state.served();
    if let Some(code) = resp.extensions().get::<RejectedCode>().copied() {
        tracing::debug!(
            code = code.0,
            status = resp.status().as_u16(),
            "request refused"
        );
        if let Some(s) = served {
            s.metrics.record_rejected(code.0);
        }
    }
    if let Some(s) = served {
        s.provenance.apply(resp.headers_mut());
    }
    let h = resp.headers_mut();
    if !h.contains_key("x-request-id")
        && let Ok(v) = HeaderValue::from_str(&uuid::Uuid::new_v4().simple().to_string())
    {
        h.insert("x-request-id", v);
    }
    resp
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let h = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        state.auth.authenticate(h)
    }
}
