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
    let max = crate::logits::finite_max(logits);
    if !max.is_finite() {
        return TokenLogprob {
            id: chosen,
            logprob: LOGPROB_FLOOR,
            top: Vec::new(),
        };
    }
    let sum = exp_sum(logits, max);
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
        // One pass keeping the best `top_n` sorted (value descending, id
        // ascending): almost every logit is turned away by one comparison
        // with the current last. Ids arrive ascending, so a tie never
        // displaces an earlier id.
        scratch.clear();
        for (ci, chunk) in logits.chunks(8).enumerate() {
            // A chunk whose best is no better than the current last is
            // skipped whole (NaN compares false and never counts).
            if scratch.len() == top_n {
                let best = chunk
                    .iter()
                    .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
                if best <= scratch[top_n - 1].0 {
                    continue;
                }
            }
            for (k, &v) in chunk.iter().enumerate() {
                let i = ci * 8 + k;
                if !v.is_finite() {
                    continue;
                }
                if scratch.len() == top_n {
                    if v <= scratch[top_n - 1].0 {
                        continue;
                    }
                    scratch.pop();
                }
                let at = scratch.partition_point(|&(t, _)| t >= v);
                scratch.insert(at, (v, i as u32));
            }
        }
        top.extend(scratch.iter().map(|&(v, id)| (id, lp(v))));
    }
    TokenLogprob {
        id: chosen,
        logprob,
        top,
    }
}

/// The sum of `e^(v - max)` over the finite logits: each term with a
/// branch-free polynomial exp (a libm call per token cost ~0.5 ms a row at
/// 50k tokens), summed in f64 over eight lanes; with AVX2 and FMA where the
/// CPU has them, as the kernels dispatch.
fn exp_sum(logits: &[f32], max: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: both features were detected on this CPU.
        return unsafe { exp_sum_avx2(logits, max) };
    }
    exp_sum_lanes(logits, max)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn exp_sum_avx2(logits: &[f32], max: f32) -> f64 {
    exp_sum_lanes(logits, max)
}

#[inline(always)]
fn exp_sum_lanes(logits: &[f32], max: f32) -> f64 {
    let mut lanes = [0f64; 8];
    let chunks = logits.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (acc, &v) in lanes.iter_mut().zip(c) {
            *acc += exp_term(v, max) as f64;
        }
    }
    lanes.iter().sum::<f64>() + rest.iter().map(|&v| exp_term(v, max) as f64).sum::<f64>()
}

/// `e^(v - max)` for a finite `v` at most `max`, 0 for a masked (non-finite)
/// logit.
#[inline(always)]
fn exp_term(v: f32, max: f32) -> f32 {
    let d = v - max;
    let e = exp_nonpositive(if d < -87.0 { -87.0 } else { d });
    if v.is_finite() { e } else { 0.0 }
}

/// `e^x` for `x` in [-87, 0], within 5e-7 relative: `x = n ln 2 + r` with
/// `|r| <= ln 2 / 2`, a degree-6 Taylor polynomial for `e^r`, and `2^n`
/// built in the exponent bits. Branch-free, so a loop of it vectorizes.
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    // Adding 1.5 * 2^23 rounds to the nearest integer.
    const ROUND: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // `t`'s low mantissa bits hold n in two's complement: 2^n from them,
    // in integer lanes (a saturating float-to-int cast would not vectorize).
    let scale = f32::from_bits(t.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23);
    p * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_polynomial_exp_is_within_5e_7_of_libm() {
        let mut worst = 0f64;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let got = super::exp_nonpositive(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
        }
        assert!(worst < 5e-7, "{worst}");
    }

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
    fn among_many_ties_the_lowest_ids_win() {
        let logits: Vec<f32> = (0..5000).map(|i| (i % 7) as f32).collect();
        let t = token_logprob(&logits, 0, 20, &mut Vec::new());
        let ids: Vec<u32> = t.top.iter().map(|p| p.0).collect();
        let want: Vec<u32> = (0..20).map(|k| 6 + 7 * k).collect();
        assert_eq!(ids, want);
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
