//! Token rates measured from the steps the engine runs, as a ratio of decayed
//! sums (tokens over seconds) rather than a smoothed mean of per-step rates.
//!
//! A mean of per-step rates weighs every step alike, so a one-token prefill,
//! whose step is all fixed cost, reads as a prefill rate of a few dozen tokens
//! a second and takes many steps to forget; admission then refused a burst
//! of short chats on a freshly loaded revision as if each prompt would take
//! seconds. Summing tokens and seconds weighs each step by its work, so a
//! step that computed one token counts for one token's worth.
//!
//! The prefill rate is not published until it rests on [`MIN_PREFILL_TOKENS`]
//! tokens of decayed weight: one short prompt's step, where fixed cost and
//! the sampled row dominate, is not yet a rate to refuse requests by. Until
//! then admission falls back to what it had before any step (a capacity
//! profile, the step-cost model).

/// Weight an observation keeps per later observation: about the last 20
/// steps count.
const DECAY: f64 = 0.95;

/// Decayed prompt tokens the prefill rate must rest on before it is
/// published: a few short prompts, or one long one. Prefill steps of 7 or
/// more tokens on average keep a steady rate above it.
pub const MIN_PREFILL_TOKENS: f64 = 128.0;

/// Tokens per second over recent steps, weighted by their tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Rate {
    tokens: f64,
    secs: f64,
    min_tokens: f64,
}

impl Rate {
    /// A rate published once its decayed tokens reach `min_tokens`.
    pub fn published_from(min_tokens: f64) -> Self {
        Rate {
            min_tokens,
            ..Rate::default()
        }
    }

    /// A step computed `tokens` in `secs` seconds. Non-finite or
    /// non-positive times are ignored.
    pub fn observe(&mut self, tokens: usize, secs: f64) {
        if tokens == 0 || !secs.is_finite() || secs <= 0.0 {
            return;
        }
        self.tokens = self.tokens * DECAY + tokens as f64;
        self.secs = self.secs * DECAY + secs;
    }

    /// Tokens per second; 0 until the steps observed computed the rate's
    /// minimum (decayed), and before the first observation.
    pub fn per_second(&self) -> f64 {
        if self.secs > 0.0 && self.tokens >= self.min_tokens {
            self.tokens / self.secs
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_token_step_barely_moves_a_rate_measured_over_real_prompts() {
        let mut r = Rate::default();
        assert_eq!(r.per_second(), 0.0);
        // A warm-up's one-token prefill: 50 ms of fixed cost.
        r.observe(1, 0.05);
        assert!((r.per_second() - 20.0).abs() < 1e-9);
        // Then prompts of 200 tokens at 1,000 tokens a second.
        for _ in 0..5 {
            r.observe(200, 0.2);
        }
        assert!(r.per_second() > 950.0, "{}", r.per_second());
    }

    #[test]
    fn a_rate_is_published_once_it_rests_on_enough_tokens() {
        let mut r = Rate::published_from(MIN_PREFILL_TOKENS);
        // One short prompt: mostly fixed cost.
        r.observe(30, 0.3);
        assert_eq!(r.per_second(), 0.0);
        for _ in 0..20 {
            r.observe(30, 0.03);
        }
        assert!(r.per_second() > 500.0, "{}", r.per_second());
        // One long prompt is enough on its own.
        let mut long = Rate::published_from(MIN_PREFILL_TOKENS);
        long.observe(512, 0.5);
        assert!((long.per_second() - 1024.0).abs() < 1e-9);
    }

    #[test]
    fn old_steps_are_forgotten() {
        let mut r = Rate::default();
        for _ in 0..50 {
            r.observe(100, 1.0);
        }
        for _ in 0..100 {
            r.observe(100, 0.1);
        }
        // The 50 slow steps keep 0.95^100 (0.6 %) of their weight.
        assert!(r.per_second() > 940.0, "{}", r.per_second());
    }

    #[test]
    fn hostile_figures_are_ignored() {
        let mut r = Rate::default();
        r.observe(10, f64::NAN);
        r.observe(10, 0.0);
        r.observe(10, -1.0);
        r.observe(0, 1.0);
        assert_eq!(r.per_second(), 0.0);
    }
}
