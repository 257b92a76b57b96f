//! Deployments and their revisions: create, change limits, retire, pick the
//! serving revision, register a revision (verifying its artifact), history.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use stoker_controlplane::domain::ArtifactCheck;
use stoker_controlplane::projection::{
    CapacityProfileView, DeploymentView, RevisionView, RolloutView, Views,
};
use stoker_controlplane::service::RevisionSpec;
use stoker_controlplane::store::{AuditQuery, Position};
use stoker_schemas::events::DeploymentLimits;
use stoker_schemas::ids::{DeploymentId, RevisionId};

use super::{Admin, ReasonBody, body_id, check_reason, written};
use crate::backend::default_revision_id;
use crate::control::{self, check_artifact, default_limits, path_of, runtime_version};
use crate::error::ApiError;
use crate::http::extract::{ApiJson, ApiQuery, OptJson};
use crate::http::path_id::PathId;
use crate::state::AppState;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateDeployment {
    pub id: String,
    /// Defaults to what the primary model serves.
    #[serde(default)]
    pub limits: Option<DeploymentLimits>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// A deployment with what hangs off it.
#[derive(Debug, Serialize)]
pub struct DeploymentDetail {
    #[serde(flatten)]
    pub deployment: DeploymentView,
    pub revisions: Vec<RevisionView>,
    pub rollout: Option<RolloutView>,
    pub capacity_profiles: Vec<CapacityProfileView>,
}

fn detail(v: &Views, id: &str) -> Result<DeploymentDetail, ApiError> {
    let d = v.deployments.get(id).ok_or_else(|| not_found(id))?;
    Ok(DeploymentDetail {
        deployment: d.clone(),
        revisions: v.revisions_of(id).cloned().collect(),
        rollout: v.active_rollout(id).cloned(),
        capacity_profiles: v
            .capacity_profiles
            .values()
            .filter(|p| p.deployment_id == id)
            .cloned()
            .collect(),
    })
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound {
        message: format!("deployment {id:?} does not exist"),
        code: stoker_schemas::codes::ErrorCode::NotFound,
    }
}

pub async fn list(admin: Admin) -> Response {
    let v = admin.cp().views().await;
    super::list(v.deployments.values().cloned().collect()).into_response()
}

pub async fn get_one(admin: Admin, PathId(id): PathId<DeploymentId>) -> Result<Response, ApiError> {
    let v = admin.cp().views().await;
    Ok(Json(detail(&v, &id)?).into_response())
}

pub async fn create(
    State(state): State<AppState>,
    admin: Admin,
    ApiJson(body): ApiJson<CreateDeployment>,
) -> Result<Response, ApiError> {
    let id: DeploymentId = body_id("id", &body.id)?;
    check_reason(&body.reason)?;
    let limits = match body.limits {
        Some(l) => l,
        None => {
            let primary = state.ready()?;
            default_limits(&state.config, &primary.limits)
        }
    };
    let events = admin
        .cp()
        .create_deployment(&id, limits, &admin.meta(body.reason))
        .await?;
    let v = admin.cp().views().await;
    let mut resp = written(events, detail(&v, &id)?).into_response();
    *resp.status_mut() = axum::http::StatusCode::CREATED;
    Ok(resp)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeLimits {
    pub limits: DeploymentLimits,
    #[serde(default)]
    pub reason: Option<String>,
}

pub async fn change_limits(
    admin: Admin,
    PathId(id): PathId<DeploymentId>,
    ApiJson(body): ApiJson<ChangeLimits>,
) -> Result<Response, ApiError> {
    check_reason(&body.reason)?;
    let events = admin
        .cp()
        .change_limits(&id, body.limits, &admin.meta(body.reason))
        .await?;
    let v = admin.cp().views().await;
    Ok(written(events, detail(&v, &id)?).into_response())
}

pub async fn retire(
    admin: Admin,
    PathId(id): PathId<DeploymentId>,
    OptJson(body): OptJson<ReasonBody>,
) -> Result<Response, ApiError> {
    check_reason(&body.reason)?;
    let events = admin
        .cp()
        .retire_deployment(&id, &admin.meta(body.reason))
        .await?;
    let v = admin.cp().views().await;
    Ok(written(events, detail(&v, &id)?).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetServing {
    pub revision_id: RevisionId,
    #[serde(default)]
    pub reason: Option<String>,
}

pub async fn set_serving(
    admin: Admin,
    PathId(id): PathId<DeploymentId>,
    ApiJson(body): ApiJson<SetServing>,
) -> Result<Response, ApiError> {
    let revision = body.revision_id;
    check_reason(&body.reason)?;
    let events = admin
        .cp()
        .set_serving_revision(&id, &revision, &admin.meta(body.reason))
        .await?;
    let v = admin.cp().views().await;
    Ok(written(events, detail(&v, &id)?).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PageParams {
    #[serde(default)]
    pub cursor: Option<String>,
    #[serde(default)]
    pub limit: Option<u32>,
}

pub async fn history(
    admin: Admin,
    PathId(id): PathId<DeploymentId>,
    ApiQuery(p): ApiQuery<PageParams>,
) -> Result<Response, ApiError> {
    if !admin
        .cp()
        .views()
        .await
        .deployments
        .contains_key(id.as_str())
    {
        return Err(not_found(&id));
    }
    let q = AuditQuery {
        deployment: Some(id.into_string()),
        after: p
            .cursor
            .as_deref()
            .map(Position::parse_cursor)
            .transpose()?,
        limit: p.limit.unwrap_or(0),
        ..AuditQuery::default()
    };
    Ok(Json(super::ops::page_out(admin.cp().audit(&q).await?)).into_response())
}

pub async fn list_revisions(
    admin: Admin,
    PathId(id): PathId<DeploymentId>,
) -> Result<Response, ApiError> {
    let v = admin.cp().views().await;
    if !v.deployments.contains_key(id.as_str()) {
        return Err(not_found(&id));
    }
    Ok(super::list(v.revisions_of(&id).cloned().collect()).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterRevision {
    /// Defaults to the first 12 hex digits of `model_sha256`.
    #[serde(default)]
    pub revision_id: Option<String>,
    /// `file:///abs/path.gguf`, a model directory, or a path on the server.
    pub model_uri: String,
    /// What the artifact must hash to (hex): a file's sha256, or a
    /// directory's manifest digest (`stoker inspect DIR`); registration checks it.
    pub model_sha256: String,
    #[serde(default)]
    pub reason: Option<String>,
}

/// Registers a revision after checking its artifact: the file must exist, hash
/// to `model_sha256`, and load as a model. In `stoker serve` the artifact is
/// then loaded next to the primary (or shared with it when the hash is the
/// same), so a rollout to it can serve at once.
pub async fn register_revision(
    State(state): State<AppState>,
    admin: Admin,
    PathId(id): PathId<DeploymentId>,
    ApiJson(body): ApiJson<RegisterRevision>,
) -> Result<Response, ApiError> {
    check_reason(&body.reason)?;
    if body.model_uri.is_empty() || body.model_uri.len() > 4096 {
        return Err(ApiError::invalid(
            "`model_uri` must be 1 to 4096 bytes",
            "model_uri",
        ));
    }
    // Only model artifacts are read: an admin key must not become a way to
    // hash arbitrary files on the server. A directory is hashed over the
    // model files it holds (config, tokenizer, safetensors) and nothing else.
    let is_dir = path_of(&body.model_uri).is_dir();
    if !is_dir && !body.model_uri.to_ascii_lowercase().ends_with(".gguf") {
        return Err(ApiError::invalid(
            "`model_uri` must name a `.gguf` file or a Hugging Face model directory",
            "model_uri",
        ));
    }
    if !admin
        .cp()
        .views()
        .await
        .deployments
        .contains_key(id.as_str())
    {
        return Err(not_found(&id));
    }
    let sha = body.model_sha256.to_ascii_lowercase();
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::invalid(
            "`model_sha256` must be 64 hex digits",
            "model_sha256",
        ));
    }
    let revision_id: RevisionId = match &body.revision_id {
        Some(r) => body_id("revision_id", r)?,
        None => body_id("revision_id", &default_revision_id(&sha))?,
    };
    let path = path_of(&body.model_uri);
    let check = check_artifact(&path).await;
    let mut spec = RevisionSpec {
        deployment_id: id.clone(),
        revision_id: revision_id.clone(),
        model_uri: control::file_uri(&path),
        model_sha256: sha.clone(),
        tokenizer_hash: String::new(),
        chat_template_hash: String::new(),
        chat_template_origin: None,
        precision: String::new(),
        runtime_version: runtime_version(),
    };
    // Only a verified artifact is loaded; any other check result goes to the
    // aggregate, which refuses it with its typed error and records nothing.
    if matches!(&check, ArtifactCheck::Verified { sha256 } if *sha256 == sha) {
        let served = crate::edge::artifacts::load_artifact(&state, &path)
            .await
            .map_err(|e| ApiError::invalid(format!("{e:#}"), "model_uri"))?;
        let ident = &served.artifact.info().identity;
        spec.tokenizer_hash = ident.tokenizer_sha256.clone();
        spec.chat_template_hash = ident.chat_template_sha256.clone();
        spec.chat_template_origin = Some(served.artifact.chat_template().origin().to_owned());
        spec.precision = ident.precision.clone();
    }
    let events = admin
        .cp()
        .register_revision(spec, check, &admin.meta(body.reason))
        .await?;
    let v = admin.cp().views().await;
    let rev = v
        .revisions
        .get(&Views::revision_key(&id, &revision_id))
        .cloned();
    let mut resp = written(events, rev).into_response();
    *resp.status_mut() = axum::http::StatusCode::CREATED;
    Ok(resp)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrafficParams {
    /// RFC 3339; default: the start of the active (or latest) rollout, else
    /// the last hour.
    #[serde(default)]
    pub since: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TrafficRow {
    pub revision_id: String,
    pub requests: u64,
}

/// Requests per revision from the request log: what a canary actually got.
pub async fn traffic(
    admin: Admin,
    PathId(id): PathId<DeploymentId>,
    ApiQuery(p): ApiQuery<TrafficParams>,
) -> Result<Response, ApiError> {
    let since = match &p.since {
        Some(s) => chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(|e| ApiError::invalid(format!("`since`: {e}"), "since"))?,
        None => {
            let v = admin.cp().views().await;
            if !v.deployments.contains_key(id.as_str()) {
                return Err(not_found(&id));
            }
            v.rollouts
                .values()
                .filter(|r| r.deployment_id == id)
                .map(|r| r.started_at)
                .max()
                .unwrap_or_else(|| chrono::Utc::now() - chrono::Duration::hours(1))
        }
    };
    let log = &admin.control.log;
    log.flush()
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let rows = log
        .split(&id, since)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(super::list(
        rows.into_iter()
            .map(|(revision_id, requests)| TrafficRow {
                revision_id,
                requests,
            })
            .collect(),
    )
    .into_response())
}
