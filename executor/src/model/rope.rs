//! Rotary position embedding tables in both GGML conventions:
//! - "normal" (interleaved): pairs `(2i, 2i+1)`;
//! - "neox": pairs `(i, i + n_rot/2)`;
//!
//! pair `i` rotating by `pos · freq_scale · base^(-2i/n_rot) / factor_i`, where
//! `n_rot` (`rope.dimension_count`) may be smaller than the head dimension
//! (the rest of the head passes through), `freq_scale` is linear position
//! scaling and `factor_i` the optional per-pair frequency factors of the
//! `rope_freqs` tensor (Llama 3's rope scaling; llama.cpp divides theta by it).
//!
//! Without scaling or factors the tables are computed in f32 exactly as
//! candle-transformers does, so our forward pass and the reference agree bit
//! for bit on this step.

use crate::model::config::RopeStyle;

pub struct Rope {
    half: usize,
    style: RopeStyle,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    /// Plain rope over the whole head, interleaved pairs (Llama's).
    pub fn new(head_dim: usize, base: f32, max_positions: usize) -> Self {
        Self::with(head_dim, base, max_positions, RopeStyle::Normal, 1.0, None)
    }

    /// Rope over the first `n_rot` dimensions of a head. `factors`, when
    /// given, has `n_rot / 2` entries.
    pub fn with(
        n_rot: usize,
        base: f32,
        max_positions: usize,
        style: RopeStyle,
        freq_scale: f32,
        factors: Option<&[f32]>,
    ) -> Self {
        let half = n_rot / 2;
        let theta: Vec<f32> = (0..n_rot)
            .step_by(2)
            .enumerate()
            .map(|(j, i)| {
                let t = 1f32 / base.powf(i as f32 / n_rot as f32);
                match factors {
                    Some(f) => t / f[j],
                    None => t,
                }
            })
            .collect();
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for pos in 0..max_positions {
            for &t in &theta {
                let mut a = pos as f32 * t;
                if freq_scale != 1.0 {
                    a *= freq_scale;
                }
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        Rope {
            half,
            style,
            cos,
            sin,
        }
    }

    pub fn max_positions(&self) -> usize {
        self.cos.len() / self.half.max(1)
    }

    /// Rotates one head vector in place at position `pos`.
    #[inline]
    pub fn apply(&self, x: &mut [f32], pos: usize) {
        let c = &self.cos[pos * self.half..(pos + 1) * self.half];
        let s = &self.sin[pos * self.half..(pos + 1) * self.half];
        match self.style {
            RopeStyle::Normal => {
                for i in 0..self.half {
                    let (a, b) = (x[2 * i], x[2 * i + 1]);
                    x[2 * i] = a * c[i] - b * s[i];
                    x[2 * i + 1] = a * s[i] + b * c[i];
                }
            }
            RopeStyle::Neox => {
                let h = self.half;
                for i in 0..h {
                    let (a, b) = (x[i], x[i + h]);
                    x[i] = a * c[i] - b * s[i];
                    x[i + h] = a * s[i] + b * c[i];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neox_rotates_halves_and_leaves_the_unrotated_tail() {
        let r = Rope::with(4, 10_000.0, 8, RopeStyle::Neox, 1.0, None);
        let mut x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        r.apply(&mut x, 3);
        // Pair 0 is (x0, x2) at angle 3, pair 1 is (x1, x3) at 3/100.
        let (c0, s0) = (3f32.cos(), 3f32.sin());
        let a1 = 3.0 * (1.0 / 10_000f32.powf(0.5));
        let (c1, s1) = (a1.cos(), a1.sin());
        let want = [
            1.0 * c0 - 3.0 * s0,
            2.0 * c1 - 4.0 * s1,
            1.0 * s0 + 3.0 * c0,
            2.0 * s1 + 4.0 * c1,
            5.0,
            6.0,
        ];
        for (a, b) in x.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{x:?} vs {want:?}");
        }
    }

    #[test]
    fn linear_scaling_and_factors_slow_the_rotation() {
        // Position 8 at scale 1/8 is position 1 unscaled; a factor of 2 on a
        // pair is half its angle.
        let plain = Rope::with(8, 10_000.0, 16, RopeStyle::Neox, 1.0, None);
        let scaled = Rope::with(8, 10_000.0, 16, RopeStyle::Neox, 0.125, None);
        let f = [1.0, 2.0, 1.0, 1.0];
        let factored = Rope::with(8, 10_000.0, 16, RopeStyle::Neox, 1.0, Some(&f));
        let base = [0.5f32, -1.0, 0.25, 2.0, 1.5, -0.5, 0.75, 1.0];
        let (mut a, mut b) = (base, base);
        plain.apply(&mut a, 1);
        scaled.apply(&mut b, 8);
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
        let (mut c, mut d) = (base, base);
        factored.apply(&mut c, 2);
        plain.apply(&mut d, 2);
        assert_eq!((c[0], c[4]), (d[0], d[4]));
        let angle = 1.0 / 10_000f32.powf(0.25); // pair 1 at position 2, halved
        assert!((c[1] - (base[1] * angle.cos() - base[5] * angle.sin())).abs() < 1e-6);
    }
}
