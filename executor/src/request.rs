//! Validated requests: the only thing the engine accepts.
//!
//! Raw JSON never reaches the engine. The API layer builds a [`ValidRequest`]
//! through [`ValidRequest::new`], which checks every limit the engine relies on
//! (non-empty prompt, context window, sampling ranges) and returns a typed
//! [`ValidationError`] otherwise.

use crate::error::ValidationError;
use crate::ids::{Lane, TenantId};
use crate::limits::MAX_REPETITION_PENALTY;

/// At most this many stop strings per request (the OpenAI limit).
pub const MAX_STOP_STRINGS: usize = 4;
/// Longest stop string accepted, in bytes.
pub const MAX_STOP_BYTES: usize = 256;

/// How to pick the next token. `temperature == 0` means greedy.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_p: f32,
    /// `None` or `Some(0)` disables top-k.
    pub top_k: Option<usize>,
    /// Same seed and same request give the same tokens whatever shares the batch.
    pub seed: Option<u64>,
    pub max_tokens: usize,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    /// Stop at the model's end-of-sequence tokens (normally true).
    pub stop_at_eos: bool,
    /// Report each sampled token's log probability and this many (at most
    /// [`MAX_TOP_LOGPROBS`](crate::logprobs::MAX_TOP_LOGPROBS)) most likely
    /// alternatives; `None`: no log probabilities.
    pub logprobs: Option<usize>,
    /// Score the prompt: report the log probability of each prompt token
    /// after the first (given the tokens before it) and this many most
    /// likely alternatives at its position, as vLLM's `prompt_logprobs`
    /// and OpenAI's legacy `echo` do. The prompt is then computed whole,
    /// never served from the prefix cache, so every position has logits.
    /// With it, `max_tokens` may be 0: score without generating.
    pub prompt_logprobs: Option<usize>,
    /// Subtracted once from every token already generated (OpenAI's, -2..=2).
    pub presence_penalty: f32,
    /// Subtracted per occurrence from every token already generated
    /// (OpenAI's, -2..=2).
    pub frequency_penalty: f32,
    /// Divides positive and multiplies negative logits of every token in the
    /// prompt or the output (vLLM's extension, > 0; 1 is off).
    pub repetition_penalty: f32,
    /// Added to the logits of these token ids (OpenAI's, -100..=100), sorted
    /// by id, each id once.
    pub logit_bias: Vec<(u32, f32)>,
    /// End-of-sequence and stop tokens are masked, and stop strings not
    /// matched, until this many tokens were generated (vLLM's extension).
    pub min_tokens: usize,
    /// Keep the matched stop string at the end of the output (vLLM's
    /// extension).
    pub include_stop_str_in_output: bool,
    /// A format the output must follow, enforced while decoding
    /// ([`crate::structured`]).
    pub structured: Option<crate::structured::StructuredOutput>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: None,
            seed: None,
            max_tokens: 16,
            stop: Vec::new(),
            stop_token_ids: Vec::new(),
            stop_at_eos: true,
            logprobs: None,
            prompt_logprobs: None,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            repetition_penalty: 1.0,
            logit_bias: Vec::new(),
            min_tokens: 0,
            include_stop_str_in_output: false,
            structured: None,
        }
    }
}

impl SamplingParams {
    pub fn greedy(max_tokens: usize) -> Self {
        SamplingParams {
            temperature: 0.0,
            max_tokens,
            ..Default::default()
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 1e-6 || self.top_k == Some(1)
    }

    /// Whether anything changes the logits before sampling once `generated`
    /// tokens were sampled (bias, penalties, or a min_tokens mask).
    pub fn processes_logits(&self, generated: usize) -> bool {
        self.presence_penalty != 0.0
            || self.frequency_penalty != 0.0
            || self.repetition_penalty != 1.0
            || !self.logit_bias.is_empty()
            || generated < self.min_tokens
    }
}

/// Most `logit_bias` entries per request.
pub const MAX_LOGIT_BIAS: usize = 1024;
/// The `logit_bias` range (OpenAI's).
pub const LOGIT_BIAS_RANGE: std::ops::RangeInclusive<f32> = -100.0..=100.0;
/// The presence and frequency penalty range (OpenAI's).
pub const PENALTY_RANGE: std::ops::RangeInclusive<f32> = -2.0..=2.0;
/// The range a tenant's fair-share weight is clamped to.
pub const TENANT_WEIGHTS: std::ops::RangeInclusive<u32> = 1..=10_000;

/// The limits a request is validated against: the model's context window and
/// the deployment's input and output caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestLimits {
    pub context_window: usize,
    pub max_input_tokens: usize,
    pub max_output_tokens: usize,
    pub vocab_size: usize,
}

/// A request that passed validation. Fields are private so it can only be
/// built through [`ValidRequest::new`].
#[derive(Clone, Debug)]
pub struct ValidRequest {
    prompt: Vec<u32>,
    params: SamplingParams,
    lane: Lane,
    tenant: TenantId,
    /// The tenant's share of its lane against other tenants (see
    /// [`with_tenant_weight`](Self::with_tenant_weight)).
    tenant_weight: u32,
    /// `params.structured` compiled for the served vocabulary.
    constraint: Option<crate::structured::Constraint>,
}

impl ValidRequest {
    pub fn new(
        prompt: Vec<u32>,
        params: SamplingParams,
        lane: Lane,
        tenant: TenantId,
        limits: &RequestLimits,
    ) -> Result<Self, ValidationError> {
        validate_params(&params)?;
        if let Some(&(id, _)) = params
            .logit_bias
            .iter()
            .find(|(id, _)| *id as usize >= limits.vocab_size)
        {
            return Err(ValidationError::LogitBiasOutOfVocabulary {
                id,
                vocab: limits.vocab_size,
            });
        }
        if prompt.is_empty() {
            return Err(ValidationError::EmptyPrompt);
        }
        if let Some(&id) = prompt.iter().find(|&&id| id as usize >= limits.vocab_size) {
            return Err(ValidationError::TokenOutOfRange {
                id,
                vocab: limits.vocab_size,
            });
        }
        if prompt.len() >= limits.context_window {
            return Err(ValidationError::PromptTooLong {
                prompt: prompt.len(),
                context: limits.context_window,
            });
        }
        if prompt.len() > limits.max_input_tokens {
            return Err(ValidationError::InputTooLong {
                got: prompt.len(),
                max: limits.max_input_tokens,
            });
        }
        if params.max_tokens > limits.max_output_tokens {
            return Err(ValidationError::MaxTokensTooLarge {
                got: params.max_tokens,
                max: limits.max_output_tokens,
            });
        }
        if prompt.len() + params.max_tokens > limits.context_window {
            return Err(ValidationError::ContextLengthExceeded {
                prompt: prompt.len(),
                max_tokens: params.max_tokens,
                context: limits.context_window,
            });
        }
        Ok(ValidRequest {
            prompt,
            params,
            lane,
            tenant,
            tenant_weight: 1,
            constraint: None,
        })
    }

    /// Compiles the request's response format against `grammars` (the
    /// served vocabulary's), once: the API does it to refuse a schema with
    /// a 400 before admission; [`crate::Engine::submit`] does it for
    /// requests that arrive uncompiled. A no-op without a format.
    pub fn compile_constraint(
        &mut self,
        grammars: &crate::structured::Grammars,
    ) -> Result<(), ValidationError> {
        if let (Some(format), None) = (&self.params.structured, &self.constraint) {
            self.constraint = Some(grammars.compile(format)?);
        }
        Ok(())
    }

    /// Whether the response format still needs compiling.
    pub fn needs_constraint(&self) -> bool {
        self.params.structured.is_some() && self.constraint.is_none()
    }

    pub(crate) fn take_constraint(&mut self) -> Option<crate::structured::Constraint> {
        self.constraint.take()
    }

    pub fn prompt(&self) -> &[u32] {
        &self.prompt
    }
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }
    pub fn lane(&self) -> Lane {
        self.lane
    }

    /// The same request in another lane (batch rows are validated like online
    /// requests, then run in the batch lane).
    pub fn with_lane(mut self, lane: Lane) -> Self {
        self.lane = lane;
        self
    }
    /// Choice `index` of a request for several (`n`): the same request,
    /// its seed (if any) moved by `index`, so each choice draws its own
    /// tokens and the same request and seed still give the same choices.
    pub fn choice(&self, index: u64) -> Self {
        let mut r = self.clone();
        r.params.seed = r.params.seed.map(|s| s.wrapping_add(index));
        // The prompt is scored once, by the first choice; the others reuse
        // its prefix-cached blocks.
        if index > 0 {
            r.params.prompt_logprobs = None;
        }
        r
    }

    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// The same request with its tenant's fair-share weight, clamped to
    /// [`TENANT_WEIGHTS`]: within a lane, a tenant of weight 3 gets about three
    /// times the tokens of a tenant of weight 1 while both have work
    /// (`scheduler::fair`). The default is 1.
    pub fn with_tenant_weight(mut self, weight: u32) -> Self {
        self.tenant_weight = weight.clamp(*TENANT_WEIGHTS.start(), *TENANT_WEIGHTS.end());
        self
    }

    /// The tenant's fair-share weight, in [`TENANT_WEIGHTS`] (default 1).
    pub fn tenant_weight(&self) -> u32 {
        self.tenant_weight
    }
}

fn validate_params(p: &SamplingParams) -> Result<(), ValidationError> {
    if !p.temperature.is_finite() || p.temperature < 0.0 || p.temperature > 2.0 {
        return Err(ValidationError::BadTemperature(p.temperature));
    }
    if !(p.top_p > 0.0 && p.top_p <= 1.0) {
        return Err(ValidationError::BadTopP(p.top_p));
    }
    if p.max_tokens == 0 && p.prompt_logprobs.is_none() {
        return Err(ValidationError::ZeroMaxTokens);
    }
    if let Some(n) = p.logprobs.into_iter().chain(p.prompt_logprobs).max()
        && n > crate::logprobs::MAX_TOP_LOGPROBS
    {
        return Err(ValidationError::TooManyTopLogprobs {
            got: n,
            max: crate::logprobs::MAX_TOP_LOGPROBS,
        });
    }
    for (name, v) in [
        ("presence_penalty", p.presence_penalty),
        ("frequency_penalty", p.frequency_penalty),
    ] {
        if !PENALTY_RANGE.contains(&v) {
            return Err(ValidationError::BadPenalty { name, value: v });
        }
    }
    if !(p.repetition_penalty > 0.0 && p.repetition_penalty <= MAX_REPETITION_PENALTY) {
        return Err(ValidationError::BadRepetitionPenalty(p.repetition_penalty));
    }
    if p.logit_bias.len() > MAX_LOGIT_BIAS {
        return Err(ValidationError::TooManyLogitBiases {
            got: p.logit_bias.len(),
            max: MAX_LOGIT_BIAS,
        });
    }
    if let Some(&(id, bias)) = p
        .logit_bias
        .iter()
        .find(|(_, b)| !LOGIT_BIAS_RANGE.contains(b))
    {
        return Err(ValidationError::BadLogitBias { id, bias });
    }
    if p.logit_bias.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(ValidationError::UnsortedLogitBias);
    }
    if let Some(format) = &p.structured {
        format.validate()?;
    }
    if p.min_tokens > p.max_tokens {
        return Err(ValidationError::MinTokensAboveMax {
            min: p.min_tokens,
            max: p.max_tokens,
        });
    }
    if p.stop.len() > MAX_STOP_STRINGS {
        return Err(ValidationError::TooManyStops {
            got: p.stop.len(),
            max: MAX_STOP_STRINGS,
        });
    }
    if p.stop
        .iter()
        .any(|s| s.is_empty() || s.len() > MAX_STOP_BYTES)
    {
        return Err(ValidationError::BadStop {
            max: MAX_STOP_BYTES,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: RequestLimits = RequestLimits {
        context_window: 100,
        max_input_tokens: 90,
        max_output_tokens: 50,
        vocab_size: 1000,
    };

    fn req(prompt: Vec<u32>, params: SamplingParams) -> Result<ValidRequest, ValidationError> {
        ValidRequest::new(
            prompt,
            params,
            Lane::Interactive,
            TenantId::default(),
            &LIMITS,
        )
    }

    #[test]
    fn an_empty_prompt_is_refused() {
        assert_eq!(
            req(vec![], SamplingParams::greedy(4)).unwrap_err(),
            ValidationError::EmptyPrompt
        );
    }

    #[test]
    fn a_prompt_longer_than_the_context_window_is_refused() {
        let err = req(vec![1; 100], SamplingParams::greedy(1)).unwrap_err();
        assert!(matches!(
            err,
            ValidationError::PromptTooLong {
                prompt: 100,
                context: 100
            }
        ));
    }

    #[test]
    fn prompt_plus_max_tokens_over_the_window_is_context_length_exceeded() {
        let err = req(vec![1; 60], SamplingParams::greedy(50)).unwrap_err();
        assert!(matches!(err, ValidationError::ContextLengthExceeded { .. }));
    }

    #[test]
    fn zero_max_tokens_is_refused() {
        assert_eq!(
            req(vec![1], SamplingParams::greedy(0)).unwrap_err(),
            ValidationError::ZeroMaxTokens
        );
        let scoring = SamplingParams {
            prompt_logprobs: Some(0),
            ..SamplingParams::greedy(0)
        };
        assert!(
            req(vec![1, 2], scoring).is_ok(),
            "scoring may generate nothing"
        );
        let too_many = SamplingParams {
            prompt_logprobs: Some(crate::logprobs::MAX_TOP_LOGPROBS + 1),
            ..SamplingParams::greedy(1)
        };
        assert!(matches!(
            req(vec![1, 2], too_many).unwrap_err(),
            ValidationError::TooManyTopLogprobs { .. }
        ));
    }

    #[test]
    fn nan_and_negative_temperatures_are_refused() {
        for t in [f32::NAN, -0.5, f32::INFINITY, 2.5] {
            let p = SamplingParams {
                temperature: t,
                ..SamplingParams::greedy(4)
            };
            assert!(matches!(
                req(vec![1], p).unwrap_err(),
                ValidationError::BadTemperature(_)
            ));
        }
    }

    #[test]
    fn top_p_outside_zero_one_is_refused() {
        for top_p in [0.0, -0.1, 1.01, f32::NAN] {
            let p = SamplingParams {
                top_p,
                ..SamplingParams::greedy(4)
            };
            assert!(matches!(
                req(vec![1], p).unwrap_err(),
                ValidationError::BadTopP(_)
            ));
        }
    }

    #[test]
    fn out_of_vocabulary_token_ids_are_refused() {
        let err = req(vec![1, 5000], SamplingParams::greedy(4)).unwrap_err();
        assert!(matches!(
            err,
            ValidationError::TokenOutOfRange { id: 5000, .. }
        ));
    }

    #[test]
    fn too_many_or_empty_stop_strings_are_refused() {
        let p = SamplingParams {
            stop: vec!["a".into(); 5],
            ..SamplingParams::greedy(4)
        };
        assert!(matches!(
            req(vec![1], p).unwrap_err(),
            ValidationError::TooManyStops { .. }
        ));
        let p = SamplingParams {
            stop: vec![String::new()],
            ..SamplingParams::greedy(4)
        };
        assert!(matches!(
            req(vec![1], p).unwrap_err(),
            ValidationError::BadStop { .. }
        ));
    }

    #[test]
    fn penalties_bias_and_min_tokens_out_of_range_are_refused() {
        let bad = [
            SamplingParams {
                presence_penalty: 2.5,
                ..SamplingParams::greedy(4)
            },
            SamplingParams {
                frequency_penalty: f32::NAN,
                ..SamplingParams::greedy(4)
            },
            SamplingParams {
                repetition_penalty: 0.0,
                ..SamplingParams::greedy(4)
            },
            SamplingParams {
                repetition_penalty: f32::INFINITY,
                ..SamplingParams::greedy(4)
            },
            SamplingParams {
                logit_bias: vec![(1, 100.5)],
                ..SamplingParams::greedy(4)
            },
            SamplingParams {
                logit_bias: vec![(2, 1.0), (1, 1.0)],
                ..SamplingParams::greedy(4)
            },
            SamplingParams {
                logit_bias: (0..MAX_LOGIT_BIAS as u32 + 1).map(|i| (i, 1.0)).collect(),
                ..SamplingParams::greedy(4)
            },
            SamplingParams {
                min_tokens: 5,
                ..SamplingParams::greedy(4)
            },
            SamplingParams {
                logit_bias: vec![(1000, 1.0)],
                ..SamplingParams::greedy(4)
            },
        ];
        for p in bad {
            assert!(req(vec![1], p.clone()).is_err(), "{p:?} was accepted");
        }
        let ok = SamplingParams {
            presence_penalty: -2.0,
            frequency_penalty: 2.0,
            repetition_penalty: 1.3,
            logit_bias: vec![(0, -100.0), (999, 100.0)],
            min_tokens: 4,
            ..SamplingParams::greedy(4)
        };
        req(vec![1], ok).unwrap();
    }

    #[test]
    fn a_reasonable_request_is_accepted() {
        let r = req(vec![1, 2, 3], SamplingParams::greedy(10)).unwrap();
        assert_eq!(r.prompt(), &[1, 2, 3]);
        assert_eq!(r.tenant_weight(), 1);
    }

    #[test]
    fn the_tenant_weight_is_clamped_and_kept_by_choices() {
        let r = req(vec![1], SamplingParams::greedy(1)).unwrap();
        assert_eq!(r.clone().with_tenant_weight(0).tenant_weight(), 1);
        assert_eq!(r.clone().with_tenant_weight(3).tenant_weight(), 3);
        let heavy = r.with_tenant_weight(u32::MAX);
        assert_eq!(heavy.tenant_weight(), 10_000);
        assert_eq!(heavy.choice(2).tenant_weight(), 10_000);
        assert_eq!(heavy.with_lane(Lane::Batch).tenant_weight(), 10_000);
    }
}
