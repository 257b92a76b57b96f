//! Conversions between the engine's types and the transport's bodies, in
//! one place so both ends agree.

use std::time::Duration;

use stoker_executor::engine::{EngineEvent, FinishReason, Timings, Usage};
use stoker_executor::structured::StructuredOutput;
use stoker_executor::{Lane, SamplingParams, TokenLogprob};
use stoker_schemas::transport::{ReplyEvent, WireLogprob, WireResponseFormat, WireSampling};

use stoker_api::backend::{BackendError, Report};
use stoker_api::error::{ApiError, RetryAfter};

pub fn sampling_to_wire(p: &SamplingParams) -> WireSampling {
    WireSampling {
        temperature: p.temperature,
        top_p: p.top_p,
        top_k: p.top_k.map(|k| k as u32),
        seed: p.seed,
        max_tokens: p.max_tokens as u32,
        stop: p.stop.clone(),
        stop_token_ids: p.stop_token_ids.clone(),
        stop_at_eos: p.stop_at_eos,
        logprobs: p.logprobs.map(|n| n as u32),
        prompt_logprobs: p.prompt_logprobs.map(|n| n as u32),
        presence_penalty: Some(p.presence_penalty).filter(|&x| x != 0.0),
        frequency_penalty: Some(p.frequency_penalty).filter(|&x| x != 0.0),
        repetition_penalty: Some(p.repetition_penalty).filter(|&x| x != 1.0),
        logit_bias: p.logit_bias.clone(),
        min_tokens: Some(p.min_tokens.min(u32::MAX as usize) as u32).filter(|&n| n > 0),
        include_stop_str_in_output: Some(true).filter(|_| p.include_stop_str_in_output),
        response_format: p.structured.as_ref().map(|f| match f {
            StructuredOutput::JsonObject => WireResponseFormat::JsonObject,
            StructuredOutput::JsonSchema(schema) => WireResponseFormat::JsonSchema {
                schema: schema.clone(),
            },
        }),
    }
}

pub fn sampling_from_wire(w: &WireSampling) -> SamplingParams {
    SamplingParams {
        temperature: w.temperature,
        top_p: w.top_p,
        top_k: w.top_k.map(|k| k as usize),
        seed: w.seed,
        max_tokens: w.max_tokens as usize,
        stop: w.stop.clone(),
        stop_token_ids: w.stop_token_ids.clone(),
        stop_at_eos: w.stop_at_eos,
        logprobs: w.logprobs.map(|n| n as usize),
        prompt_logprobs: w.prompt_logprobs.map(|n| n as usize),
        presence_penalty: w.presence_penalty.unwrap_or(0.0),
        frequency_penalty: w.frequency_penalty.unwrap_or(0.0),
        repetition_penalty: w.repetition_penalty.unwrap_or(1.0),
        logit_bias: w.logit_bias.clone(),
        min_tokens: w.min_tokens.unwrap_or(0) as usize,
        include_stop_str_in_output: w.include_stop_str_in_output.unwrap_or(false),
        structured: w.response_format.as_ref().map(|f| match f {
            WireResponseFormat::JsonObject => StructuredOutput::JsonObject,
            WireResponseFormat::JsonSchema { schema } => {
                StructuredOutput::JsonSchema(schema.clone())
            }
        }),
    }
}

fn logprob_to_wire(l: &TokenLogprob) -> WireLogprob {
    WireLogprob {
        id: l.id,
        logprob: l.logprob,
        top: l.top.clone(),
    }
}

fn logprob_from_wire(w: WireLogprob) -> TokenLogprob {
    TokenLogprob {
        id: w.id,
        logprob: w.logprob,
        top: w.top,
    }
}

pub fn lane_to_wire(l: Lane) -> &'static str {
    match l {
        Lane::Interactive => "interactive",
        Lane::Batch => "batch",
    }
}

pub fn lane_from_wire(s: &str) -> Option<Lane> {
    match s {
        "interactive" => Some(Lane::Interactive),
        "batch" => Some(Lane::Batch),
        _ => None,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn dur(ms: f64) -> Duration {
    if ms.is_finite() && ms > 0.0 {
        Duration::from_secs_f64((ms / 1000.0).min(1e9))
    } else {
        Duration::ZERO
    }
}

/// What the executor sends for an engine event.
pub fn event_to_wire(ev: &EngineEvent) -> ReplyEvent {
    match ev {
        EngineEvent::Started { queue } => ReplyEvent::Started {
            queue_ms: ms(*queue),
        },
        EngineEvent::PromptLogprobs(lps) => ReplyEvent::PromptLogprobs {
            logprobs: lps.iter().map(logprob_to_wire).collect(),
        },
        EngineEvent::Delta {
            text,
            token_ids,
            logprobs,
        } => ReplyEvent::Delta {
            text: text.clone(),
            token_ids: token_ids.clone(),
            logprobs: logprobs.iter().map(logprob_to_wire).collect(),
        },
        EngineEvent::Finished {
            reason,
            usage,
            timings,
        } => ReplyEvent::Finished {
            reason: reason.as_str().to_string(),
            prompt_tokens: usage.prompt_tokens as u32,
            completion_tokens: usage.completion_tokens as u32,
            cached_prompt_tokens: usage.cached_prompt_tokens as u32,
            queue_ms: ms(timings.queue),
            prefill_ms: ms(timings.prefill),
            ttft_ms: ms(timings.ttft),
            decode_ms: ms(timings.decode),
            total_ms: ms(timings.total),
            preemptions: timings.preemptions,
        },
        EngineEvent::Error(e) => error_to_wire(&ApiError::from_engine(
            e.clone(),
            RetryAfter(Duration::from_secs(1)),
        )),
    }
}

/// What the executor sends for a generation's report: the event, or the
/// failure as the API would answer it.
pub fn report_to_wire(r: &Report) -> ReplyEvent {
    match r {
        Ok(ev) => event_to_wire(ev),
        Err(e) => error_to_wire(&e.clone().into_api(RetryAfter(Duration::from_secs(1)))),
    }
}

pub fn error_to_wire(e: &ApiError) -> ReplyEvent {
    let message = match e {
        // The API instance logs and hides internals the same way.
        ApiError::Internal(m) => m.clone(),
        other => other.to_string(),
    };
    ReplyEvent::Error {
        code: e.code(),
        message,
    }
}

/// What the API's generation reports for a reply.
pub fn event_from_wire(ev: ReplyEvent) -> Report {
    match ev {
        ReplyEvent::Started { queue_ms } => Ok(EngineEvent::Started {
            queue: dur(queue_ms),
        }),
        ReplyEvent::PromptLogprobs { logprobs } => Ok(EngineEvent::PromptLogprobs(
            logprobs.into_iter().map(logprob_from_wire).collect(),
        )),
        ReplyEvent::Delta {
            text,
            token_ids,
            logprobs,
        } => Ok(EngineEvent::Delta {
            text,
            token_ids,
            logprobs: logprobs.into_iter().map(logprob_from_wire).collect(),
        }),
        ReplyEvent::Finished {
            reason,
            prompt_tokens,
            completion_tokens,
            cached_prompt_tokens,
            queue_ms,
            prefill_ms,
            ttft_ms,
            decode_ms,
            total_ms,
            preemptions,
        } => Ok(EngineEvent::Finished {
            reason: match reason.as_str() {
                "stop" => FinishReason::Stop,
                "length" => FinishReason::Length,
                _ => FinishReason::Cancelled,
            },
            usage: Usage {
                prompt_tokens: prompt_tokens as usize,
                completion_tokens: completion_tokens as usize,
                cached_prompt_tokens: cached_prompt_tokens as usize,
            },
            timings: Timings {
                queue: dur(queue_ms),
                prefill: dur(prefill_ms),
                ttft: dur(ttft_ms),
                decode: dur(decode_ms),
                total: dur(total_ms),
                preemptions,
            },
        }),
        ReplyEvent::Error { code, message } => Err(BackendError::Remote { code, message }),
    }
}

#[cfg(test)]
mod tests {
    use stoker_executor::EngineError;

    use super::*;
    use stoker_schemas::codes::ErrorCode;

    #[test]
    fn events_survive_the_wire() {
        let events = [
            EngineEvent::Started {
                queue: Duration::from_millis(12),
            },
            EngineEvent::PromptLogprobs(vec![stoker_executor::TokenLogprob {
                id: 4,
                logprob: -3.5,
                top: vec![(9, -0.5)],
            }]),
            EngineEvent::Delta {
                text: "hi".into(),
                token_ids: vec![1, 2],
                logprobs: Vec::new(),
            },
            EngineEvent::Delta {
                text: " there".into(),
                token_ids: vec![7],
                logprobs: vec![stoker_executor::TokenLogprob {
                    id: 7,
                    logprob: -0.25,
                    top: vec![(7, -0.25), (3, -1.5)],
                }],
            },
            EngineEvent::Finished {
                reason: FinishReason::Length,
                usage: Usage {
                    prompt_tokens: 5,
                    completion_tokens: 3,
                    cached_prompt_tokens: 1,
                },
                timings: Timings {
                    queue: Duration::from_millis(1),
                    prefill: Duration::from_millis(2),
                    ttft: Duration::from_millis(3),
                    decode: Duration::from_millis(4),
                    total: Duration::from_millis(7),
                    preemptions: 1,
                },
            },
        ];
        for ev in events {
            assert_eq!(event_from_wire(event_to_wire(&ev)), Ok(ev));
        }
    }

    #[test]
    fn engine_refusals_keep_their_catalogue_code() {
        let ev = EngineEvent::Error(EngineError::QueueFull {
            lane: Lane::Interactive,
        });
        let back = event_from_wire(event_to_wire(&ev));
        let Err(e) = back else { panic!("{back:?}") };
        let api = e.into_api(RetryAfter(Duration::from_secs(2)));
        assert_eq!(api.code(), ErrorCode::ServerOverloaded);
        assert_eq!(api.retry_after(), Some(RetryAfter(Duration::from_secs(2))));
    }

    #[test]
    fn error_replies_map_back_to_the_refusal_they_name() {
        let back = |code| {
            let ev = event_from_wire(ReplyEvent::Error {
                code,
                message: "m".into(),
            });
            let Err(e) = ev else { panic!("{ev:?}") };
            e.into_api(RetryAfter(Duration::from_secs(1)))
        };
        for &code in ErrorCode::ALL {
            let api = back(code);
            let expected = match code {
                ErrorCode::InvalidValue
                | ErrorCode::ContextLengthExceeded
                | ErrorCode::ServerOverloaded
                | ErrorCode::DeadlineInfeasible
                | ErrorCode::NotReady
                | ErrorCode::ExecutorLost => code,
                ErrorCode::ExecutorLostAfterOutput => ErrorCode::ExecutorLost,
                _ => ErrorCode::InternalError,
            };
            assert_eq!(api.code(), expected, "{code}");
        }
        // Output was delivered: no retry.
        assert_eq!(back(ErrorCode::ExecutorLostAfterOutput).retry_after(), None);
        assert!(back(ErrorCode::ExecutorLost).retry_after().is_some());
        // A code from a newer peer ends the request as an internal error.
        let api = back(ErrorCode::Unknown);
        assert!(matches!(api, ApiError::Internal(_)), "{api:?}");
    }

    #[test]
    fn hostile_wire_values_are_clamped() {
        assert_eq!(dur(f64::NAN), Duration::ZERO);
        assert_eq!(dur(-5.0), Duration::ZERO);
        assert!(dur(f64::INFINITY) == Duration::ZERO);
        assert!(dur(1e300) <= Duration::from_secs(1_000_000_000));
        assert_eq!(lane_from_wire("turbo"), None);
        let sp = SamplingParams::greedy(9);
        assert_eq!(sampling_from_wire(&sampling_to_wire(&sp)), sp);
        let sp = SamplingParams {
            logprobs: Some(5),
            prompt_logprobs: Some(2),
            presence_penalty: -1.5,
            frequency_penalty: 0.25,
            repetition_penalty: 1.2,
            logit_bias: vec![(3, 100.0), (8, -4.5)],
            min_tokens: 2,
            include_stop_str_in_output: true,
            structured: Some(StructuredOutput::JsonSchema(
                serde_json::json!({"type": "object"}),
            )),
            ..SamplingParams::greedy(9)
        };
        assert_eq!(sampling_from_wire(&sampling_to_wire(&sp)), sp);
    }
}
