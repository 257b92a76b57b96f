//! The step-cost model: how long a step takes, as a function of what it
//! computes, learned online from the steps the engine runs.
//!
//! A step's time on this engine is close to linear in four features: a fixed
//! part (thread wake-ups, the norm and projection overheads that do not scale),
//! the tokens it computes (every token passes through every matrix), the rows
//! it samples (each needs the vocabulary projection and the sampler), and the
//! query-key pairs its attention visits (`len * start + len * (len + 1) / 2`
//! for a chunk of `len` tokens from position `start`). The planner asks the
//! model what a candidate step would cost and packs it up to a latency target;
//! the engine tells it what each step actually took.
//!
//! The fit is least squares with exponential forgetting (each observation's
//! weight decays by [`FORGET`] per step, so about the last 200 steps count),
//! regularized toward a prior so the model answers sensibly before it has seen
//! a step and when the steps seen so far cannot tell two features apart (a run
//! of single-row decodes has tokens = rows = 1). Negative coefficients are
//! clamped to zero, so adding work never predicts less time. Solving is a 4x4
//! elimination per observation: O(1), a few hundred nanoseconds.

/// What a step computes, in the model's units.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepFeatures {
    /// Tokens computed (decode rows count one each).
    pub tokens: f64,
    /// Rows whose logits are computed and sampled.
    pub sampled: f64,
    /// Query-key pairs attention visits, over every chunk.
    pub attention_pairs: f64,
}

impl StepFeatures {
    /// The features of one chunk of `len` tokens starting at `start`.
    pub fn chunk(start: usize, len: usize, sample: bool) -> Self {
        let (s, l) = (start as f64, len as f64);
        StepFeatures {
            tokens: l,
            sampled: if sample { 1.0 } else { 0.0 },
            attention_pairs: l * s + l * (l + 1.0) / 2.0,
        }
    }

    /// The regression's input vector; attention in thousands of pairs keeps
    /// the four columns within a few orders of magnitude of each other.
    fn vector(&self) -> [f64; N] {
        [
            1.0,
            self.tokens,
            self.sampled,
            self.attention_pairs / 1000.0,
        ]
    }

    pub fn is_empty(&self) -> bool {
        self.tokens == 0.0
    }
}

impl std::ops::Add for StepFeatures {
    type Output = StepFeatures;

    fn add(self, o: StepFeatures) -> StepFeatures {
        StepFeatures {
            tokens: self.tokens + o.tokens,
            sampled: self.sampled + o.sampled,
            attention_pairs: self.attention_pairs + o.attention_pairs,
        }
    }
}

const N: usize = 4;

/// Weight kept by an observation per later observation.
pub const FORGET: f64 = 0.995;

/// Prior coefficients, ms: fixed, per token, per sampled row, per thousand
/// attention pairs. Of the order a 135M-parameter model measures on two CPU
/// cores; the first real steps outweigh it.
const PRIOR: [f64; N] = [5.0, 1.5, 0.3, 0.4];

/// How much the prior counts, per coefficient, in observation units.
const PRIOR_WEIGHT: f64 = 0.5;

/// Online least-squares model of a step's duration in milliseconds.
#[derive(Debug, Clone)]
pub struct CostModel {
    /// Decayed sum of x xᵀ over observations.
    xx: [[f64; N]; N],
    /// Decayed sum of x y.
    xy: [f64; N],
    coef: [f64; N],
    observations: u64,
    /// Smoothed |predicted − measured| / measured of recent steps, taken
    /// before each observation updates the fit.
    relative_error: f64,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            xx: [[0.0; N]; N],
            xy: [0.0; N],
            coef: PRIOR,
            observations: 0,
            relative_error: 0.0,
        }
    }
}

/// A read-only view of the model, for metrics and the admission report.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct CostSnapshot {
    pub fixed_ms: f64,
    pub per_token_ms: f64,
    pub per_sampled_row_ms: f64,
    pub per_1k_attention_pairs_ms: f64,
    pub observations: u64,
    /// Mean relative prediction error of recent steps (smoothed), 0..
    pub relative_error: f64,
}

impl CostModel {
    /// Predicted duration of a step with these features, in milliseconds.
    pub fn predict_ms(&self, f: &StepFeatures) -> f64 {
        if f.is_empty() {
            return 0.0;
        }
        let x = f.vector();
        (0..N).map(|i| self.coef[i] * x[i]).sum()
    }

    /// Learns from a step that took `ms` milliseconds. Ignores empty steps
    /// and non-finite or non-positive times.
    pub fn observe(&mut self, f: &StepFeatures, ms: f64) {
        if f.is_empty() || !ms.is_finite() || ms <= 0.0 {
            return;
        }
        let predicted = self.predict_ms(f);
        let err = (predicted - ms).abs() / ms;
        self.relative_error = if self.observations == 0 {
            err
        } else {
            0.95 * self.relative_error + 0.05 * err
        };
        let x = f.vector();
        for i in 0..N {
            self.xy[i] = FORGET * self.xy[i] + x[i] * ms;
            for j in 0..N {
                self.xx[i][j] = FORGET * self.xx[i][j] + x[i] * x[j];
            }
        }
        self.observations += 1;
        self.refit();
    }

    pub fn snapshot(&self) -> CostSnapshot {
        CostSnapshot {
            fixed_ms: self.coef[0],
            per_token_ms: self.coef[1],
            per_sampled_row_ms: self.coef[2],
            per_1k_attention_pairs_ms: self.coef[3],
            observations: self.observations,
            relative_error: self.relative_error,
        }
    }

    /// Solves (XᵀX + λI) θ = Xᵀy + λ θ₀ and clamps negative coefficients.
    fn refit(&mut self) {
        let mut a = self.xx;
        let mut b = self.xy;
        for i in 0..N {
            a[i][i] += PRIOR_WEIGHT;
            b[i] += PRIOR_WEIGHT * PRIOR[i];
        }
        if let Some(theta) = solve(a, b) {
            for (c, t) in self.coef.iter_mut().zip(theta) {
                *c = if t.is_finite() { t.max(0.0) } else { *c };
            }
        }
    }
}

/// Gaussian elimination with partial pivoting; None when singular.
fn solve(mut a: [[f64; N]; N], mut b: [f64; N]) -> Option<[f64; N]> {
    for col in 0..N {
        let pivot = (col..N).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..N {
            let f = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (x, p) in a[row][col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= f * p;
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0; N];
    for i in (0..N).rev() {
        let tail: f64 = (i + 1..N).map(|k| a[i][k] * x[k]).sum();
        x[i] = (b[i] - tail) / a[i][i];
    }
    Some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truth(f: &StepFeatures) -> f64 {
        3.0 + 2.0 * f.tokens + 0.5 * f.sampled + 0.2 * f.attention_pairs / 1000.0
    }

    /// Steps of the mixes an engine runs: decodes alone, prefill chunks
    /// alone, and both together.
    fn mixes() -> Vec<StepFeatures> {
        let mut out = Vec::new();
        for rows in [1usize, 2, 4, 8, 16] {
            for prefill in [0usize, 16, 64, 256] {
                let mut f = StepFeatures::default();
                for r in 0..rows {
                    f = f + StepFeatures::chunk(100 + 37 * r, 1, true);
                }
                if prefill > 0 {
                    f = f + StepFeatures::chunk(0, prefill, true);
                }
                out.push(f);
            }
        }
        out
    }

    #[test]
    fn it_recovers_a_linear_cost_from_mixed_steps() {
        let mut m = CostModel::default();
        for _ in 0..20 {
            for f in mixes() {
                m.observe(&f, truth(&f));
            }
        }
        for f in mixes() {
            let (p, t) = (m.predict_ms(&f), truth(&f));
            assert!((p - t).abs() / t < 0.02, "predicted {p}, true {t}");
        }
        assert!(m.snapshot().relative_error < 0.05);
    }

    #[test]
    fn before_any_step_it_answers_from_the_prior_and_empty_steps_cost_nothing() {
        let m = CostModel::default();
        let one = StepFeatures::chunk(0, 1, true);
        assert!(m.predict_ms(&one) > 0.0);
        assert_eq!(m.predict_ms(&StepFeatures::default()), 0.0);
        let more = one + StepFeatures::chunk(10, 32, true);
        assert!(m.predict_ms(&more) > m.predict_ms(&one));
    }

    #[test]
    fn collinear_steps_keep_every_coefficient_non_negative_and_predictions_monotone() {
        let mut m = CostModel::default();
        // Only single-row decodes: tokens and rows cannot be told apart.
        for i in 0..500 {
            let f = StepFeatures::chunk(50 + i % 7, 1, true);
            m.observe(&f, 9.0);
        }
        let s = m.snapshot();
        for c in [
            s.fixed_ms,
            s.per_token_ms,
            s.per_sampled_row_ms,
            s.per_1k_attention_pairs_ms,
        ] {
            assert!(c >= 0.0 && c.is_finite(), "{s:?}");
        }
        let one = StepFeatures::chunk(50, 1, true);
        assert!((m.predict_ms(&one) - 9.0).abs() < 0.5);
        let two = one + StepFeatures::chunk(60, 1, true);
        assert!(m.predict_ms(&two) >= m.predict_ms(&one));
    }

    #[test]
    fn it_follows_a_machine_that_slows_down() {
        let mut m = CostModel::default();
        for _ in 0..20 {
            for f in mixes() {
                m.observe(&f, truth(&f));
            }
        }
        for _ in 0..40 {
            for f in mixes() {
                m.observe(&f, 2.0 * truth(&f));
            }
        }
        let f = mixes()[10];
        let ratio = m.predict_ms(&f) / truth(&f);
        assert!((ratio - 2.0).abs() < 0.1, "ratio {ratio}");
    }

    #[test]
    fn nonsense_times_are_ignored() {
        let mut m = CostModel::default();
        let f = StepFeatures::chunk(0, 8, true);
        let before = m.predict_ms(&f);
        for ms in [f64::NAN, f64::INFINITY, 0.0, -3.0] {
            m.observe(&f, ms);
        }
        m.observe(&StepFeatures::default(), 5.0);
        assert_eq!(m.predict_ms(&f), before);
        assert_eq!(m.snapshot().observations, 0);
    }
}
