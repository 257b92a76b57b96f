//! Rotary position embedding tables, GGML "normal" (interleaved) convention:
//! pairs `(2i, 2i+1)` rotate by `pos * base^(-2i/d)`.
//!
//! The tables are computed once in f32 exactly as candle-transformers does, so
//! our forward pass and the reference agree bit for bit on this step.

pub struct Rope {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    pub fn new(head_dim: usize, base: f32, max_positions: usize) -> Self {
        let half = head_dim / 2;
        let theta: Vec<f32> = (0..head_dim)
            .step_by(2)
            .map(|i| 1f32 / base.powf(i as f32 / head_dim as f32))
            .collect();
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for pos in 0..max_positions {
            for &t in &theta {
                let a = pos as f32 * t;
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        Rope { half, cos, sin }
    }

    pub fn max_positions(&self) -> usize {
        self.cos.len() / self.half.max(1)
    }

    /// Rotates one head vector in place at position `pos`.
    #[inline]
    pub fn apply(&self, x: &mut [f32], pos: usize) {
        let c = &self.cos[pos * self.half..(pos + 1) * self.half];
        let s = &self.sin[pos * self.half..(pos + 1) * self.half];
        for i in 0..self.half {
            let (a, b) = (x[2 * i], x[2 * i + 1]);
            x[2 * i] = a * c[i] - b * s[i];
            x[2 * i + 1] = a * s[i] + b * c[i];
        }
    }
}
