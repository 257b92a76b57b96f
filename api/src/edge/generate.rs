//! One generation from admission to its end, shared by chat and completions,
//! streaming or not.
//!
//! [`start`] admits the request at the edge, submits it, and waits for the
//! engine's `Started` event, so a refusal by the engine (queue full, cannot
//! fit) still becomes an HTTP status rather than a broken stream. The
//! returned [`Running`] owns the [`Generation`] and the admission ticket: if
//! the client goes away, hyper drops the response future or body, the
//! generation's `Drop` cancels it, and the ticket's `Drop` returns capacity.

use std::time::{Duration, Instant};

use std::sync::Arc;

use stoker_executor::engine::{EngineEvent, FinishReason, Timings, Usage};
use stoker_executor::{Lane, TokenLogprob};
use tokio::sync::watch;

use crate::admission::{Demand, Ticket};
use crate::backend::{Artifact, Generation, Served};
use crate::edge::validate::Prepared;
use crate::error::ApiError;
use crate::state::AppState;

/// An admitted request that the engine has scheduled.
pub struct Running {
    handle: Generation,
    /// The edge's admission share; batch rows bypass edge admission (the
    /// engine's batch lane bounds them) and hold none.
    _ticket: Option<Ticket>,
    hard_stop: watch::Receiver<bool>,
    /// Time spent in the engine's waiting queue.
    pub queue: Duration,
    pub lane: Lane,
    pub stream: bool,
    pub include_usage: bool,
    /// The served artifact, whose tokenizer spells the tokens of log
    /// probabilities, when the request asked for them.
    pub logprobs: Option<Arc<dyn Artifact>>,
}

/// What the caller sees next.
#[derive(Debug)]
pub enum Step {
    /// Text and, when asked for, the log probabilities of the tokens that
    /// made it (text may be empty while a character or stop string is
    /// incomplete, if tokens came).
    Text {
        text: String,
        logprobs: Vec<TokenLogprob>,
    },
    Done {
        reason: FinishReason,
        usage: Usage,
        timings: Timings,
    },
    Failed(ApiError),
}

pub async fn start(
    state: &AppState,
    served: &Served,
    prepared: Prepared,
    deadline: Option<Duration>,
) -> Result<Running, ApiError> {
    let demand = Demand {
        prompt_tokens: prepared.prompt_tokens(),
        max_tokens: prepared.max_tokens(),
        deadline,
    };
    if let Some(why) = state.admission.out_of_envelope(&demand) {
        served.metrics.record_out_of_envelope(why.as_str());
    }
    let stats = served.backend.stats();
    let ticket = state.admission.admit(demand, &stats)?;
    submit(state, served, prepared, Some(ticket)).await
}

/// Submits a batch-lane row straight to the engine: edge admission is for
/// interactive traffic, and the engine's bounded batch queue refuses what it
/// cannot hold (the runner retries those rows later).
pub async fn start_batch(
    state: &AppState,
    served: &Served,
    prepared: Prepared,
) -> Result<Running, ApiError> {
    submit(state, served, prepared, None).await
}

async fn submit(
    state: &AppState,
    served: &Served,
    prepared: Prepared,
    mut ticket: Option<Ticket>,
) -> Result<Running, ApiError> {
    let lane = prepared.request.lane();
    let logprobs = prepared
        .request
        .params()
        .logprobs
        .is_some()
        .then(|| served.artifact.clone());
    tracing::debug!(
        prompt_tokens = prepared.prompt_tokens(),
        max_tokens = prepared.max_tokens(),
        stream = prepared.stream,
        tenant = %prepared.request.tenant().0,
        "admitted"
    );
    let mut handle = served
        .backend
        .submit(prepared.request)
        .map_err(|e| e.into_api(state.admission.retry_hint()))?;
    let mut hard_stop = state.hard_stop();
    let queue = tokio::select! {
            ev = handle.next() => match ev {
                Some(Ok(EngineEvent::Started { queue })) => queue,
                Some(Err(e)) => return Err(e.into_api(state.admission.retry_hint())),
                Some(Ok(other)) => {
                    return Err(ApiError::Internal(format!(
                        "engine sent {other:?} before Started"
                    )));
                }
                None => return Err(ApiError::Internal("engine dropped the request".into())),
            },
        _ = stopped(&mut hard_stop) => {
            return Err(shutdown_error(state));
        }
    };
    if let Some(t) = ticket.as_mut() {
        t.started();
    }
    Ok(Running {
        handle,
        _ticket: ticket,
        hard_stop,
        queue,
        lane,
        stream: prepared.stream,
        include_usage: prepared.include_usage,
        logprobs,
    })
}

impl Running {
    /// The executor process generating it, when another process does (the
    /// distributed mode): known once it started, after any re-routing.
    pub fn executor(&self) -> Option<String> {
        self.handle.executor()
    }
}

/// Resolves once the hard-stop flag is (or becomes) true.
pub(crate) async fn stopped(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        // The sender lives as long as the state; if it is gone, never resolve.
        std::future::pending::<()>().await;
    }
}

fn shutdown_error(state: &AppState) -> ApiError {
    ApiError::NotReady {
        message: "the server shut down before this request finished".into(),
        retry_after: state.admission.retry_hint(),
    }
}

impl Running {
    /// Next piece of output; `None` after `Done` or `Failed`.
    pub async fn next(&mut self, state: &AppState) -> Option<Step> {
        loop {
            let ev = tokio::select! {
                ev = self.handle.next() => ev,
                _ = stopped(&mut self.hard_stop) => {
                    self.handle.cancel();
                    return Some(Step::Failed(shutdown_error(state)));
                }
            };
            return match ev? {
                Ok(EngineEvent::Started { .. }) => continue,
                Ok(EngineEvent::Delta { text, logprobs, .. })
                    if text.is_empty() && logprobs.is_empty() =>
                {
                    continue;
                }
                Ok(EngineEvent::Delta { text, logprobs, .. }) => {
                    Some(Step::Text { text, logprobs })
                }
                Ok(EngineEvent::Finished {
                    reason,
                    usage,
                    timings,
                }) => Some(Step::Done {
                    reason,
                    usage,
                    timings,
                }),
                // `Generation` reports failures as `Err`.
                Ok(EngineEvent::Error(e)) => Some(Step::Failed(ApiError::from_engine(
                    e,
                    state.admission.retry_hint(),
                ))),
                Err(e) => Some(Step::Failed(e.into_api(state.admission.retry_hint()))),
            };
        }
    }
}

/// The one log line per finished request: ids, counts and timings, never text.
pub fn log_finished(id: &str, reason: FinishReason, usage: &Usage, t: &Timings) {
    tracing::info!(
        request_id = id,
        finish_reason = reason.as_str(),
        prompt_tokens = usage.prompt_tokens,
        cached_tokens = usage.cached_prompt_tokens,
        completion_tokens = usage.completion_tokens,
        queue_ms = t.queue.as_millis() as u64,
        ttft_ms = t.ttft.as_millis() as u64,
        total_ms = t.total.as_millis() as u64,
        preemptions = t.preemptions,
        "request finished"
    );
}

/// Everything a non-streaming request produced.
pub struct Collected {
    pub text: String,
    /// One per output token when the request asked for log probabilities.
    pub logprobs: Vec<TokenLogprob>,
    /// Whether it asked (an answer with no tokens still says `content: []`).
    pub asked_logprobs: bool,
    pub reason: FinishReason,
    pub usage: Usage,
    pub timings: Timings,
}

pub async fn collect(
    id: &str,
    mut run: Running,
    state: &AppState,
    served: &Served,
) -> Result<Collected, ApiError> {
    let started = Instant::now();
    let mut text = String::new();
    let mut logprobs = Vec::new();
    while let Some(step) = run.next(state).await {
        match step {
            Step::Text {
                text: t,
                logprobs: l,
            } => {
                text.push_str(&t);
                logprobs.extend(l);
            }
            Step::Done {
                reason,
                usage,
                timings,
            } => {
                served
                    .metrics
                    .record_finished(run.lane, reason.as_str(), &usage, &timings);
                log_finished(id, reason, &usage, &timings);
                return Ok(Collected {
                    text,
                    logprobs,
                    asked_logprobs: run.logprobs.is_some(),
                    reason,
                    usage,
                    timings,
                });
            }
            Step::Failed(e) => return Err(e),
        }
    }
    Err(ApiError::Internal(format!(
        "engine ended the request without a finish after {:?}",
        started.elapsed()
    )))
}
