//! The router: OpenAI routes, health, metrics, and the layers every response
//! passes through (provenance headers, rejection counting, JSON 404/405).

pub mod admin;
pub mod batches;
pub mod completions;
pub mod files;
pub mod health;
pub mod models;
pub mod tokenize;

pub use completions::{chat_completions, completions};
pub use health::{live, metrics, ready};
pub use models::{get_model, list_models};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, Uri};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

use crate::auth::{Principal, ScopeMarker, Scoped};
use crate::backend::Provenance;
use crate::edge::reqlog::LogSlot;
use crate::error::{ApiError, RejectedCode};
use crate::state::AppState;
use stoker_schemas::codes::ErrorCode;

pub fn router(state: AppState) -> Router {
    // Uploads may be as large as the batch file limit, plus multipart framing.
    let upload_limit = state.config.batch.max_file_bytes.saturating_add(64 << 10);
    Router::new()
        .route(
            "/v1/files",
            post(files::upload)
                .layer(DefaultBodyLimit::max(upload_limit))
                .get(files::list),
        )
        .route("/v1/files/{id}", get(files::get).delete(files::delete))
        .route("/v1/files/{id}/content", get(files::content))
        .route("/v1/batches", post(batches::create).get(batches::list))
        .route("/v1/batches/{id}", get(batches::get))
        .route("/v1/batches/{id}/cancel", post(batches::cancel))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{id}", get(get_model))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/health/live", get(live))
        .route("/health/ready", get(ready))
        .route("/metrics", get(metrics))
        .merge(admin::router())
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

/// Gives every request an id, bounds how long its body may stall, opens the
/// request-log row of generation requests, adds provenance headers to every response, and counts error
/// responses by code.
async fn edge(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let request_id = RequestId::generate();
    let endpoint = match (req.method(), req.uri().path()) {
        (&Method::POST, "/v1/chat/completions") => Some("/v1/chat/completions"),
        (&Method::POST, "/v1/completions") => Some("/v1/completions"),
        _ => None,
    };
    let slot = endpoint.map(|e| LogSlot::new(request_id.clone(), e));
    if let Some(s) = &slot {
        req.extensions_mut().insert(s.clone());
    }
    req.extensions_mut().insert(request_id.clone());
    if let Some(idle) = state.config.limits.body_idle_timeout() {
        req = req.map(|b| crate::http::body_timeout::IdleBody::wrap(b, idle));
    }
    let mut resp = next.run(req).await;
    let rejected = resp.extensions().get::<RejectedCode>().map(|c| c.0);
    // A caller without a valid key, or without the scope, leaves no row: an
    // unauthenticated client cannot make the server write, and what it was
    // refused is counted in `stoker_requests_rejected_total` all the same.
    let unauthorized = matches!(
        rejected,
        Some(ErrorCode::InvalidApiKey | ErrorCode::InsufficientScope)
    );
    if let (Some(slot), Some(c), false) = (&slot, state.control(), unauthorized) {
        if let Some(code) = rejected {
            slot.failed(code);
        }
        if !slot.is_deferred() {
            slot.write(&c.log, resp.status().as_u16());
        }
    }
    let served = state.served();
    if let Some(code) = resp.extensions().get::<RejectedCode>().copied() {
        tracing::debug!(
            code = %code.0,
            status = resp.status().as_u16(),
            "request refused"
        );
        if let Some(s) = served {
            s.metrics.record_rejected(code.0);
        }
    }
    // A routed response carries its revision's provenance; others the primary's.
    if let Some(p) = resp.extensions().get::<Provenance>().cloned() {
        p.apply(resp.headers_mut());
    } else if let Some(s) = served {
        s.provenance.apply(resp.headers_mut());
    }
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        h.insert("x-request-id", v);
    }
    resp
}

/// The id of this request, as sent back in `x-request-id`; a request
/// extension set by the edge.
pub use stoker_schemas::ids::RequestId;

impl<S: ScopeMarker> FromRequestParts<AppState> for Scoped<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let p = Principal::from_request_parts(parts, state).await?;
        p.require(S::SCOPE)?;
        Ok(Scoped(p, std::marker::PhantomData))
    }
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
