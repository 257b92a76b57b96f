//! What a request's handle receives from the engine.

use std::time::Duration;

use crate::error::EngineError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// EOS, a stop token id or a stop string.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The caller dropped its handle or asked to cancel.
    Cancelled,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    /// Prompt tokens served from the prefix cache on first admission.
    pub cached_prompt_tokens: usize,
}

/// Where a request's time went.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timings {
    /// Submit to first scheduled step.
    pub queue: Duration,
    /// First scheduled step to first token.
    pub prefill: Duration,
    /// Submit to first token.
    pub ttft: Duration,
    /// First token to finish.
    pub decode: Duration,
    /// Submit to finish.
    pub total: Duration,
    /// Times this request was preempted and recomputed.
    pub preemptions: u32,
}

#[derive(Clone, Debug, PartialEq)]
pub enum EngineEvent {
    /// The request was scheduled for the first time, after `queue` in the
    /// waiting queue. Sent once, before any `Delta`. Refusals (queue full,
    /// cannot fit) come as `Error` instead, so a caller that waits for this
    /// event knows the request was admitted by the engine.
    Started { queue: Duration },
    /// The scores of the prompt, when the request asked for them
    /// ([`SamplingParams::prompt_logprobs`](crate::SamplingParams)): one per
    /// prompt token after the first, each given the tokens before it. Sent
    /// once, after `Started` and before any `Delta`.
    PromptLogprobs(Vec<crate::TokenLogprob>),
    /// Newly decoded text (never a broken UTF-8 sequence, never part of a stop
    /// string) and the token ids that produced it; with their log
    /// probabilities, one per id, when the request asked for them
    /// ([`SamplingParams::logprobs`](crate::SamplingParams)), else empty.
    Delta {
        text: String,
        token_ids: Vec<u32>,
        logprobs: Vec<crate::TokenLogprob>,
    },
    /// The request ended; always the last event unless `Error` came first.
    Finished {
        reason: FinishReason,
        usage: Usage,
        timings: Timings,
    },
    /// The request failed; no further events follow.
    Error(EngineError),
}
