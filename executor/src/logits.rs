//! Reductions over one row of logits that both sampling and the log
//! probabilities need. A leaf (it uses nothing of the crate), so neither of
//! those modules depends on the other for it.

/// The largest finite logit; negative infinity when there is none.
pub fn finite_max(logits: &[f32]) -> f32 {
    // Eight lanes of branch-free maxima, which the compiler vectorizes.
    let pick = |m: f32, v: f32| if v.is_finite() && v > m { v } else { m };
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = logits.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &v) in lanes.iter_mut().zip(c) {
            *m = pick(*m, v);
        }
    }
    let m = rest.iter().fold(f32::NEG_INFINITY, |m, &v| pick(m, v));
    lanes.iter().fold(m, |a, &b| if b > a { b } else { a })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finite_max_skips_masked_and_non_finite_logits_in_every_lane() {
        for len in [0usize, 1, 7, 8, 9, 33] {
            for at in 0..len {
                let mut row = vec![f32::NEG_INFINITY; len];
                row[at] = -3.0;
                if at + 1 < len {
                    row[at + 1] = f32::NAN;
                }
                if at > 0 {
                    row[at - 1] = f32::INFINITY;
                }
                assert_eq!(finite_max(&row), -3.0, "len {len} at {at}");
            }
            assert_eq!(finite_max(&vec![f32::NAN; len]), f32::NEG_INFINITY);
        }
    }
}
