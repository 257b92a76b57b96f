//! Engine gauges and counters, published once per step for metrics and
//! admission. Reading them never blocks the engine loop for long: the loop
//! takes the lock once per step to copy a small struct.

use std::time::Duration;

use super::step_stats::StepHistograms;
use crate::ids::Lane;
use crate::scheduler::PlannerSnapshot;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaneStats {
    pub running: usize,
    pub waiting: usize,
    pub preemptions_total: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    pub interactive: LaneStats,
    pub batch: LaneStats,
    /// Prompt + max tokens of every waiting request, both lanes.
    pub waiting_tokens: usize,
    /// Prompt tokens not computed yet, waiting and running, both lanes.
    pub prefill_backlog_tokens: usize,
    pub kv_blocks_total: usize,
    pub kv_blocks_used: usize,
    pub kv_blocks_free: usize,
    pub prefix_cache_queries: u64,
    pub prefix_cache_hits: u64,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub steps_total: u64,
    /// Exponentially smoothed duration of a step, and tokens per second over
    /// recent steps (weighted by their tokens, see `engine::rate`).
    pub step_time_ewma: Duration,
    pub tokens_per_second_ewma: f64,
    /// 0 until the prompt tokens measured reach `rate::MIN_PREFILL_TOKENS`.
    pub prefill_tokens_per_second_ewma: f64,
    pub decode_tokens_per_second_ewma: f64,
    /// What the step planner decided, step by step.
    pub steps: StepHistograms,
    /// The planner's targets, its cost model and the last step's limits.
    pub planner: PlannerSnapshot,
}

impl EngineStats {
    pub fn lane(&self, lane: Lane) -> &LaneStats {
        match lane {
            Lane::Interactive => &self.interactive,
            Lane::Batch => &self.batch,
        }
    }

    pub fn lane_mut(&mut self, lane: Lane) -> &mut LaneStats {
        match lane {
            Lane::Interactive => &mut self.interactive,
            Lane::Batch => &mut self.batch,
        }
    }

    pub fn running(&self) -> usize {
        self.interactive.running + self.batch.running
    }

    pub fn waiting(&self) -> usize {
        self.interactive.waiting + self.batch.waiting
    }

    pub fn kv_usage(&self) -> f64 {
        if self.kv_blocks_total == 0 {
            0.0
        } else {
            self.kv_blocks_used as f64 / self.kv_blocks_total as f64
        }
    }
}
