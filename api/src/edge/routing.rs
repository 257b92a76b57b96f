//! Routing a request to a revision: the deployment its `model` names, the
//! rollout's split by routing key, the loaded artifact that serves the
//! revision, and the deployment's limits over the model's. Reads only
//! in-memory read models: no database round trip sits on the request path.

use std::sync::Arc;

use stoker_controlplane::projection::Views;
use stoker_controlplane::service::{RouteError, route_in};
use stoker_executor::RequestLimits;
use stoker_schemas::ids::{DeploymentId, RolloutId};

use crate::backend::{Provenance, Served};
use crate::error::ApiError;
use crate::state::AppState;

/// Where one request goes: the loaded artifact, the revision's provenance, and
/// the deployment's limits applied over the model's.
#[derive(Clone)]
pub struct Target {
    pub served: Arc<Served>,
    pub provenance: Provenance,
    pub limits: RequestLimits,
    pub deployment_id: DeploymentId,
    pub rollout_id: Option<RolloutId>,
}

fn clamp(model: usize, deployment: u32) -> usize {
    if deployment == 0 {
        model
    } else {
        model.min(deployment as usize)
    }
}

/// Routes a request for `model` (a deployment id; the primary model's id,
/// revision or sha256 name the default deployment) with routing key `key`.
pub async fn target(state: &AppState, model: &str, key: &str) -> Result<Target, ApiError> {
    let primary = state.ready()?;
    let Some(c) = state.control() else {
        return Err(ApiError::Internal("the control plane is not open".into()));
    };
    let views = c.cp.projector().views().await;
    let p = &primary.provenance;
    let dep = if views.deployments.contains_key(model) {
        model
    } else if model == p.model_id || model == p.revision || model == p.sha256 {
        c.deployment_id.as_str()
    } else {
        return Err(ApiError::ModelNotFound(crate::error::truncate(model, 128)));
    };
    let decision = route_in(&views, dep, key).map_err(|e| match e {
        RouteError::UnknownDeployment | RouteError::Retired => {
            ApiError::ModelNotFound(crate::error::truncate(model, 128))
        }
        RouteError::NoServingRevision => ApiError::NotReady {
            message: format!("deployment `{dep}` has no serving revision yet"),
            retry_after: state.admission.retry_hint(),
        },
    })?;
    let rev = views
        .revisions
        .get(&Views::revision_key(dep, &decision.revision_id))
        .ok_or_else(|| {
            ApiError::Internal(format!(
                "deployment {dep} routes to unregistered revision {}",
                decision.revision_id
            ))
        })?;
    let served = state
        .model_by_sha(&rev.model_sha256)
        .ok_or_else(|| ApiError::NotReady {
            message: format!(
                "revision `{}` of deployment `{dep}` is not loaded on this server",
                decision.revision_id
            ),
            retry_after: state.admission.retry_hint(),
        })?;
    let d = &views.deployments[dep];
    let mut limits = served.limits;
    limits.context_window = clamp(limits.context_window, d.limits.context_window);
    limits.max_input_tokens = clamp(limits.max_input_tokens, d.limits.max_input_tokens);
    limits.max_output_tokens = clamp(limits.max_output_tokens, d.limits.max_output_tokens);
    let provenance = Provenance::of_revision(
        &served.provenance,
        dep.to_owned(),
        decision.revision_id.to_string(),
    );
    Ok(Target {
        served,
        provenance,
        limits,
        deployment_id: decision.deployment_id,
        rollout_id: decision.rollout_id,
    })
}
