//! `POST /v1/chat/completions` and `POST /v1/completions`.

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use stoker_executor::Lane;
use stoker_executor::tokenizer::ModelTokenizer;
use stoker_schemas::openai::{
    ChatChoice, ChatCompletion, ChatCompletionRequest, ChatMessageOut, Completion,
    CompletionChoice, CompletionRequest,
};

use crate::admission::TenantKey;
use crate::auth::{ForInference, Scoped};
use crate::edge::generate;
use crate::edge::reqlog::LogSlot;
use crate::edge::routing::{self, Target};
use crate::edge::validate::{self, Prepared};
use crate::error::ApiError;
use crate::http::extract::ApiJson;
use crate::http::logprobs;
use crate::http::sse::{self, Envelope, Kind};
use crate::http::tool_calls::Splitter;
use crate::state::{AppState, unix_now};

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
    Scoped(principal, _): Scoped<ForInference>,
    Extension(slot): Extension<LogSlot>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    slot.tenant(&principal.tenant);
    let target = route(&state, &slot, &req.model, req.user.as_deref()).await?;
    let deadline = validate::deadline(&headers)?;
    shed(
        &state,
        &target,
        &principal.tenant,
        req.service_tier.as_deref(),
        deadline,
    )?;
    let prepared = validate::chat(req, &principal.tenant, &target)?;
    run(state.clone(), target, slot, prepared, deadline, Kind::Chat).await
}

/// Refuses an interactive request before its prompt is rendered and
/// tokenized when admission would refuse any request now: under overload,
/// refusals must cost less than the work they protect.
fn shed(
    state: &AppState,
    target: &Target,
    tenant: &str,
    tier: Option<&str>,
    deadline: Option<std::time::Duration>,
) -> Result<(), ApiError> {
    match validate::lane_of(tier) {
        Ok(Lane::Interactive) => state.admission.shed(
            &target.served.backend.stats(),
            &TenantKey::new(tenant, state.tenancy.weight(tenant)),
            deadline,
        ),
        // The batch lane skips edge admission; a bad tier is named later.
        Ok(Lane::Batch) | Err(_) => Ok(()),
    }
}

/// Picks the revision by the deployment's rollout, keyed by `user` (or the
/// request id when absent) so one user stays on one revision.
async fn route(
    state: &AppState,
    slot: &LogSlot,
    model: &str,
    user: Option<&str>,
) -> Result<Target, ApiError> {
    let key = user.unwrap_or(&slot.request_id);
    let target = routing::target(state, model, key).await?;
    slot.routed(&target);
    Ok(target)
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
    Scoped(principal, _): Scoped<ForInference>,
    Extension(slot): Extension<LogSlot>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CompletionRequest>,
) -> Result<Response, ApiError> {
    slot.tenant(&principal.tenant);
    let target = route(&state, &slot, &req.model, req.user.as_deref()).await?;
    let deadline = validate::deadline(&headers)?;
    shed(
        &state,
        &target,
        &principal.tenant,
        req.service_tier.as_deref(),
        deadline,
    )?;
    let prepared = validate::completion(req, &principal.tenant, &target)?;
    run(
        state.clone(),
        target,
        slot,
        prepared,
        deadline,
        Kind::Completion,
    )
    .await
}

async fn run(
    state: AppState,
    mut target: Target,
    slot: LogSlot,
    prepared: Prepared,
    deadline: Option<std::time::Duration>,
    kind: Kind,
) -> Result<Response, ApiError> {
    let served = &target.served;
    slot.admitted(prepared.request.lane(), prepared.prompt_tokens());
    // `service_tier: flex` rides the batch lane: the engine's bounded batch
    // queue, not edge admission, limits it, so it never takes chat capacity.
    let running = match prepared.request.lane() {
        Lane::Batch => generate::start_batch(&state, served, prepared).await?,
        Lane::Interactive => generate::start(&state, served, prepared, deadline).await?,
    };
    slot.started(running.queue);
    // In distributed mode the executor that generates the tokens answers for
    // them, in the headers and the request log, not this API process.
    if let Some(executor) = running.executor() {
        target.provenance.executor = executor;
        slot.routed(&target);
    }
    let prefix = match kind {
        Kind::Chat => "chatcmpl-",
        Kind::Completion => "cmpl-",
    };
    let env = Envelope {
        id: format!("{prefix}{}", uuid::Uuid::new_v4().simple()),
        created: unix_now(),
        model: target.provenance.model_id.clone(),
        fingerprint: target.provenance.fingerprint.clone(),
    };
    if running.stream {
        let mut resp = sse::response(running, state.clone(), kind, env, slot);
        resp.extensions_mut().insert(target.provenance);
        return Ok(resp);
    }
    let queue_ms = running.queue.as_millis() as u64;
    let estimate = running.estimated_ttft();
    let c = generate::collect(&env.id, running, &state, served).await?;
    slot.finished(c.reason.as_str(), &c.usage, &c.timings);
    let tok = served.artifact.clone();
    let mut resp = match kind {
        Kind::Chat => axum::Json(chat_body(env, c, tok.tokenizer())).into_response(),
        Kind::Completion => axum::Json(completion_body(env, c, tok.tokenizer())).into_response(),
    };
    resp.headers_mut()
        .insert("x-stoker-queue-ms", HeaderValue::from(queue_ms));
    if let Some(e) = estimate {
        resp.headers_mut()
            .insert(sse::TTFT_ESTIMATE_HEADER, sse::ttft_estimate_value(e));
    }
    resp.extensions_mut().insert(target.provenance);
    Ok(resp)
}

/// The `chat.completion` object of a finished request; `tok` spells its
/// log probabilities, if it has them.
pub fn chat_body(env: Envelope, c: generate::Collected, tok: &ModelTokenizer) -> ChatCompletion {
    let asked = c.asked_logprobs;
    ChatCompletion {
        id: env.id,
        object: "chat.completion".into(),
        created: env.created,
        model: env.model,
        system_fingerprint: env.fingerprint,
        choices: c
            .choices
            .into_iter()
            .enumerate()
            .map(|(i, ch)| {
                let logprobs = asked.then(|| logprobs::chat(tok, &ch.logprobs));
                let Some(mode) = &c.tools else {
                    return ChatChoice {
                        index: i as u32,
                        logprobs,
                        message: ChatMessageOut {
                            role: "assistant".into(),
                            content: Some(ch.text),
                            tool_calls: None,
                        },
                        finish_reason: ch.reason.as_str().to_string(),
                    };
                };
                let mut split = Splitter::new(mode.clone());
                let mut content = split.push(&ch.text);
                let ended = split.finish();
                content.push_str(&ended.content);
                let called = !ended.calls.is_empty();
                let content = if called {
                    Some(content.trim().to_string()).filter(|t| !t.is_empty())
                } else {
                    Some(content)
                };
                ChatChoice {
                    index: i as u32,
                    logprobs,
                    message: ChatMessageOut {
                        role: "assistant".into(),
                        content,
                        tool_calls: called.then_some(ended.calls),
                    },
                    finish_reason: Splitter::finish_reason(mode, ch.reason, called).to_string(),
                }
            })
            .collect(),
        usage: sse::usage_of(&c.usage),
    }
}

/// The `text_completion` object of a finished request; `tok` spells its
/// log probabilities, if it has them.
pub fn completion_body(env: Envelope, c: generate::Collected, tok: &ModelTokenizer) -> Completion {
    let asked = c.asked_logprobs;
    Completion {
        id: env.id,
        object: "text_completion".into(),
        created: env.created,
        model: env.model,
        system_fingerprint: env.fingerprint,
        choices: c
            .choices
            .into_iter()
            .enumerate()
            .map(|(i, ch)| {
                let mut offset = 0;
                let (text, logprobs) = match &c.echo {
                    None => (
                        ch.text,
                        asked.then(|| logprobs::completion(tok, &ch.logprobs, &mut offset)),
                    ),
                    Some((echo, scores)) => (
                        format!("{}{}", echo.text, ch.text),
                        asked.then(|| {
                            let prompt =
                                logprobs::echoed_prompt(tok, &echo.ids, scores, &mut offset);
                            let out = logprobs::completion(tok, &ch.logprobs, &mut offset);
                            logprobs::concat(prompt, out)
                        }),
                    ),
                };
                CompletionChoice {
                    index: i as u32,
                    logprobs,
                    text,
                    finish_reason: Some(ch.reason.as_str().to_string()),
                }
            })
            .collect(),
        usage: Some(Some(sse::usage_of(&c.usage))),
    }
}
