//! `POST /tokenize` and `POST /detokenize` in vLLM's shape: a client counts and
//! checks tokens exactly as the generation routes will see them, without
//! generating (and without taking a place in the queue).

use axum::Json;
use axum::extract::State;
use stoker_schemas::openai::{
    DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse,
};

use crate::auth::{ForInference, Scoped};
use crate::edge::routing::{self, Target};
use crate::edge::validate;
use crate::error::ApiError;
use crate::http::extract::ApiJson;
use crate::state::AppState;

/// Most token ids one `/detokenize` call takes.
pub const MAX_DETOKENIZE_TOKENS: usize = 1 << 20;

async fn target_for(state: &AppState, model: Option<&str>) -> Result<Target, ApiError> {
    let model = match model {
        Some(m) => m.to_string(),
        None => state
            .served()
            .map(|s| s.provenance.model_id.clone())
            .ok_or_else(|| ApiError::NotReady {
                message: "the model is still loading".into(),
                retry_after: state.admission.retry_hint(),
            })?,
    };
    routing::target(state, &model, "tokenize").await
}

/// Tokenize a prompt, or a conversation rendered with the model's chat template.
#[utoipa::path(post, path = "/tokenize", tag = "stoker",
    request_body = TokenizeRequest,
    responses((status = 200, body = TokenizeResponse),
        (status = 400, description = "Neither or both of prompt and messages, or a bad message", body = stoker_schemas::error::ErrorBody),
        (status = 401, body = stoker_schemas::error::ErrorBody),
        (status = 403, body = stoker_schemas::error::ErrorBody),
        (status = 404, description = "Unknown model", body = stoker_schemas::error::ErrorBody),
        (status = 413, body = stoker_schemas::error::ErrorBody),
        (status = 503, description = "Still loading", body = stoker_schemas::error::ErrorBody)))]
pub async fn tokenize(
    State(state): State<AppState>,
    _: Scoped<ForInference>,
    ApiJson(req): ApiJson<TokenizeRequest>,
) -> Result<Json<TokenizeResponse>, ApiError> {
    let t = target_for(&state, req.model.as_deref()).await?;
    let tok = t.served.artifact.tokenizer();
    let tokens = match (&req.prompt, &req.messages) {
        (Some(p), None) => {
            let add = req.add_special_tokens.unwrap_or(true);
            validate::encode_prompt(tok, p, add)?
        }
        (None, Some(m)) => {
            let mut ids =
                validate::chat_prompt(m, req.add_generation_prompt.unwrap_or(true), None, &t)?;
            if req.add_special_tokens == Some(true)
                && let Some(bos) = tok.bos_token_id()
                && ids.first() != Some(&bos)
            {
                ids.insert(0, bos);
            }
            ids
        }
        _ => {
            return Err(ApiError::invalid(
                "give exactly one of `prompt` and `messages`",
                "prompt",
            ));
        }
    };
    let token_strs = req.return_token_strs.unwrap_or(false).then(|| {
        tokens
            .iter()
            .map(|&id| tok.id_to_token(id).unwrap_or_default())
            .collect()
    });
    Ok(Json(TokenizeResponse {
        count: tokens.len(),
        max_model_len: t.limits.context_window,
        tokens,
        token_strs,
    }))
}

/// Turn token ids back into text (special tokens included).
#[utoipa::path(post, path = "/detokenize", tag = "stoker",
    request_body = DetokenizeRequest,
    responses((status = 200, body = DetokenizeResponse),
        (status = 400, description = "A token id outside the vocabulary, or too many ids", body = stoker_schemas::error::ErrorBody),
        (status = 401, body = stoker_schemas::error::ErrorBody),
        (status = 403, body = stoker_schemas::error::ErrorBody),
        (status = 404, description = "Unknown model", body = stoker_schemas::error::ErrorBody),
        (status = 413, body = stoker_schemas::error::ErrorBody),
        (status = 503, description = "Still loading", body = stoker_schemas::error::ErrorBody)))]
pub async fn detokenize(
    State(state): State<AppState>,
    _: Scoped<ForInference>,
    ApiJson(req): ApiJson<DetokenizeRequest>,
) -> Result<Json<DetokenizeResponse>, ApiError> {
    if req.tokens.len() > MAX_DETOKENIZE_TOKENS {
        return Err(ApiError::invalid(
            format!("at most {MAX_DETOKENIZE_TOKENS} token ids per call"),
            "tokens",
        ));
    }
    let t = target_for(&state, req.model.as_deref()).await?;
    let ids = validate::token_ids(&req.tokens, t.limits.vocab_size, "tokens")?;
    let prompt = t
        .served
        .artifact
        .tokenizer()
        .decode(&ids, false)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(Json(DetokenizeResponse { prompt }))
}
