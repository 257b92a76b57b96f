//! Rollouts: start a canary from the serving revision to another, then
//! advance, pause, resume, roll back (reason required) or complete it.

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use stoker_controlplane::service::RolloutAction;
use stoker_schemas::events::SloGates;
use stoker_schemas::ids::{DeploymentId, RevisionId, RolloutId};

use super::{Admin, ReasonBody, body_id, check_reason, written};
use crate::error::ApiError;
use crate::http::extract::{ApiJson, ApiPath, ApiQuery, OptJson};
use crate::http::path_id::PathId;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRollout {
    pub to_revision: String,
    /// Percent of traffic on the new revision at each step; the last is 100.
    #[serde(default = "default_steps")]
    pub steps: Vec<u8>,
    /// With gates the rollout controller drives it; without, it is manual.
    #[serde(default)]
    pub gates: Option<SloGates>,
    #[serde(default)]
    pub reason: Option<String>,
}

fn default_steps() -> Vec<u8> {
    vec![5, 25, 50, 100]
}

fn no_gates() -> SloGates {
    SloGates {
        ttft_p99_ms: None,
        max_error_rate: None,
        max_overload_rate: None,
        min_requests: 20,
    }
}

pub async fn start(
    admin: Admin,
    PathId(id): PathId<DeploymentId>,
    ApiJson(body): ApiJson<StartRollout>,
) -> Result<Response, ApiError> {
    let to_revision: RevisionId = body_id("to_revision", &body.to_revision)?;
    check_reason(&body.reason)?;
    let gates = body.gates.unwrap_or_else(no_gates);
    let (rollout_id, events) = admin
        .cp()
        .start_rollout(
            &id,
            &to_revision,
            body.steps,
            gates,
            &admin.meta(body.reason),
        )
        .await?;
    let r = admin.cp().rollout(&rollout_id).await?;
    let mut resp = written(events, r).into_response();
    *resp.status_mut() = axum::http::StatusCode::CREATED;
    Ok(resp)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    #[serde(default)]
    pub deployment: Option<String>,
    /// Only running or paused ones.
    #[serde(default)]
    pub active: Option<bool>,
}

pub async fn list(admin: Admin, ApiQuery(p): ApiQuery<ListParams>) -> Response {
    let v = admin.cp().views().await;
    let data = v
        .rollouts
        .values()
        .filter(|r| p.deployment.as_ref().is_none_or(|d| *d == r.deployment_id))
        .filter(|r| !p.active.unwrap_or(false) || r.status.is_active())
        .cloned()
        .collect();
    super::list(data).into_response()
}

pub async fn get_one(admin: Admin, PathId(id): PathId<RolloutId>) -> Result<Response, ApiError> {
    Ok(Json(admin.cp().rollout(&id).await?).into_response())
}

pub async fn act(
    admin: Admin,
    ApiPath((id, action)): ApiPath<(String, String)>,
    OptJson(body): OptJson<ReasonBody>,
) -> Result<Response, ApiError> {
    check_reason(&body.reason)?;
    let action = match action.as_str() {
        "advance" => RolloutAction::Advance(None),
        "pause" => RolloutAction::Pause,
        "resume" => RolloutAction::Resume,
        "rollback" | "roll-back" | "roll_back" => RolloutAction::RollBack(None),
        "complete" => RolloutAction::Complete,
        other => {
            return Err(ApiError::RouteNotFound(format!(
                "/admin/v1/rollouts/{{id}}/{}: the action must be advance, pause, resume, rollback or complete",
                crate::error::truncate(other, 32)
            )));
        }
    };
    let id: RolloutId = crate::http::path_id::parse(&id)?;
    let events = admin
        .cp()
        .rollout_action(&id, action, &admin.meta(body.reason))
        .await?;
    let r = admin.cp().rollout(&id).await?;
    Ok(written(events, r).into_response())
}
