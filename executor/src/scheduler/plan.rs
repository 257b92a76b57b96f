//! The output of one scheduling step: which token ranges of which sequences
//! the forward pass computes, and which sequences were preempted or aborted.
//!
//! Shaped like vLLM's `SchedulerOutput` (scheduled tokens per request,
//! preempted request ids), flattened into one chunk per sequence. Plans are
//! plain values: the engine reads them, runs the forward pass, and hands the
//! same plan back to [`Scheduler::complete_step`](super::Scheduler::complete_step).
//! While a plan is built, each admission attempt ends in an [`Admit`], which
//! both the step and the fair-share order read.

use std::ops::Range;

use crate::ids::{Lane, SeqId};

/// A contiguous run of one sequence's tokens to compute this step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledChunk {
    pub seq: SeqId,
    pub lane: Lane,
    /// Position of the chunk's first token (the sequence's `num_computed`).
    pub start: usize,
    /// Tokens in the chunk; at least 1.
    pub len: usize,
    /// The chunk reaches the end of the sequence's known tokens, so the engine
    /// samples the next token from the logits of its last position.
    pub sample: bool,
}

impl ScheduledChunk {
    /// Token positions computed by this chunk.
    pub fn positions(&self) -> Range<usize> {
        self.start..self.start + self.len
    }
}

/// Why a sequence was aborted by the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AbortReason {
    /// The sequence's tokens need more blocks than its lane may ever hold, so it
    /// cannot progress even running alone.
    #[error("needs {needed_blocks} KV blocks but the {lane:?} lane may hold at most {lane_limit}")]
    ExceedsLaneCapacity {
        lane: Lane,
        needed_blocks: usize,
        lane_limit: usize,
    },
}

/// One continuous-batching step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// At most one chunk per sequence; token counts sum to at most the budget.
    pub chunks: Vec<ScheduledChunk>,
    /// Sequences that lost their blocks this step and wait to be recomputed.
    pub preempted: Vec<SeqId>,
    /// Sequences removed for good this step; the engine reports the reason.
    pub aborted: Vec<(SeqId, AbortReason)>,
}

impl StepPlan {
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.preempted.is_empty() && self.aborted.is_empty()
    }

    /// Tokens computed by this step.
    pub fn num_tokens(&self) -> usize {
        self.chunks.iter().map(|c| c.len).sum()
    }
}

/// What stops admission after one attempt.
pub(super) enum Admit {
    /// The head was admitted; try the next.
    Admitted,
    /// This lane admits no more this step; the batch lane may still.
    LaneDone,
    /// No lane admits more this step.
    Stop,
}
