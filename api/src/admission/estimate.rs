//! How long an arriving request would wait for its first token: the estimate
//! that both the server's objective (`admission.max_ttft_ms`) and a client's
//! `x-stoker-deadline-ms` are held to.
//!
//! Bounding the queue's length is not bounding the wait: 256 requests queued
//! behind 16 slots wait for 240 others to finish, however short each is. So
//! the estimate follows the request's place in the queue:
//!
//! - **Slots.** When the running slots are all taken, the request starts once
//!   `k` requests ahead of it have finished. At full slots the engine finishes
//!   about `slots / (mean output × step time)` requests a second, where the
//!   step time is the step-cost model's prediction for a full decode step (or
//!   the measured step time, when longer) and the mean output is that of the
//!   requests finished recently (their `max_tokens` bound it while nothing
//!   has finished). When requests have finished recently, their measured rate
//!   is a second estimate; the smaller of the two is taken, since a measured
//!   rate can be limited by arrivals rather than capacity, and the model by
//!   requests that stop before `max_tokens`.
//! - **Prefill.** The prompts ahead (waiting, or admitted by the engine and
//!   not yet through their prefill: a burst fills every slot at once, and
//!   the last of those waits for all the prefills before it), and then its own, at the
//!   measured prefill rate (the engine's live rate, else a capacity profile's,
//!   else the cost model's per-token cost).
//!
//! A request with nothing ahead of it is never refused by the objective:
//! refusing cannot make it start sooner.

use std::time::Duration;

use stoker_executor::scheduler::CostSnapshot;

/// The edge's view of the queue an arriving request joins.
#[derive(Clone, Copy, Debug, Default)]
pub struct QueueView {
    pub max_num_seqs: usize,
    pub running: usize,
    /// Requests waiting ahead of it (in the engine's fair-share order).
    pub waiting: usize,
    /// Prompt tokens prefilled before its own: those waiting ahead, and
    /// those of requests the engine admitted that have no first token yet.
    pub waiting_prompt_tokens: usize,
    /// Prompt tokens of the running requests.
    pub running_prompt_tokens: usize,
    /// `max_tokens` of every outstanding request, running or waiting.
    pub outstanding_max_tokens: usize,
    /// Mean output tokens of the requests that finished recently.
    pub recent_output_tokens: Option<f64>,
    /// Requests finished per second over the recent window; 0 when none.
    pub drain_rps: f64,
}

/// What the engine has measured of its own speed.
#[derive(Clone, Copy, Debug)]
pub struct Speed {
    /// Prompt tokens per second.
    pub prefill_tok_s: f64,
    pub cost: CostSnapshot,
    /// The engine's smoothed step time (zero before the first step).
    pub step_time: Duration,
}

/// The estimate, in its parts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TtftEstimate {
    /// Requests that must finish before this one gets a slot.
    pub slots_short: usize,
    /// Until a slot is free.
    pub queue: Duration,
    /// The prefill of the prompts waiting ahead of it.
    pub prefill_ahead: Duration,
    /// Its own prefill.
    pub own_prefill: Duration,
}

impl TtftEstimate {
    /// The wait before its own prefill starts.
    pub fn ahead(&self) -> Duration {
        self.queue + self.prefill_ahead
    }

    pub fn total(&self) -> Duration {
        self.ahead() + self.own_prefill
    }

    /// Every part scaled by `factor` (0 leaves it as it is): what admission
    /// learned of how this estimate compares with the first tokens seen.
    pub fn calibrated(mut self, factor: f64) -> Self {
        if factor > 0.0 && factor.is_finite() {
            self.queue = self.queue.mul_f64(factor);
            self.prefill_ahead = self.prefill_ahead.mul_f64(factor);
            self.own_prefill = self.own_prefill.mul_f64(factor);
        }
        self
    }
}

/// Seconds at most any part of the estimate says: a day is "never".
const CAP_SECS: f64 = 86_400.0;

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(if s.is_finite() {
        s.clamp(0.0, CAP_SECS)
    } else {
        CAP_SECS
    })
}

/// The time to first token of a request with `prompt_tokens` that arrives now.
pub fn estimate(q: &QueueView, speed: &Speed, prompt_tokens: usize) -> TtftEstimate {
    let prefill = |tokens: usize| secs(tokens as f64 / speed.prefill_tok_s.max(1e-3));
    let outstanding = q.running + q.waiting;
    let slots = q.max_num_seqs.max(1);
    let slots_short = (outstanding + 1).saturating_sub(slots);
    let queue = if slots_short == 0 {
        Duration::ZERO
    } else {
        let bound = q.outstanding_max_tokens as f64 / outstanding.max(1) as f64;
        let mean_out = q
            .recent_output_tokens
            .map_or(bound, |r| r.min(bound))
            .max(1.0);
        let mean_prompt = q.running_prompt_tokens as f64 / q.running.max(1) as f64;
        let c = &speed.cost;
        let rows = slots as f64;
        let context = mean_prompt + mean_out / 2.0;
        let step_ms = (c.fixed_ms
            + (c.per_token_ms + c.per_sampled_row_ms) * rows
            + c.per_1k_attention_pairs_ms * rows * context / 1000.0)
            .max(speed.step_time.as_secs_f64() * 1e3);
        let modelled = slots_short as f64 * mean_out / rows * step_ms / 1e3;
        let measured = if q.drain_rps > 0.0 {
            slots_short as f64 / q.drain_rps
        } else {
            f64::INFINITY
        };
        secs(modelled.min(measured))
    };
    TtftEstimate {
        slots_short,
        queue,
        prefill_ahead: prefill(q.waiting_prompt_tokens),
        own_prefill: prefill(prompt_tokens),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speed() -> Speed {
        Speed {
            prefill_tok_s: 1000.0,
            cost: CostSnapshot {
                fixed_ms: 4.0,
                per_token_ms: 1.0,
                per_sampled_row_ms: 0.0,
                per_1k_attention_pairs_ms: 0.0,
                observations: 100,
                relative_error: 0.1,
            },
            step_time: Duration::ZERO,
        }
    }

    fn ms(d: Duration) -> u128 {
        d.as_millis()
    }

    #[test]
    fn a_free_slot_and_an_empty_queue_wait_only_for_their_own_prefill() {
        let q = QueueView {
            max_num_seqs: 4,
            running: 3,
            running_prompt_tokens: 300,
            outstanding_max_tokens: 3000,
            ..Default::default()
        };
        let e = estimate(&q, &speed(), 500);
        assert_eq!(e.ahead(), Duration::ZERO);
        assert_eq!(ms(e.own_prefill), 500);
    }

    #[test]
    fn full_slots_wait_for_finishes_at_the_modelled_rate() {
        // 4 slots, 4 running + 4 waiting: the 9th needs 5 finishes. A full
        // step costs 4 + 4 × 1 = 8 ms; each request makes 100 tokens, so 4
        // finish every 800 ms: 5 finishes take 1000 ms.
        let q = QueueView {
            max_num_seqs: 4,
            running: 4,
            waiting: 4,
            waiting_prompt_tokens: 400,
            running_prompt_tokens: 400,
            outstanding_max_tokens: 8 * 100,
            ..Default::default()
        };
        let e = estimate(&q, &speed(), 100);
        assert_eq!(e.slots_short, 5);
        assert_eq!(ms(e.queue), 1000);
        assert_eq!(ms(e.prefill_ahead), 400);
        assert_eq!(ms(e.total()), 1500);
    }

    #[test]
    fn recent_outputs_shorten_a_long_max_tokens_and_never_lengthen_it() {
        let mut q = QueueView {
            max_num_seqs: 1,
            running: 1,
            outstanding_max_tokens: 2000,
            recent_output_tokens: Some(50.0),
            ..Default::default()
        };
        // One slot, 5 ms a step, 50 tokens: 250 ms rather than 10 s.
        assert_eq!(ms(estimate(&q, &speed(), 0).queue), 250);
        q.recent_output_tokens = Some(5000.0);
        assert_eq!(ms(estimate(&q, &speed(), 0).queue), 10_000);
    }

    #[test]
    fn a_measured_drain_rate_caps_the_model_and_a_slow_one_does_not_inflate_it() {
        let mut q = QueueView {
            max_num_seqs: 1,
            running: 1,
            outstanding_max_tokens: 2000,
            drain_rps: 10.0,
            ..Default::default()
        };
        assert_eq!(ms(estimate(&q, &speed(), 0).queue), 100);
        // A trickle of arrivals finished slowly: the model's 10 s stands.
        q.drain_rps = 0.01;
        assert_eq!(ms(estimate(&q, &speed(), 0).queue), 10_000);
    }

    #[test]
    fn a_measured_step_longer_than_the_model_wins() {
        let q = QueueView {
            max_num_seqs: 1,
            running: 1,
            outstanding_max_tokens: 100,
            ..Default::default()
        };
        let mut s = speed();
        s.step_time = Duration::from_millis(20);
        assert_eq!(ms(estimate(&q, &s, 0).queue), 2000);
    }

    #[test]
    fn hostile_figures_give_a_bounded_estimate() {
        let q = QueueView {
            max_num_seqs: 0,
            running: usize::MAX / 4,
            waiting: usize::MAX / 4,
            waiting_prompt_tokens: usize::MAX,
            running_prompt_tokens: usize::MAX,
            outstanding_max_tokens: usize::MAX,
            recent_output_tokens: Some(f64::NAN),
            drain_rps: f64::INFINITY,
        };
        let mut s = speed();
        s.prefill_tok_s = 0.0;
        let e = estimate(&q, &s, usize::MAX);
        assert!(e.total() <= Duration::from_secs(3 * 86_400));
    }
}
