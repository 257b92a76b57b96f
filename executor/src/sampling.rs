//! Next-token selection: greedy, temperature, top-k, top-p, with a seeded RNG
//! that belongs to the sequence.
//!
//! The RNG state lives with each sequence and is advanced exactly once per
//! sampled token, so the same seed and request give the same tokens whatever
//! else shares the batch. Ties are broken towards the lower token id.

use crate::logits::finite_max;
use crate::request::SamplingParams;

/// xoshiro256** seeded through splitmix64: small, fast, and stable across
/// versions (unlike a dependency whose stream could change under us).
#[derive(Clone, Debug)]
pub struct SeqRng {
    s: [u64; 4],
}

impl SeqRng {
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        SeqRng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Index of the largest finite logit; the lowest index wins ties.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best_v = v;
            best = i;
        }
    }
    best as u32
}

/// How many candidates are sorted before falling back to a full sort for top-p.
const TOP_P_FAST_CANDIDATES: usize = 1024;

/// Picks the next token. `scratch` is reused across calls to avoid allocation.
pub fn sample(
    logits: &[f32],
    params: &SamplingParams,
    rng: &mut SeqRng,
    scratch: &mut Vec<(f32, u32)>,
) -> u32 {
    if params.is_greedy() || logits.len() <= 1 {
        return argmax(logits);
    }
    let inv_t = 1.0 / params.temperature;
    let max = finite_max(logits);
    if !max.is_finite() {
        return argmax(logits);
    }
    scratch.clear();
    scratch.extend(
        logits
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_finite())
            .map(|(i, &v)| (((v - max) * inv_t).exp(), i as u32)),
    );
    let by_prob_desc = |a: &(f32, u32), b: &(f32, u32)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));

    let k = match params.top_k {
        Some(k) if k > 0 && k < scratch.len() => k,
        _ => scratch.len(),
    };
    if k < scratch.len() {
        scratch.select_nth_unstable_by(k - 1, by_prob_desc);
        scratch.truncate(k);
    }
    let total: f64 = scratch.iter().map(|p| p.0 as f64).sum();
    if params.top_p < 1.0 {
        let target = params.top_p as f64 * total;
        let mut n = scratch.len();
        if n > TOP_P_FAST_CANDIDATES {
            // Exact shortcut: if the best candidates already hold the nucleus
            // mass, the rest can never enter it.
            scratch.select_nth_unstable_by(TOP_P_FAST_CANDIDATES - 1, by_prob_desc);
            let head: f64 = scratch[..TOP_P_FAST_CANDIDATES]
                .iter()
                .map(|p| p.0 as f64)
                .sum();
            if head >= target {
                scratch.truncate(TOP_P_FAST_CANDIDATES);
                n = TOP_P_FAST_CANDIDATES;
            }
        }
        scratch[..n].sort_unstable_by(by_prob_desc);
        let mut acc = 0.0f64;
        let mut keep = n;
        for (i, p) in scratch[..n].iter().enumerate() {
            acc += p.0 as f64;
            if acc >= target {
                keep = i + 1;
                break;
            }
        }
        scratch.truncate(keep);
    } else {
        // A canonical order keeps the draw independent of select_nth's layout.
        scratch.sort_unstable_by(by_prob_desc);
    }
    let mass: f64 = scratch.iter().map(|p| p.0 as f64).sum();
    let mut u = rng.next_f64() * mass;
    for &(p, id) in scratch.iter() {
        u -= p as f64;
        if u < 0.0 {
            return id;
        }
    }
    scratch.last().map(|p| p.1).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_k: Option<usize>, top_p: f32) -> SamplingParams {
        SamplingParams {
            temperature,
            top_k,
            top_p,
            ..SamplingParams::greedy(1)
        }
    }

    #[test]
    fn greedy_picks_the_largest_logit_and_the_lowest_id_on_ties() {
        assert_eq!(argmax(&[0.1, 3.0, 3.0, -1.0]), 1);
        let mut rng = SeqRng::new(1);
        assert_eq!(
            sample(
                &[0.0, 5.0, 1.0],
                &params(0.0, None, 1.0),
                &mut rng,
                &mut Vec::new()
            ),
            1
        );
    }

    #[test]
    fn the_same_seed_gives_the_same_draws() {
        let logits: Vec<f32> = (0..500).map(|i| ((i * 37) % 101) as f32 / 10.0).collect();
        let p = params(0.9, Some(50), 0.95);
        let draw = |seed| {
            let mut rng = SeqRng::new(seed);
            let mut s = Vec::new();
            (0..20)
                .map(|_| sample(&logits, &p, &mut rng, &mut s))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn top_k_one_is_greedy_and_top_k_limits_the_support() {
        let logits = [1.0, 4.0, 3.0, 2.0];
        let mut rng = SeqRng::new(3);
        let mut s = Vec::new();
        for _ in 0..100 {
            let t = sample(&logits, &params(1.0, Some(2), 1.0), &mut rng, &mut s);
            assert!(t == 1 || t == 2);
        }
        assert_eq!(
            sample(&logits, &params(1.0, Some(1), 1.0), &mut rng, &mut s),
            1
        );
    }

    #[test]
    fn top_p_keeps_only_the_nucleus() {
        // Probabilities roughly 0.64, 0.24, 0.09, 0.03: top_p 0.5 keeps only id 0.
        let logits = [3.0, 2.0, 1.0, 0.0];
        let mut rng = SeqRng::new(11);
        let mut s = Vec::new();
        for _ in 0..100 {
            assert_eq!(
                sample(&logits, &params(1.0, None, 0.5), &mut rng, &mut s),
                0
            );
        }
    }

    #[test]
    fn top_p_over_a_large_vocabulary_matches_the_full_sort() {
        let logits: Vec<f32> = (0..49_152)
            .map(|i| ((i * 7919) % 4093) as f32 / 400.0)
            .collect();
        let p = params(1.0, None, 0.9);
        let mut a = SeqRng::new(5);
        let mut s = Vec::new();
        let fast: Vec<u32> = (0..10)
            .map(|_| sample(&logits, &p, &mut a, &mut s))
            .collect();
        // Reference: plain full sort.
        let mut b = SeqRng::new(5);
        let reference: Vec<u32> = (0..10)
            .map(|_| {
                let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let mut v: Vec<(f32, u32)> = logits
                    .iter()
                    .enumerate()
                    .map(|(i, &x)| ((x - max).exp(), i as u32))
                    .collect();
                let total: f64 = v.iter().map(|p| p.0 as f64).sum();
                v.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                let mut acc = 0.0;
                let keep = v
                    .iter()
                    .position(|p| {
                        acc += p.0 as f64;
                        acc >= 0.9 * total
                    })
                    .unwrap()
                    + 1;
                v.truncate(keep);
                let mass: f64 = v.iter().map(|p| p.0 as f64).sum();
                let mut u = b.next_f64() * mass;
                for &(p, id) in &v {
                    u -= p as f64;
                    if u < 0.0 {
                        return id;
                    }
                }
                v.last().unwrap().1
            })
            .collect();
        assert_eq!(fast, reference);
    }

    #[test]
    fn non_finite_logits_never_panic() {
        let mut rng = SeqRng::new(1);
        let mut s = Vec::new();
        let t = sample(
            &[f32::NAN, f32::NEG_INFINITY, 1.0],
            &params(1.0, None, 0.9),
            &mut rng,
            &mut s,
        );
        assert_eq!(t, 2);
        let t = sample(
            &[f32::NAN, f32::NAN],
            &params(1.0, None, 0.9),
            &mut rng,
            &mut s,
        );
        assert!(t < 2);
    }
}
