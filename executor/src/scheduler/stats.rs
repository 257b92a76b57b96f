//! Gauges and counters the scheduler exposes for metrics and admission
//! control, and the small per-lane container they use.
//!
//! The names follow vLLM's scheduler stats (`num_running_reqs`,
//! `num_waiting_reqs`, `num_preempted_reqs`, prefix-cache queries and hits in
//! tokens). A snapshot is O(1): every gauge is maintained incrementally.

use std::ops::{Index, IndexMut};

use crate::ids::Lane;
use crate::kv::KvStats;

/// One value per lane, indexable by [`Lane`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PerLane<T> {
    pub interactive: T,
    pub batch: T,
}

impl<T> Index<Lane> for PerLane<T> {
    type Output = T;
    fn index(&self, lane: Lane) -> &T {
        match lane {
            Lane::Interactive => &self.interactive,
            Lane::Batch => &self.batch,
        }
    }
}

impl<T> IndexMut<Lane> for PerLane<T> {
    fn index_mut(&mut self, lane: Lane) -> &mut T {
        match lane {
            Lane::Interactive => &mut self.interactive,
            Lane::Batch => &mut self.batch,
        }
    }
}

/// A snapshot of the scheduler's gauges and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedulerStats {
    /// Sequences holding KV, per lane.
    pub running: PerLane<usize>,
    /// Sequences queued for admission (new or preempted), per lane.
    pub waiting: PerLane<usize>,
    /// Prompt + max_new_tokens summed over waiting sequences.
    pub waiting_tokens: usize,
    /// Prompt tokens not computed yet, over waiting and running sequences
    /// (a preempted one counts everything it must recompute): the prefill a
    /// new request queues behind, which distributed routing ranks by.
    pub prefill_backlog_tokens: usize,
    /// Block references held by each lane's sequences (a block shared by two
    /// sequences counts twice); the batch lane's is capped by the reserve.
    pub lane_blocks: PerLane<usize>,
    /// Pool gauges and prefix-cache counters.
    pub kv: KvStats,
    /// Preemptions by the lane of the preempted sequence.
    pub preemptions: PerLane<u64>,
    /// Sequences the scheduler aborted.
    pub aborted: u64,
}
