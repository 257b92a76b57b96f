//! `POST /v1/chat/completions` and `POST /v1/completions`.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use stoker_schemas::openai::{
    ChatChoice, ChatCompletion, ChatCompletionRequest, ChatMessageOut, Completion,
    CompletionChoice, CompletionRequest,
};

use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::extract::ApiJson;
use crate::generate;
use crate::sse::{self, Envelope, Kind};
use crate::state::{AppState, unix_now};
use crate::validate::{self, Prepared};

/// Create a chat completion (streaming with `stream: true`).
#[utoipa::path(
    post,
    path = "/v1/chat/completions",
    tag = "openai",
    request_body = ChatCompletionRequest,
    params(("x-stoker-deadline-ms" = Option<u64>, Header,
        description = "Refuse at once (503 deadline_infeasible) if the first token cannot come within this many ms")),
    responses(
        (status = 200, description = "A completion, or an SSE stream of chunks when `stream` is true",
            content(
                (ChatCompletion = "application/json"),
                (stoker_schemas::openai::ChatCompletionChunk = "text/event-stream"),
            )),
        (status = 400, description = "Invalid request", body = stoker_schemas::error::ErrorBody),
        (status = 401, description = "Missing or bad API key", body = stoker_schemas::error::ErrorBody),
        (status = 403, description = "Key lacks the inference scope", body = stoker_schemas::error::ErrorBody),
        (status = 404, description = "Unknown model", body = stoker_schemas::error::ErrorBody),
        (status = 413, description = "Body too large", body = stoker_schemas::error::ErrorBody),
        (status = 503, description = "Overloaded, deadline infeasible or not ready; see Retry-After", body = stoker_schemas::error::ErrorBody),
    )
)]
pub async fn chat_completions(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    principal.require(Scope::Inference)?;
    let served = state.ready()?;
    let deadline = validate::deadline(&headers)?;
    let prepared = validate::chat(req, &principal.tenant, served)?;
    run(state.clone(), prepared, deadline, Kind::Chat).await
}

/// Create a text completion (streaming with `stream: true`).
#[utoipa::path(
    post,
    path = "/v1/completions",
    tag = "openai",
    request_body = CompletionRequest,
    params(("x-stoker-deadline-ms" = Option<u64>, Header,
        description = "Refuse at once (503 deadline_infeasible) if the first token cannot come within this many ms")),
    responses(
        (status = 200, description = "A completion, or an SSE stream of completion chunks when `stream` is true",
            content(
                (Completion = "application/json"),
                (Completion = "text/event-stream"),
            )),
        (status = 400, description = "Invalid request", body = stoker_schemas::error::ErrorBody),
        (status = 401, description = "Missing or bad API key", body = stoker_schemas::error::ErrorBody),
        (status = 404, description = "Unknown model", body = stoker_schemas::error::ErrorBody),
        (status = 413, description = "Body too large", body = stoker_schemas::error::ErrorBody),
        (status = 503, description = "Overloaded, deadline infeasible or not ready; see Retry-After", body = stoker_schemas::error::ErrorBody),
    )
)]
pub async fn completions(
    State(state): State<AppState>,
    principal: Principal,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    principal.require(Scope::Inference)?;
    let served = state.ready()?;
    let deadline = validate::deadline(&headers)?;
    let prepared = validate::completion(req, &principal.tenant, served)?;
    run(state.clone(), prepared, deadline, Kind::Completion).await
}

async fn run(
    state: AppState,
    prepared: Prepared,
    deadline: Option<std::time::Duration>,
    kind: Kind,
) -> Result<Response, ApiError> {
    let served = state.ready()?;
    let running = generate::start(&state, served, prepared, deadline).await?;
    let prefix = match kind {
        Kind::Chat => "chatcmpl-",
        Kind::Completion => "cmpl-",
    };
    let env = Envelope {
        id: format!("{prefix}{}", uuid::Uuid::new_v4().simple()),
        created: unix_now(),
        model: served.provenance.model_id.clone(),
        fingerprint: served.provenance.fingerprint.clone(),
    };
    if running.stream {
        return Ok(sse::response(running, state.clone(), kind, env));
    }
    let queue_ms = running.queue.as_millis() as u64;
    let c = generate::collect(&env.id, running, &state, served).await?;
    let usage = sse::usage_of(&c.usage);
    let reason = c.reason.as_str().to_string();
    let mut resp = match kind {
        Kind::Chat => axum::Json(ChatCompletion {
            id: env.id,
            object: "chat.completion".into(),
            created: env.created,
            model: env.model,
            system_fingerprint: env.fingerprint,
            choices: vec![ChatChoice {
                index: 0,
                message: ChatMessageOut {
                    role: "assistant".into(),
                    content: c.text,
                },
                finish_reason: reason,
                logprobs: None,
            }],
            usage,
        })
        .into_response(),
        Kind::Completion => axum::Json(Completion {
            id: env.id,
            object: "text_completion".into(),
            created: env.created,
            model: env.model,
            system_fingerprint: env.fingerprint,
            choices: vec![CompletionChoice {
                index: 0,
                text: c.text,
                finish_reason: Some(reason),
                logprobs: None,
            }],
            usage: Some(Some(usage)),
        })
        .into_response(),
    };
    resp.headers_mut()
        .insert("x-stoker-queue-ms", HeaderValue::from(queue_ms));
    Ok(resp)
}
