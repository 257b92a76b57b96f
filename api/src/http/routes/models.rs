//! `GET /v1/models`: the served model with its revision.

use axum::Json;
use axum::extract::{Path, State};
use stoker_schemas::openai::{ModelCard, ModelList};

use crate::auth::{ForInference, Scoped};
use crate::backend::Served;
use crate::error::ApiError;
use crate::state::AppState;

fn card(s: &Served) -> ModelCard {
    ModelCard {
        id: s.provenance.model_id.clone(),
        object: "model".into(),
        created: s.created,
        owned_by: "stoker".into(),
        revision: s.provenance.revision.clone(),
        sha256: s.provenance.sha256.clone(),
        max_model_len: s.limits.context_window as u64,
    }
}

/// List the models this server serves, each with its revision.
#[utoipa::path(get, path = "/v1/models", tag = "openai",
    responses((status = 200, body = ModelList),
        (status = 401, body = stoker_schemas::error::ErrorBody),
        (status = 503, description = "Still loading", body = stoker_schemas::error::ErrorBody)))]
pub async fn list_models(
    State(state): State<AppState>,
    _: Scoped<ForInference>,
) -> Result<Json<ModelList>, ApiError> {
    let s = state.served().ok_or_else(|| not_loaded(&state))?;
    Ok(Json(ModelList {
        object: "list".into(),
        data: vec![card(s)],
    }))
}

/// One model by id.
#[utoipa::path(get, path = "/v1/models/{id}", tag = "openai",
    params(("id" = String, Path, description = "Model id")),
    responses((status = 200, body = ModelCard),
        (status = 404, body = stoker_schemas::error::ErrorBody)))]
pub async fn get_model(
    State(state): State<AppState>,
    _: Scoped<ForInference>,
    Path(id): Path<String>,
) -> Result<Json<ModelCard>, ApiError> {
    let s = state.served().ok_or_else(|| not_loaded(&state))?;
    if id == s.provenance.model_id || id == s.provenance.revision {
        Ok(Json(card(s)))
    } else {
        Err(ApiError::ModelNotFound(id.chars().take(128).collect()))
    }
}

fn not_loaded(state: &AppState) -> ApiError {
    ApiError::NotReady {
        message: "the model is still loading".into(),
        retry_after: state.admission.retry_hint(),
    }
}
