//! Liveness, readiness and the Prometheus scrape endpoint.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::state::{AppState, Phase};

/// 200 while the process runs.
#[utoipa::path(get, path = "/health/live", tag = "health",
    responses((status = 200, description = "The process is alive")))]
pub async fn live(State(state): State<AppState>) -> Response {
    Json(json!({"status": "live", "phase": state.phase().as_str()})).into_response()
}

/// 200 only when the exact revision is loaded, a warm-up generation
/// succeeded, and the server is not draining; 503 otherwise.
#[utoipa::path(get, path = "/health/ready", tag = "health",
    responses((status = 200, description = "Ready for traffic"),
        (status = 503, description = "Loading, warming up, draining or failed")))]
pub async fn ready(State(state): State<AppState>) -> Response {
    let phase = state.phase();
    let status = if phase == Phase::Ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let revision = state.served().map(|s| s.provenance.revision.clone());
    (
        status,
        Json(json!({"status": phase.as_str(), "revision": revision})),
    )
        .into_response()
}

/// The metrics in the OpenMetrics text format (which Prometheus scrapes).
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "OpenMetrics text format, version 1.0.0",
        content_type = "application/openmetrics-text")))]
pub async fn metrics(State(state): State<AppState>) -> Response {
    let edge = state.admission.snapshot();
    let body = match state.served() {
        Some(s) => {
            let stats = s.backend.stats();
            s.metrics.render(Some(&stats), edge)
        }
        None => String::from("# EOF\n"),
    };
    // The tenants' families go before the exposition's end marker.
    let body = match body.strip_suffix("# EOF\n") {
        Some(head) => format!("{head}{}# EOF\n", state.tenancy.render_metrics()),
        None => body,
    };
    let mut resp = body.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    resp
}
