//! Batch rows through the same code as the online routes: the body is parsed
//! by the same extractor logic, routed by the same rollout (keyed by `user`,
//! else the row's `custom_id`), validated with the same limits, and answered
//! with the same objects or error bodies. Only the lane differs: rows run in
//! the engine's batch lane, which never takes the interactive reserve and is
//! preempted first.
//!
//! A refusal for lack of room (queue full, not ready, shutting down) is not
//! an answer: the runner retries the row later, so capacity never turns into
//! error lines.

use serde_json::Value;
use stoker_controlplane::batch::runner::{BoxFuture, RowExecutor, RowOutcome, RowRequest};
use stoker_executor::Lane;
use stoker_schemas::ids::RequestId;
use stoker_schemas::openai::{ChatCompletionRequest, CompletionRequest};

use crate::edge::generate;
use crate::edge::reqlog::LogSlot;
use crate::edge::routing;
use crate::edge::validate;
use crate::error::ApiError;
use crate::http::extract;
use crate::http::routes::completions::{chat_body, completion_body};
use crate::http::sse::Envelope;
use crate::state::{AppState, unix_now};

/// The API's engine, as the shard runner sees it.
#[derive(Clone, Debug)]
pub struct EngineRows {
    state: AppState,
}

impl EngineRows {
    pub fn new(state: AppState) -> Self {
        EngineRows { state }
    }
}

impl RowExecutor for EngineRows {
    fn execute(&self, row: RowRequest) -> BoxFuture<RowOutcome> {
        let state = self.state.clone();
        Box::pin(async move { run(state, row).await })
    }
}

async fn run(state: AppState, row: RowRequest) -> RowOutcome {
    let request_id = RequestId::generate();
    let endpoint: &'static str = if row.endpoint == "/v1/completions" {
        "/v1/completions"
    } else {
        "/v1/chat/completions"
    };
    let slot = LogSlot::new(request_id.clone(), endpoint);
    slot.tenant(&row.tenant);
    let result = answer(&state, &row, &slot).await;
    let status = match &result {
        Ok(_) => 200,
        Err(e) => e.status().as_u16(),
    };
    match result {
        Err(e @ (ApiError::Overloaded { .. } | ApiError::NotReady { .. })) => {
            let after = e.retry_after().map(|r| r.0).unwrap_or_default();
            RowOutcome::Retry {
                after,
                reason: e.code().to_string(),
            }
        }
        other => {
            if let Some(c) = state.control() {
                if let Err(e) = &other {
                    slot.failed(e.code());
                }
                slot.write(&c.log, status);
            }
            let body = match other {
                Ok(v) => v,
                Err(e) => {
                    if let ApiError::Internal(detail) = &e {
                        tracing::error!(%detail, custom_id = %row.custom_id, "batch row failed");
                    }
                    serde_json::to_value(e.body()).unwrap_or(Value::Null)
                }
            };
            RowOutcome::Response {
                status_code: status,
                request_id,
                body,
            }
        }
    }
}

async fn answer(state: &AppState, row: &RowRequest, slot: &LogSlot) -> Result<Value, ApiError> {
    // The same parser as the online routes, so the same error bodies.
    let bytes = serde_json::to_vec(&row.body).map_err(|e| ApiError::Internal(e.to_string()))?;
    let chat = row.endpoint != "/v1/completions";
    let (mut target, prepared) = if chat {
        let mut req: ChatCompletionRequest = extract::parse(&bytes)?;
        // A batch row has no one to stream to.
        req.stream = None;
        req.stream_options = None;
        let key = req.user.clone().unwrap_or_else(|| row.custom_id.clone());
        let target = routing::target(state, &req.model, &key).await?;
        slot.routed(&target);
        let p = validate::chat(req, &row.tenant, &target)?;
        (target, p)
    } else {
        let mut req: CompletionRequest = extract::parse(&bytes)?;
        req.stream = None;
        req.stream_options = None;
        let key = req.user.clone().unwrap_or_else(|| row.custom_id.clone());
        let target = routing::target(state, &req.model, &key).await?;
        slot.routed(&target);
        let p = validate::completion(req, &row.tenant, &target)?;
        (target, p)
    };
    let mut prepared = prepared;
    prepared.request = prepared.request.with_lane(Lane::Batch);
    slot.admitted(Lane::Batch, prepared.prompt_tokens());
    let served = &target.served;
    let running = generate::start_batch(state, served, prepared).await?;
    slot.started(running.queue);
    if let Some(executor) = running.executor() {
        target.provenance.executor = executor;
        slot.routed(&target);
    }
    let prefix = if chat { "chatcmpl-" } else { "cmpl-" };
    let env = Envelope {
        id: format!("{prefix}{}", uuid::Uuid::new_v4().simple()),
        created: unix_now(),
        model: target.provenance.model_id.clone(),
        fingerprint: target.provenance.fingerprint.clone(),
    };
    let c = generate::collect(&env.id, running, state, served).await?;
    slot.finished(c.reason.as_str(), &c.usage, &c.timings);
    let tok = served.artifact.tokenizer();
    let v = if chat {
        serde_json::to_value(chat_body(env, c, tok))
    } else {
        serde_json::to_value(completion_body(env, c, tok))
    };
    let mut v = v.map_err(|e| ApiError::Internal(e.to_string()))?;
    // A line has no headers: it names what shaped it in its body, so a
    // scoring run can be reproduced from its output alone.
    if let Some(o) = v.as_object_mut() {
        o.insert("stoker_provenance".into(), target.provenance.to_json());
    }
    Ok(v)
}
