//! Server-sent events in OpenAI's framing: `data: {chunk}\n\n` per chunk, a
//! final chunk with `finish_reason`, an optional usage chunk (empty
//! `choices`), then `data: [DONE]\n\n`. A failure after the stream started is
//! one `event: error` frame carrying the same body as an HTTP error, and the
//! stream ends without `[DONE]`.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures_util::stream;
use serde::Serialize;
use stoker_schemas::openai::{
    ChatChunkChoice, ChatCompletionChunk, ChatDelta, Completion, CompletionChoice, ToolCallOut,
    Usage,
};

use stoker_executor::TokenLogprob;
use stoker_executor::engine::{FinishReason, Timings};

use crate::edge::generate::{Running, Step};
use crate::edge::reqlog::LogSlot;
use crate::edge::validate::Echo;
use crate::error::ApiError;
use crate::http::logprobs;
use crate::http::tool_calls::{self, Splitter};
use crate::state::AppState;

/// Which OpenAI object the stream carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Completion,
}

/// Fields every chunk of one response repeats.
#[derive(Clone, Debug)]
pub struct Envelope {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub fingerprint: String,
}

pub fn data_frame<T: Serialize>(v: &T) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    // Serializing our own types cannot fail.
    serde_json::to_writer(&mut out, v).expect("chunk serializes");
    out.extend_from_slice(b"\n\n");
    out
}

pub fn error_frame(e: &ApiError) -> Vec<u8> {
    let mut out = b"event: error\ndata: ".to_vec();
    serde_json::to_writer(&mut out, &e.body()).expect("error body serializes");
    out.extend_from_slice(b"\n\n");
    out
}

pub const DONE_FRAME: &[u8] = b"data: [DONE]\n\n";

pub fn usage_of(u: &stoker_executor::engine::Usage) -> Usage {
    Usage {
        prompt_tokens: u.prompt_tokens as u64,
        completion_tokens: u.completion_tokens as u64,
        total_tokens: (u.prompt_tokens + u.completion_tokens) as u64,
        prompt_tokens_details: Some(stoker_schemas::openai::PromptTokensDetails {
            cached_tokens: u.cached_prompt_tokens as u64,
        }),
    }
}

/// Builds chunks of one kind.
struct Chunker {
    kind: Kind,
    env: Envelope,
    include_usage: bool,
    /// Spells log probabilities, when the request asked for them.
    logprobs: Option<std::sync::Arc<dyn crate::backend::Artifact>>,
    /// Characters of completion text streamed so far (`text_offset`), per
    /// choice.
    offsets: Vec<u64>,
}

impl Chunker {
    fn usage_field(&self, u: Option<Usage>) -> Option<Option<Usage>> {
        self.include_usage.then_some(u)
    }

    fn text(
        &mut self,
        index: usize,
        text: Option<String>,
        lps: &[TokenLogprob],
        role: bool,
        finish: Option<&str>,
    ) -> Vec<u8> {
        let art = self.logprobs.as_ref().filter(|_| !lps.is_empty());
        match self.kind {
            Kind::Chat => data_frame(&ChatCompletionChunk {
                id: self.env.id.clone(),
                object: "chat.completion.chunk".into(),
                created: self.env.created,
                model: self.env.model.clone(),
                system_fingerprint: self.env.fingerprint.clone(),
                choices: vec![ChatChunkChoice {
                    index: index as u32,
                    delta: ChatDelta {
                        role: role.then(|| "assistant".to_string()),
                        content: text,
                        tool_calls: None,
                    },
                    finish_reason: finish.map(str::to_string),
                    logprobs: art.map(|a| logprobs::chat(a.tokenizer(), lps)),
                }],
                usage: self.usage_field(None),
            }),
            Kind::Completion => data_frame(&Completion {
                id: self.env.id.clone(),
                object: "text_completion".into(),
                created: self.env.created,
                model: self.env.model.clone(),
                system_fingerprint: self.env.fingerprint.clone(),
                choices: vec![CompletionChoice {
                    index: index as u32,
                    text: text.unwrap_or_default(),
                    finish_reason: finish.map(str::to_string),
                    logprobs: art.map(|a| {
                        logprobs::completion(a.tokenizer(), lps, &mut self.offsets[index])
                    }),
                }],
                usage: self.usage_field(None),
            }),
        }
    }

    /// A completion chunk with the echoed prompt of choice `index`, scored
    /// when `scores` are given and the request asked for log probabilities.
    fn echo(&mut self, index: usize, echo: &Echo, scores: Option<&[TokenLogprob]>) -> Vec<u8> {
        let logprobs = match (&self.logprobs, scores) {
            (Some(a), Some(scores)) => Some(logprobs::echoed_prompt(
                a.tokenizer(),
                &echo.ids,
                scores,
                &mut self.offsets[index],
            )),
            _ => None,
        };
        data_frame(&Completion {
            id: self.env.id.clone(),
            object: "text_completion".into(),
            created: self.env.created,
            model: self.env.model.clone(),
            system_fingerprint: self.env.fingerprint.clone(),
            choices: vec![CompletionChoice {
                index: index as u32,
                text: echo.text.clone(),
                finish_reason: None,
                logprobs,
            }],
            usage: self.usage_field(None),
        })
    }

    /// A chat chunk carrying a choice's tool calls, whole.
    fn calls(&self, index: usize, calls: Vec<ToolCallOut>) -> Vec<u8> {
        data_frame(&ChatCompletionChunk {
            id: self.env.id.clone(),
            object: "chat.completion.chunk".into(),
            created: self.env.created,
            model: self.env.model.clone(),
            system_fingerprint: self.env.fingerprint.clone(),
            choices: vec![ChatChunkChoice {
                index: index as u32,
                delta: ChatDelta {
                    tool_calls: Some(tool_calls::deltas(calls)),
                    ..ChatDelta::default()
                },
                finish_reason: None,
                logprobs: None,
            }],
            usage: self.usage_field(None),
        })
    }

    fn usage(&self, u: Usage) -> Vec<u8> {
        match self.kind {
            Kind::Chat => data_frame(&ChatCompletionChunk {
                id: self.env.id.clone(),
                object: "chat.completion.chunk".into(),
                created: self.env.created,
                model: self.env.model.clone(),
                system_fingerprint: self.env.fingerprint.clone(),
                choices: Vec::new(),
                usage: Some(Some(u)),
            }),
            Kind::Completion => data_frame(&Completion {
                id: self.env.id.clone(),
                object: "text_completion".into(),
                created: self.env.created,
                model: self.env.model.clone(),
                system_fingerprint: self.env.fingerprint.clone(),
                choices: Vec::new(),
                usage: Some(Some(u)),
            }),
        }
    }
}

struct StreamState {
    run: Running,
    app: AppState,
    chunker: Chunker,
    first: bool,
    ended: bool,
    log: RowOnDrop,
    /// Choices that finished, and what they used between them.
    done: usize,
    usage: Option<stoker_executor::engine::Usage>,
    first_finish: Option<(FinishReason, Timings)>,
    /// Per choice, when the request has tools: what may be a call is held.
    splitters: Vec<Option<Splitter>>,
}

/// Writes the stream's request-log row when the stream ends or is dropped
/// (the client went away: finish reason `cancelled`).
struct RowOnDrop {
    slot: LogSlot,
    app: AppState,
}

impl Drop for RowOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.app.control() {
            self.slot.with_default_finish("cancelled");
            self.slot.write(&c.log, 200);
        }
    }
}

/// The streaming response. Dropping the body (client gone) drops the
/// `Running`, which cancels the sequence and frees its KV blocks.
pub fn response(run: Running, app: AppState, kind: Kind, env: Envelope, slot: LogSlot) -> Response {
    let queue_ms = run.queue.as_millis() as u64;
    let estimate = run.estimated_ttft();
    let chunker = Chunker {
        kind,
        env,
        include_usage: run.include_usage,
        logprobs: run.logprobs.clone(),
        offsets: vec![0; run.choices()],
    };
    slot.defer();
    let splitters = (0..run.choices())
        .map(|_| run.tools.clone().map(Splitter::new))
        .collect();
    let st = StreamState {
        splitters,
        run,
        log: RowOnDrop {
            slot,
            app: app.clone(),
        },
        app,
        chunker,
        first: true,
        ended: false,
        done: 0,
        usage: None,
        first_finish: None,
    };
    let body = stream::unfold(st, |mut st| async move {
        if st.ended {
            return None;
        }
        let mut out = Vec::new();
        if st.first && st.chunker.kind == Kind::Chat {
            for i in 0..st.run.choices() {
                out.extend(st.chunker.text(i, Some(String::new()), &[], true, None));
            }
        }
        if st.first
            && let Some(echo) = st.run.echo.as_ref().filter(|e| !e.scored)
        {
            // Nothing to wait for: the prompt's text leads each choice.
            for i in 0..st.run.choices() {
                out.extend(st.chunker.echo(i, echo, None));
            }
        }
        st.first = false;
        match st.run.next(&st.app).await.map(|c| (c.index, c.step)) {
            Some((_, Step::Prompt(scores))) => {
                // Scored once, by the first choice; every choice leads with it.
                if let Some(echo) = st.run.echo.as_ref().filter(|e| e.scored) {
                    for i in 0..st.run.choices() {
                        out.extend(st.chunker.echo(i, echo, Some(&scores)));
                    }
                }
            }
            Some((i, Step::Text { text, logprobs })) => {
                let text = match &mut st.splitters[i] {
                    Some(s) => s.push(&text),
                    None => text,
                };
                if !text.is_empty() || !logprobs.is_empty() {
                    out.extend(st.chunker.text(i, Some(text), &logprobs, false, None))
                }
            }
            Some((
                i,
                Step::Done {
                    reason,
                    usage,
                    timings,
                },
            )) => {
                let mut finish = reason.as_str();
                if let Some(split) = st.splitters[i].take() {
                    let mode = st.run.tools.clone().expect("a splitter has a mode");
                    let ended = split.finish();
                    if !ended.content.is_empty() {
                        out.extend(st.chunker.text(i, Some(ended.content), &[], false, None));
                    }
                    finish = Splitter::finish_reason(&mode, reason, !ended.calls.is_empty());
                    if !ended.calls.is_empty() {
                        out.extend(st.chunker.calls(i, ended.calls));
                    }
                }
                let last = match st.chunker.kind {
                    Kind::Chat => st.chunker.text(i, None, &[], false, Some(finish)),
                    Kind::Completion => {
                        st.chunker
                            .text(i, Some(String::new()), &[], false, Some(reason.as_str()))
                    }
                };
                out.extend(last);
                crate::edge::generate::add_usage(&mut st.usage, &usage);
                if i == 0 {
                    st.first_finish = Some((reason, timings));
                }
                st.done += 1;
                if st.done == st.run.choices() {
                    let usage = st.usage.unwrap_or_default();
                    let (reason, timings) = st.first_finish.unwrap_or((reason, timings));
                    if let Some(s) = st.app.served() {
                        s.metrics
                            .record_finished(st.run.lane, reason.as_str(), &usage, &timings);
                        if let Some(e) = st.run.estimated_ttft() {
                            s.metrics.record_ttft_prediction(timings.ttft, e);
                        }
                    }
                    st.log.slot.finished(reason.as_str(), &usage, &timings);
                    crate::edge::generate::log_finished(
                        &st.chunker.env.id,
                        reason,
                        &usage,
                        &timings,
                    );
                    if st.chunker.include_usage {
                        out.extend(st.chunker.usage(usage_of(&usage)));
                    }
                    out.extend_from_slice(DONE_FRAME);
                    st.ended = true;
                }
            }
            Some((_, Step::Failed(e))) => {
                if let Some(s) = st.app.served() {
                    s.metrics.record_rejected(e.code());
                }
                st.log.slot.failed(e.code());
                tracing::warn!(
                    request_id = %st.chunker.env.id,
                    code = %e.code(),
                    "stream ended with an error"
                );
                out.extend(error_frame(&e));
                st.ended = true;
            }
            None => {
                let e = ApiError::Internal("engine ended the stream without a finish".into());
                out.extend(error_frame(&e));
                st.ended = true;
            }
        }
        Some((Ok::<_, Infallible>(Bytes::from(out)), st))
    });
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    h.insert("x-stoker-queue-ms", HeaderValue::from(queue_ms));
    if let Some(e) = estimate {
        h.insert(TTFT_ESTIMATE_HEADER, ttft_estimate_value(e));
    }
    resp
}

/// The time to first token edge admission estimated for an admitted
/// request, in milliseconds: what a load generator puts beside the TTFT it
/// observed (`stoker bench scenario` reports the ratio).
pub const TTFT_ESTIMATE_HEADER: &str = "x-stoker-ttft-estimate-ms";

/// The estimate as the header's value, in milliseconds with one decimal.
pub fn ttft_estimate_value(d: std::time::Duration) -> HeaderValue {
    HeaderValue::try_from(format!("{:.1}", d.as_secs_f64() * 1e3))
        .expect("a number is a valid header value")
}
