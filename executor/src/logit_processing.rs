//! What a request changes about the logits before sampling: `min_tokens`,
//! `logit_bias`, then the repetition, frequency and presence penalties, in
//! vLLM's order.
//!
//! The state (which tokens the prompt holds, how often each was generated)
//! belongs to the sequence, so the result depends only on the request and
//! what it generated, never on what else shares the step. Log probabilities
//! are taken from the raw logits, before any of this (vLLM's default).

use std::collections::{HashMap, HashSet};

use crate::request::SamplingParams;

/// One sequence's token history, as the penalties need it.
#[derive(Clone, Debug, Default)]
pub struct LogitState {
    /// Distinct prompt tokens; kept only with a repetition penalty.
    prompt: HashSet<u32>,
    /// How often each token was generated.
    output: HashMap<u32, u32>,
}

impl LogitState {
    pub fn new(params: &SamplingParams, prompt: &[u32]) -> Self {
        LogitState {
            prompt: if params.repetition_penalty != 1.0 {
                prompt.iter().copied().collect()
            } else {
                HashSet::new()
            },
            output: HashMap::new(),
        }
    }

    /// Notes a sampled token.
    pub fn record(&mut self, token: u32) {
        *self.output.entry(token).or_insert(0) += 1;
    }

    /// Applies the request's rules to `logits` in place. `generated` is the
    /// number of tokens sampled so far; `stop_ids` are the ids that would end
    /// the sequence (end of sequence and `stop_token_ids`).
    pub fn apply(
        &self,
        params: &SamplingParams,
        generated: usize,
        stop_ids: &[u32],
        logits: &mut [f32],
    ) {
        if generated < params.min_tokens {
            for &id in stop_ids {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        for &(id, bias) in &params.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += bias;
            }
        }
        let r = params.repetition_penalty;
        if r != 1.0 {
            let penalize = |l: &mut f32| *l = if *l > 0.0 { *l / r } else { *l * r };
            for &id in self
                .prompt
                .iter()
                .chain(self.output.keys().filter(|id| !self.prompt.contains(*id)))
            {
                if let Some(l) = logits.get_mut(id as usize) {
                    penalize(l);
                }
            }
        }
        let (f, p) = (params.frequency_penalty, params.presence_penalty);
        if f != 0.0 || p != 0.0 {
            for (&id, &count) in &self.output {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l -= f * count as f32 + p;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> SamplingParams {
        SamplingParams::greedy(8)
    }

    #[test]
    fn no_rules_leave_the_logits_as_they_are() {
        let p = params();
        assert!(!p.processes_logits(0));
        let mut s = LogitState::new(&p, &[1, 2]);
        s.record(1);
        let mut l = vec![1.0, -2.0, 3.0];
        s.apply(&p, 1, &[0], &mut l);
        assert_eq!(l, [1.0, -2.0, 3.0]);
    }

    #[test]
    fn frequency_and_presence_count_only_generated_tokens() {
        let p = SamplingParams {
            frequency_penalty: 0.5,
            presence_penalty: 1.0,
            ..params()
        };
        let mut s = LogitState::new(&p, &[0, 3]);
        for t in [1, 1, 2] {
            s.record(t);
        }
        let mut l = vec![0.0; 4];
        s.apply(&p, 3, &[], &mut l);
        assert_eq!(l, [0.0, -2.0, -1.5, 0.0]);
    }

    #[test]
    fn repetition_divides_positive_and_multiplies_negative_logits_of_prompt_and_output() {
        let p = SamplingParams {
            repetition_penalty: 2.0,
            ..params()
        };
        let mut s = LogitState::new(&p, &[0, 1, 1]);
        s.record(1);
        s.record(2);
        let mut l = vec![4.0, -4.0, 3.0, 5.0];
        s.apply(&p, 2, &[], &mut l);
        // Once per token, however often it appeared.
        assert_eq!(l, [2.0, -8.0, 1.5, 5.0]);
    }

    #[test]
    fn min_tokens_masks_the_stop_ids_until_reached_and_bias_adds() {
        let p = SamplingParams {
            min_tokens: 2,
            logit_bias: vec![(1, 5.0), (3, -100.0), (99, 1.0)],
            ..params()
        };
        let s = LogitState::new(&p, &[0]);
        assert!(p.processes_logits(1));
        let mut l = vec![0.0; 4];
        s.apply(&p, 1, &[2], &mut l);
        assert_eq!(l, [0.0, 5.0, f32::NEG_INFINITY, -100.0]);
        let mut l = vec![0.0; 4];
        s.apply(&p, 2, &[2], &mut l);
        assert_eq!(l, [0.0, 5.0, 0.0, -100.0]);
    }
}
