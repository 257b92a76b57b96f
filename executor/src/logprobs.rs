//! Log probabilities of sampled tokens, as OpenAI's `logprobs` reports them.
//!
//! They are the log-softmax of the model's raw logits for the step, before
//! temperature, top-k, top-p, penalties or bias: what the model thinks of
//! each token, the same whatever sampling settings drew it. That is vLLM's
//! default (`logprobs_mode = raw_logprobs`) and what a scoring job wants: a
//! label's probability that does not move with the temperature used to draw
//! it. Computed in f32 over the row with the sum in f64; non-finite logits
//! (masked tokens) get no probability and never appear among the top.

/// The log probability of one sampled token and of the most likely
/// alternatives at its position.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TokenLogprob {
    /// The sampled token.
    pub id: u32,
    /// Its log probability, at least [`LOGPROB_FLOOR`] (a masked logit).
    pub logprob: f32,
    /// The `top_logprobs` most likely tokens at this position, most likely
    /// first, ties towards the lower id.
    pub top: Vec<(u32, f32)>,
}

/// Most alternatives a request may ask for (OpenAI's `top_logprobs` limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// The log probability reported for a token that has none (a masked or
/// non-finite logit): OpenAI's -9999.0, a finite number every JSON client
/// reads.
pub const LOGPROB_FLOOR: f32 = -9999.0;

/// The log probability of `chosen` under `logits` and the `top_n` most
/// likely tokens. `scratch` is reused across calls to avoid allocation.
pub fn token_logprob(
    logits: &[f32],
    chosen: u32,
    top_n: usize,
    scratch: &mut Vec<(f32, u32)>,
) -> TokenLogprob {
    let max = crate::sampling::finite_max(logits);
    if !max.is_finite() {
        return TokenLogprob {
            id: chosen,
            logprob: LOGPROB_FLOOR,
            top: Vec::new(),
        };
    }
    let sum: f64 = logits
        .iter()
        .filter(|v| v.is_finite())
        .map(|&v| ((v - max) as f64).exp())
        .sum();
    let log_z = max as f64 + sum.ln();
    let lp = |v: f32| -> f32 {
        if v.is_finite() {
            ((v as f64 - log_z) as f32).max(LOGPROB_FLOOR)
        } else {
            LOGPROB_FLOOR
        }
    };
    let logprob = logits
        .get(chosen as usize)
        .map_or(LOGPROB_FLOOR, |&v| lp(v));
    let top_n = top_n.min(MAX_TOP_LOGPROBS);
    let mut top = Vec::with_capacity(top_n);
    if top_n > 0 {
        scratch.clear();
        scratch.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_finite())
                .map(|(i, &v)| (v, i as u32)),
        );
        let desc = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        let n = top_n.min(scratch.len());
        if n > 0 && n < scratch.len() {
            scratch.select_nth_unstable_by(n - 1, desc);
        }
        scratch.truncate(n);
        scratch.sort_unstable_by(desc);
        top.extend(scratch.iter().map(|&(v, id)| (id, lp(v))));
    }
    TokenLogprob {
        id: chosen,
        logprob,
        top,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(logits: &[f32]) -> Vec<f64> {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let z: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
        logits.iter().map(|&v| v as f64 - max - z.ln()).collect()
    }

    #[test]
    fn matches_a_log_softmax_and_sorts_the_top() {
        let logits: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919) % 1009) as f32 / 97.0)
            .collect();
        let want = reference(&logits);
        let mut scratch = Vec::new();
        let t = token_logprob(&logits, 123, 20, &mut scratch);
        assert!((t.logprob as f64 - want[123]).abs() < 1e-5);
        assert_eq!(t.top.len(), 20);
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| want[b].total_cmp(&want[a]).then(a.cmp(&b)));
        for (k, &(id, lp)) in t.top.iter().enumerate() {
            assert_eq!(id as usize, order[k]);
            assert!((lp as f64 - want[order[k]]).abs() < 1e-5);
        }
        let total: f64 = want.iter().map(|l| l.exp()).sum();
        assert!((total - 1.0).abs() < 1e-9);
    }

    #[test]
    fn ties_go_to_the_lower_id_and_masked_tokens_never_appear() {
        let logits = [1.0, f32::NEG_INFINITY, 1.0, f32::NAN, 0.5];
        let t = token_logprob(&logits, 1, 20, &mut Vec::new());
        assert_eq!(t.logprob, LOGPROB_FLOOR);
        let ids: Vec<u32> = t.top.iter().map(|p| p.0).collect();
        assert_eq!(ids, vec![0, 2, 4]);
        let p: f64 = t.top.iter().map(|p| (p.1 as f64).exp()).sum();
        assert!((p - 1.0).abs() < 1e-6);
    }

    #[test]
    fn zero_alternatives_and_an_all_masked_row() {
        let t = token_logprob(&[0.0, 0.0], 0, 0, &mut Vec::new());
        assert!((t.logprob - 0.5f32.ln()).abs() < 1e-6);
        assert!(t.top.is_empty());
        let t = token_logprob(&[f32::NEG_INFINITY; 3], 2, 5, &mut Vec::new());
        assert_eq!(t.logprob, LOGPROB_FLOOR);
        assert!(t.top.is_empty());
        // An id past the row (a corrupt plan) is not a panic.
        let t = token_logprob(&[0.0], 9, 1, &mut Vec::new());
        assert_eq!(t.logprob, LOGPROB_FLOOR);
    }
}
