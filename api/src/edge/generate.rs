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

use crate::admission::{Demand, TenantKey, Ticket};
use crate::backend::{Artifact, Generation, Served};
use crate::edge::tools::ToolMode;
use crate::edge::validate::{Echo, Prepared};
use crate::error::ApiError;
use crate::state::AppState;
use crate::tenancy::Permit;

/// An admitted request that the engine has scheduled: one generation per
/// choice (`n`).
pub struct Running {
    handles: Vec<Generation>,
    /// Which choices have ended.
    ended: Vec<bool>,
    /// The edge's admission share; batch rows bypass edge admission (the
    /// engine's batch lane bounds them) and hold none.
    ticket: Option<Ticket>,
    /// The request's place in its tenant's quotas, when the tenant has one.
    quota: Option<Permit>,
    /// Prompt tokens, charged to the quota with the output when it ends.
    prompt_tokens: usize,
    /// Output tokens of the choices that finished.
    generated: usize,
    hard_stop: watch::Receiver<bool>,
    /// Time spent in the engine's waiting queue.
    pub queue: Duration,
    pub lane: Lane,
    pub stream: bool,
    pub include_usage: bool,
    /// The served artifact, whose tokenizer spells the tokens of log
    /// probabilities, when the request asked for them.
    pub logprobs: Option<Arc<dyn Artifact>>,
    /// How each choice's output is read as tool calls.
    pub tools: Option<ToolMode>,
    /// The prompt to put before each choice's output.
    pub echo: Option<Echo>,
}

/// What the caller sees next, of choice `index`.
#[derive(Debug)]
pub struct ChoiceStep {
    pub index: usize,
    pub step: Step,
}

/// What the caller sees next of one choice.
#[derive(Debug)]
pub enum Step {
    /// The prompt's scores (one per token after the first), before any
    /// text, when the request echoes it with log probabilities.
    Prompt(Vec<TokenLogprob>),
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
    let tenant = prepared.request.tenant().0.clone();
    let demand = Demand {
        prompt_tokens: prepared.prompt_tokens(),
        max_tokens: prepared.max_tokens(),
        deadline,
        tenant: TenantKey::new(&tenant, state.tenancy.weight(&tenant)),
    };
    if let Some(why) = state.admission.out_of_envelope(&demand) {
        served.metrics.record_out_of_envelope(why.as_str());
    }
    // The tenant's quotas first: a tenant over its own budget is refused
    // whatever the server's load.
    let quota = state
        .tenancy
        .admit(&tenant, (demand.prompt_tokens + demand.max_tokens) as u64)?;
    let stats = served.backend.stats();
    let ticket = state.admission.admit(demand, &stats)?;
    let mut running = submit(state, served, prepared, Some(ticket)).await?;
    running.quota = quota;
    Ok(running)
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
    mut prepared: Prepared,
    mut ticket: Option<Ticket>,
) -> Result<Running, ApiError> {
    // The engine shares each lane between tenants by these weights.
    let weight = state.tenancy.weight(&prepared.request.tenant().0);
    prepared.request = prepared.request.with_tenant_weight(weight);
    let lane = prepared.request.lane();
    let prompt_tokens = prepared.prompt_tokens();
    let tools = prepared.tools.clone();
    let echo = prepared.echo.clone();
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
    let mut handles = if prepared.n == 1 {
        served.backend.submit(prepared.request).map(|g| vec![g])
    } else {
        served.backend.submit_n(prepared.request, prepared.n)
    }
    .map_err(|e| e.into_api(state.admission.retry_hint()))?;
    let mut hard_stop = state.hard_stop();
    // The first choice's start: the siblings start once its prompt is in.
    let queue = tokio::select! {
            ev = handles[0].next() => match ev {
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
        ended: vec![false; handles.len()],
        handles,
        ticket,
        quota: None,
        prompt_tokens,
        generated: 0,
        hard_stop,
        queue,
        lane,
        stream: prepared.stream,
        include_usage: prepared.include_usage,
        logprobs,
        tools,
        echo,
    })
}

impl Running {
    /// The time to first token edge admission estimated for it; `None` for
    /// batch rows, which bypass edge admission.
    pub fn estimated_ttft(&self) -> Option<Duration> {
        self.ticket.as_ref().map(Ticket::estimated_ttft)
    }

    /// The executor process generating it, when another process does (the
    /// distributed mode): known once it started, after any re-routing.
    pub fn executor(&self) -> Option<String> {
        self.handles[0].executor()
    }

    /// How many choices it generates.
    pub fn choices(&self) -> usize {
        self.handles.len()
    }
}

/// Resolves once the hard-stop flag is (or becomes) true.
pub async fn stopped(rx: &mut watch::Receiver<bool>) {
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

/// The next report of any choice still running, with its index.
async fn next_report(
    handles: &mut [Generation],
    ended: &[bool],
) -> Option<(usize, Option<crate::backend::Report>)> {
    let active: Vec<usize> = (0..handles.len()).filter(|&i| !ended[i]).collect();
    match active.as_slice() {
        [] => None,
        [i] => Some((*i, handles[*i].next().await)),
        _ => {
            let futures = handles
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| active.contains(i))
                .map(|(i, h)| Box::pin(async move { (i, h.next().await) }));
            let ((i, report), _, _) = futures_util::future::select_all(futures).await;
            Some((i, report))
        }
    }
}

impl Running {
    /// Next piece of output of some choice; `None` once every choice ended,
    /// or after a `Failed`.
    pub async fn next(&mut self, state: &AppState) -> Option<ChoiceStep> {
        loop {
            let (index, ev) = tokio::select! {
                r = next_report(&mut self.handles, &self.ended) => r?,
                _ = stopped(&mut self.hard_stop) => {
                    for h in &self.handles {
                        h.cancel();
                    }
                    self.ended.iter_mut().for_each(|e| *e = true);
                    return Some(ChoiceStep { index: 0, step: Step::Failed(shutdown_error(state)) });
                }
            };
            let Some(ev) = ev else {
                self.ended[index] = true;
                let e = ApiError::Internal("engine ended a choice without a finish".into());
                self.ended.iter_mut().for_each(|e| *e = true);
                return Some(ChoiceStep {
                    index,
                    step: Step::Failed(e),
                });
            };
            if matches!(
                ev,
                Ok(EngineEvent::Delta { .. } | EngineEvent::Finished { .. })
            ) && let Some(t) = self.ticket.as_mut()
            {
                t.first_token();
            }
            let step = match ev {
                Ok(EngineEvent::Started { .. }) => continue,
                // The prompt is scored once, by the first choice; a sibling's
                // copy (were an engine to send one) is not a second score.
                Ok(EngineEvent::PromptLogprobs(p)) if index == 0 => Step::Prompt(p),
                Ok(EngineEvent::PromptLogprobs(_)) => continue,
                Ok(EngineEvent::Delta { text, logprobs, .. })
                    if text.is_empty() && logprobs.is_empty() =>
                {
                    continue;
                }
                Ok(EngineEvent::Delta { text, logprobs, .. }) => Step::Text { text, logprobs },
                Ok(EngineEvent::Finished {
                    reason,
                    usage,
                    timings,
                }) => Step::Done {
                    reason,
                    usage,
                    timings,
                },
                // `Generation` reports failures as `Err`.
                Ok(EngineEvent::Error(e)) => {
                    Step::Failed(ApiError::from_engine(e, state.admission.retry_hint()))
                }
                Err(e) => Step::Failed(e.into_api(state.admission.retry_hint())),
            };
            match &step {
                Step::Done { usage, .. } => {
                    self.ended[index] = true;
                    self.generated += usage.completion_tokens;
                    if self.ended.iter().all(|e| *e) {
                        if let Some(t) = self.ticket.as_mut() {
                            t.finished(self.generated);
                        }
                        // What was not generated goes back to the tenant's
                        // minute; a request that never ends keeps its whole
                        // reservation charged.
                        if let Some(q) = self.quota.as_mut() {
                            q.settle((self.prompt_tokens + self.generated) as u64);
                        }
                    }
                }
                // One failed choice fails the request; dropping the rest
                // cancels them.
                Step::Failed(_) => self.ended.iter_mut().for_each(|e| *e = true),
                Step::Text { .. } | Step::Prompt(_) => {}
            }
            return Some(ChoiceStep { index, step });
        }
    }
}

/// The usage of a request over its choices: the prompt once (and its cache
/// hits as the first choice had them), the output tokens of all.
pub fn add_usage(total: &mut Option<Usage>, u: &Usage) {
    match total {
        None => *total = Some(*u),
        Some(t) => t.completion_tokens += u.completion_tokens,
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

/// One choice of a non-streaming request.
pub struct CollectedChoice {
    pub text: String,
    /// One per output token when the request asked for log probabilities.
    pub logprobs: Vec<TokenLogprob>,
    pub reason: FinishReason,
}

/// Everything a non-streaming request produced.
pub struct Collected {
    /// By index.
    pub choices: Vec<CollectedChoice>,
    /// Whether it asked (an answer with no tokens still says `content: []`).
    pub asked_logprobs: bool,
    /// How each choice's text is read as tool calls.
    pub tools: Option<ToolMode>,
    /// The prompt each choice's text follows, and its scores when asked.
    pub echo: Option<(Echo, Vec<TokenLogprob>)>,
    /// The first choice's finish, as the request log records it.
    pub reason: FinishReason,
    /// Over all choices ([`add_usage`]).
    pub usage: Usage,
    /// The first choice's.
    pub timings: Timings,
}

pub async fn collect(
    id: &str,
    mut run: Running,
    state: &AppState,
    served: &Served,
) -> Result<Collected, ApiError> {
    let started = Instant::now();
    let n = run.choices();
    let mut parts: Vec<(String, Vec<TokenLogprob>, Option<FinishReason>)> =
        (0..n).map(|_| Default::default()).collect();
    let mut usage = None;
    let mut first_timings = None;
    let mut done = 0;
    let mut prompt_scores = Vec::new();
    while let Some(ChoiceStep { index, step }) = run.next(state).await {
        match step {
            Step::Prompt(p) => prompt_scores = p,
            Step::Text { text, logprobs } => {
                parts[index].0.push_str(&text);
                parts[index].1.extend(logprobs);
            }
            Step::Done {
                reason,
                usage: u,
                timings,
            } => {
                parts[index].2 = Some(reason);
                add_usage(&mut usage, &u);
                if index == 0 {
                    first_timings = Some(timings);
                }
                done += 1;
                if done < n {
                    continue;
                }
                let (usage, timings) =
                    (usage.unwrap_or_default(), first_timings.unwrap_or_default());
                let reason = parts[0].2.unwrap_or(reason);
                served
                    .metrics
                    .record_finished(run.lane, reason.as_str(), &usage, &timings);
                if let Some(e) = run.estimated_ttft() {
                    served.metrics.record_ttft_prediction(timings.ttft, e);
                }
                log_finished(id, reason, &usage, &timings);
                let choices = parts
                    .into_iter()
                    .map(|(text, logprobs, r)| CollectedChoice {
                        text,
                        logprobs,
                        reason: r.unwrap_or(reason),
                    })
                    .collect();
                return Ok(Collected {
                    choices,
                    asked_logprobs: run.logprobs.is_some(),
                    tools: run.tools.clone(),
                    echo: run.echo.take().map(|e| (e, prompt_scores)),
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
