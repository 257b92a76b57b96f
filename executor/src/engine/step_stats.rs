//! Per-step histograms of what the step planner decided: how long each step
//! took, and how many prefill tokens and decode rows each lane got in it.
//!
//! Kept as fixed-size cumulative counters in the engine's published stats (a
//! copy per step is a few hundred bytes, no allocation), and encoded as
//! Prometheus histograms at scrape time by the API.

use crate::ids::Lane;
use crate::scheduler::PerLane;

/// Most finite buckets a step histogram has.
const MAX_BUCKETS: usize = 16;

/// Step durations, seconds.
pub const STEP_SECONDS: &[f64] = &[
    0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5,
];

/// Tokens or rows per step.
pub const STEP_COUNTS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
];

/// A histogram with fixed upper bounds; `buckets[i]` counts observations in
/// `(bounds[i-1], bounds[i]]`, and `buckets[bounds.len()]` those above the
/// last bound.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepHistogram {
    pub bounds: &'static [f64],
    buckets: [u64; MAX_BUCKETS + 1],
    pub sum: f64,
    pub count: u64,
}

impl StepHistogram {
    pub const fn new(bounds: &'static [f64]) -> Self {
        assert!(bounds.len() <= MAX_BUCKETS);
        StepHistogram {
            bounds,
            buckets: [0; MAX_BUCKETS + 1],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        let i = self.bounds.partition_point(|&b| b < v);
        self.buckets[i] += 1;
        self.sum += v;
        self.count += 1;
    }

    /// `(upper bound, observations in that bucket alone)` for every bound,
    /// ending with `(f64::MAX, observations above the last bound)` for
    /// `+Inf`: what prometheus-client's `encode_histogram` takes (it sums
    /// the buckets itself as it writes them).
    pub fn per_bucket(&self) -> Vec<(f64, u64)> {
        self.bounds
            .iter()
            .chain(std::iter::once(&f64::MAX))
            .zip(&self.buckets)
            .map(|(&b, &n)| (b, n))
            .collect()
    }

    /// `(upper bound, observations at or below it)` for every bound, as a
    /// Prometheus histogram reads, ending with `(f64::MAX, count)` for
    /// `+Inf`.
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut acc = 0;
        self.bounds
            .iter()
            .zip(&self.buckets)
            .map(|(&b, &n)| {
                acc += n;
                (b, acc)
            })
            .chain(std::iter::once((f64::MAX, self.count)))
            .collect()
    }
}

/// The planner's per-step histograms, per lane.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepHistograms {
    /// Duration of steps that carried interactive work (`interactive`) and of
    /// steps that carried only batch work (`batch`).
    pub seconds: PerLane<StepHistogram>,
    /// Prompt tokens each lane computed in a step where it had any.
    pub prefill_tokens: PerLane<StepHistogram>,
    /// Decode rows each lane had in a step where it had any.
    pub decode_rows: PerLane<StepHistogram>,
}

impl Default for StepHistograms {
    fn default() -> Self {
        let both = |b| PerLane {
            interactive: StepHistogram::new(b),
            batch: StepHistogram::new(b),
        };
        StepHistograms {
            seconds: both(STEP_SECONDS),
            prefill_tokens: both(STEP_COUNTS),
            decode_rows: both(STEP_COUNTS),
        }
    }
}

impl StepHistograms {
    /// Records one step: its duration and each lane's prefill tokens and
    /// decode rows.
    pub fn record(&mut self, secs: f64, prefill: PerLane<usize>, decode: PerLane<usize>) {
        let lane = if prefill.interactive + decode.interactive > 0 {
            Lane::Interactive
        } else {
            Lane::Batch
        };
        self.seconds[lane].observe(secs);
        for lane in Lane::ALL {
            if prefill[lane] > 0 {
                self.prefill_tokens[lane].observe(prefill[lane] as f64);
            }
            if decode[lane] > 0 {
                self.decode_rows[lane].observe(decode[lane] as f64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_bucket_and_accumulate() {
        let mut h = StepHistogram::new(STEP_COUNTS);
        for v in [1.0, 1.0, 3.0, 512.0, 5000.0] {
            h.observe(v);
        }
        let c = h.cumulative();
        assert_eq!(c[0], (1.0, 2));
        assert_eq!(c[2], (4.0, 3));
        assert_eq!(c[9], (512.0, 4));
        assert_eq!(c[c.len() - 2].1, 4, "5000 is only in +Inf");
        assert_eq!(*c.last().unwrap(), (f64::MAX, 5));
        assert_eq!((h.count, h.sum), (5, 5517.0));
        let b = h.per_bucket();
        assert_eq!(b.len(), c.len());
        assert_eq!((b[0], b[2], b[9]), ((1.0, 2), (4.0, 1), (512.0, 1)));
        assert_eq!(
            *b.last().unwrap(),
            (f64::MAX, 1),
            "5000 alone is above 2048"
        );
        assert_eq!(b.iter().map(|&(_, n)| n).sum::<u64>(), h.count);
    }

    #[test]
    fn a_step_is_timed_under_interactive_when_it_carries_any_interactive_work() {
        let mut s = StepHistograms::default();
        s.record(
            0.02,
            PerLane {
                interactive: 0,
                batch: 30,
            },
            PerLane {
                interactive: 2,
                batch: 4,
            },
        );
        s.record(
            0.05,
            PerLane::default(),
            PerLane {
                interactive: 0,
                batch: 8,
            },
        );
        assert_eq!(s.seconds.interactive.count, 1);
        assert_eq!(s.seconds.batch.count, 1);
        assert_eq!(s.prefill_tokens.interactive.count, 0);
        assert_eq!(s.prefill_tokens.batch.count, 1);
        assert_eq!(s.decode_rows.batch.count, 2);
        assert_eq!(s.decode_rows.interactive.sum, 2.0);
    }
}
