//! The admin and audit surface, `/admin/v1/*` (DESIGN section 1). Every route
//! needs the `admin` scope; the actor of every write is the API key's name, and
//! a refused write records nothing. Writes answer with the events they
//! recorded and the object as it now reads.

mod deployments;
mod ops;
mod rollouts;
mod tenants;

use std::str::FromStr;

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::routing::{get, post, put};
use serde::Serialize;
use serde_json::Value;
use stoker_controlplane::domain::Meta;
use stoker_controlplane::service::{ControlPlane, meta};
use stoker_controlplane::store::Recorded;
use stoker_schemas::ids::IdError;

use crate::auth::{Principal, Scope};
use crate::control::Control;
use crate::error::ApiError;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/admin/v1/deployments",
            get(deployments::list).post(deployments::create),
        )
        .route("/admin/v1/deployments/{id}", get(deployments::get_one))
        .route(
            "/admin/v1/deployments/{id}/limits",
            put(deployments::change_limits),
        )
        .route(
            "/admin/v1/deployments/{id}/retire",
            post(deployments::retire),
        )
        .route(
            "/admin/v1/deployments/{id}/serving-revision",
            put(deployments::set_serving),
        )
        .route(
            "/admin/v1/deployments/{id}/history",
            get(deployments::history),
        )
        .route(
            "/admin/v1/deployments/{id}/revisions",
            get(deployments::list_revisions).post(deployments::register_revision),
        )
        .route(
            "/admin/v1/deployments/{id}/traffic",
            get(deployments::traffic),
        )
        .route("/admin/v1/deployments/{id}/rollouts", post(rollouts::start))
        .route("/admin/v1/rollouts", get(rollouts::list))
        .route("/admin/v1/rollouts/{id}", get(rollouts::get_one))
        .route("/admin/v1/rollouts/{id}/{action}", post(rollouts::act))
        .route(
            "/admin/v1/capacity-profiles",
            get(ops::list_profiles).post(ops::record_profile),
        )
        .route("/admin/v1/admission", get(ops::admission))
        .route("/admin/v1/executors", get(ops::list_executors))
        .route("/admin/v1/executors/{id}/drain", post(ops::drain))
        .route("/admin/v1/audit", get(ops::audit))
        .route("/admin/v1/requests/{id}", get(ops::request))
        .route(
            "/admin/v1/tenants",
            get(tenants::list).post(tenants::create),
        )
        .route("/admin/v1/tenants/{id}", get(tenants::get_one))
        .route("/admin/v1/tenants/{id}/quota", put(tenants::set_quota))
        .route(
            "/admin/v1/keys",
            get(tenants::list_keys).post(tenants::issue),
        )
        .route("/admin/v1/keys/{id}/revoke", post(tenants::revoke))
        .route(
            "/admin/v1/projections/rebuild",
            post(ops::rebuild_projections),
        )
}

/// A caller holding the `admin` scope, with the control plane at hand.
pub struct Admin {
    pub principal: Principal,
    pub control: Control,
}

impl Admin {
    pub fn cp(&self) -> &ControlPlane {
        &self.control.cp
    }

    /// The write's metadata: the key's name as actor, and the given reason.
    pub fn meta(&self, reason: Option<String>) -> Meta {
        meta(&self.principal.name, reason)
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let principal = Principal::from_request_parts(parts, state).await?;
        principal.require(Scope::Admin)?;
        let control = state.control().cloned().ok_or_else(|| ApiError::NotReady {
            message: "the control plane is not open yet".into(),
            retry_after: state.admission.retry_hint(),
        })?;
        Ok(Admin { principal, control })
    }
}

/// An event as the admin API shows it.
#[derive(Debug, Serialize)]
pub struct EventOut {
    pub position: i64,
    pub stream_type: String,
    pub stream_id: String,
    pub seq: u64,
    pub event_type: String,
    pub version: i32,
    pub payload: Value,
    pub actor: String,
    pub reason: Option<String>,
    pub recorded_at: String,
}

impl From<Recorded> for EventOut {
    fn from(r: Recorded) -> Self {
        EventOut {
            position: r.position.0,
            stream_type: r.stream.stream_type.0,
            stream_id: r.stream.stream_id.0,
            seq: r.seq,
            event_type: r.event_type,
            version: r.version,
            payload: r.payload,
            actor: r.actor.0,
            reason: r.reason,
            recorded_at: r
                .recorded_at
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        }
    }
}

/// What every write answers.
#[derive(Debug, Serialize)]
pub struct Written<T: Serialize> {
    pub events: Vec<EventOut>,
    pub data: T,
}

pub fn written<T: Serialize>(events: Vec<Recorded>, data: T) -> axum::Json<Written<T>> {
    axum::Json(Written {
        events: events.into_iter().map(EventOut::from).collect(),
        data,
    })
}

/// A list, OpenAI style.
#[derive(Debug, Serialize)]
pub struct List<T: Serialize> {
    pub object: &'static str,
    pub data: Vec<T>,
}

pub fn list<T: Serialize>(data: Vec<T>) -> axum::Json<List<T>> {
    axum::Json(List {
        object: "list",
        data,
    })
}

/// Body of writes that only carry a reason.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasonBody {
    #[serde(default)]
    pub reason: Option<String>,
}

/// Reasons are free text for auditors, but bounded.
pub fn check_reason(r: &Option<String>) -> Result<(), ApiError> {
    if let Some(r) = r
        && r.len() > 1024
    {
        return Err(ApiError::invalid(
            "`reason` must be at most 1024 bytes",
            "reason",
        ));
    }
    Ok(())
}

/// An id sent in a request body, parsed into its type (`DeploymentId`, ...)
/// before anything else reads it: a malformed one is a 400 naming the field.
pub fn body_id<T: FromStr<Err = IdError>>(what: &str, id: &str) -> Result<T, ApiError> {
    id.parse().map_err(|e: IdError| {
        ApiError::invalid(
            format!("`{what}`: {e}; got {:?}", crate::error::truncate(id, 64)),
            what,
        )
    })
}

/// A name that is not an id type but becomes part of one (a capacity
/// profile's workload, in its stream id): 1 to 64 of `[A-Za-z0-9._-]`.
pub fn check_name(what: &str, id: &str) -> Result<(), ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            format!(
                "`{what}` must be 1 to 64 characters of letters, digits, `.`, `_` or `-`; got {:?}",
                crate::error::truncate(id, 64)
            ),
            what,
        ))
    }
}
