//! Continuous batching over the paged KV cache, with an interactive and a batch
//! lane.
//!
//! The scheduler owns every sequence from admission to finish: its tokens, how
//! many have KV written (`num_computed`) and its block table. Each step it
//! builds a [`StepPlan`] under a token budget and the step planner's latency
//! targets, predicted by an online step-cost model ([`cost`]): interactive
//! decoders first (one token each), then interactive prefills and admissions
//! in chunks sized to the target (chunked prefill, so a long prompt never
//! stalls decoding), then batch rows and prefills in the slack. Within a
//! lane, tenants share by tokens, weighted ([`fair`]): admissions, the
//! prefill budget and preemption victims follow each tenant's tokens so far
//! divided by its weight (with `fair_share` off, tenants take turns a request
//! at a time). Under memory pressure it preempts by recompute. The design is
//! vLLM's v1 scheduler (unified `num_computed_tokens` accounting, chunked
//! prefill, recompute preemption) with TGI's bounded queue, a reserve share
//! that the batch lane may never take, and VTC-style fair share between
//! tenants; see [`step`] for the step itself.
//!
//! The engine's per-step protocol is: [`Scheduler::schedule`], run the forward
//! pass over the plan's chunks, [`Scheduler::complete_step`] (this is where
//! `num_computed` advances and full blocks enter the prefix cache), then
//! [`Scheduler::append_token`] for each sampled chunk, and
//! [`Scheduler::finish`] for sequences that stopped.
//!
//! Cost: a step is O(running + admitted + preempted) plus one block operation
//! per allocated or released block; finish and cancel are O(blocks held).

pub mod config;
pub mod cost;
pub mod fair;
pub mod plan;
pub mod queue;
pub mod sequence;
pub mod stats;
pub mod step;

use std::collections::HashMap;

pub use config::{ConfigError, LaneLimits, NEAR_CHAT_STEPS, PlannerConfig, SchedulerConfig};
pub use cost::{CostModel, CostSnapshot, StepFeatures};
pub use plan::{AbortReason, ScheduledChunk, StepPlan};
pub use sequence::{SeqSpec, SeqStatus, Sequence};
pub use stats::{PerLane, SchedulerStats};

use crate::ids::{BlockId, Lane, SeqId};
use crate::kv::{BlockManager, KvError, blocks_for};
use fair::FairShare;
use queue::TenantQueue;
use sequence::max_kv_tokens;

/// Why a call into the scheduler was refused. A refused call changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("max_new_tokens must be at least 1")]
    ZeroMaxNewTokens,
    #[error("{0} is already known to the scheduler")]
    DuplicateSeq(SeqId),
    #[error("the waiting queue is full ({limit} requests)")]
    QueueFull { limit: usize },
    #[error(
        "{requested} more tokens would exceed the waiting-token bound ({waiting} of {limit} used)"
    )]
    TooManyWaitingTokens {
        requested: usize,
        waiting: usize,
        limit: usize,
    },
    #[error("needs {needed_blocks} KV blocks but the {lane:?} lane may hold at most {lane_limit}")]
    CannotFit {
        lane: Lane,
        needed_blocks: usize,
        lane_limit: usize,
    },
    #[error("{0} is not known to the scheduler")]
    UnknownSeq(SeqId),
    #[error("{0} is not running")]
    NotRunning(SeqId),
    #[error("{0} still has tokens without KV; append only after a sampled chunk completed")]
    NotSampled(SeqId),
    #[error("{0} already generated max_new_tokens tokens")]
    MaxNewTokensReached(SeqId),
}

/// The continuous-batching scheduler and the KV block pool it allocates from.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    limits: LaneLimits,
    kv: BlockManager,
    seqs: HashMap<SeqId, Sequence>,
    waiting: PerLane<TenantQueue>,
    /// Running sequences per lane, oldest arrival first.
    running: PerLane<Vec<SeqId>>,
    lane_blocks: PerLane<usize>,
    waiting_tokens: usize,
    next_arrival: u64,
    preemptions: PerLane<u64>,
    aborted: u64,
    /// What a step costs, learned from the steps the engine ran.
    cost: CostModel,
    /// The time limits the last planned step used.
    targets: PlanTargets,
    /// Each lane's per-tenant token counters (only with `fair_share`).
    fair: PerLane<FairShare>,
    /// Steps planned since the interactive lane last held a sequence
    /// (waiting or running); see `PlannerConfig::batch_step_beside_chat_ms`.
    quiet_steps: u64,
    /// Where the next step starts among the running batch rows (they take
    /// turns when a time limit lets only some of them decode).
    batch_turn: usize,
}

/// The time limits in force in the last planned step, per lane's stage:
/// `None` where the step had no target (tokens only).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PlanTargets {
    /// Limit on the interactive prefill stage: set when interactive
    /// sequences decoded in the step.
    pub interactive_ms: Option<f64>,
    /// Limit on the batch stage (the tighter of the interactive limit and
    /// `batch_step_ms`).
    pub batch_ms: Option<f64>,
}

/// The planner's state, for metrics and the admission report.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PlannerSnapshot {
    pub config: PlannerConfig,
    pub cost: CostSnapshot,
    pub last: PlanTargets,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Result<Self, ConfigError> {
        let limits = config.validate()?;
        let kv = BlockManager::new(
            config.num_blocks,
            config.enable_prefix_caching,
            config.revision_salt,
        )
        .map_err(|e| match e {
            KvError::TooManyBlocks(n) => ConfigError::TooManyBlocks(n),
            _ => ConfigError::ZeroBlocks,
        })?;
        Ok(Self {
            config,
            limits,
            kv,
            seqs: HashMap::new(),
            waiting: PerLane::default(),
            running: PerLane::default(),
            lane_blocks: PerLane::default(),
            waiting_tokens: 0,
            next_arrival: 0,
            preemptions: PerLane::default(),
            aborted: 0,
            cost: CostModel::default(),
            targets: PlanTargets::default(),
            fair: PerLane::default(),
            quiet_steps: NEAR_CHAT_STEPS,
            batch_turn: 0,
        })
    }

    /// Queues a request for admission. Refuses at once (never hangs) a request
    /// that could never fit in the blocks its lane may use.
    pub fn add(&mut self, spec: SeqSpec) -> Result<(), SchedulerError> {
        if spec.prompt.is_empty() {
            return Err(SchedulerError::EmptyPrompt);
        }
        if spec.max_new_tokens == 0 {
            return Err(SchedulerError::ZeroMaxNewTokens);
        }
        if self.seqs.contains_key(&spec.id) {
            return Err(SchedulerError::DuplicateSeq(spec.id));
        }
        let needed_blocks = blocks_for(max_kv_tokens(spec.prompt.len(), spec.max_new_tokens));
        let lane_limit = self.limits.blocks(spec.lane);
        if needed_blocks > lane_limit {
            return Err(SchedulerError::CannotFit {
                lane: spec.lane,
                needed_blocks,
                lane_limit,
            });
        }
        let waiting = self.waiting.interactive.len() + self.waiting.batch.len();
        if waiting >= self.config.max_waiting_requests {
            return Err(SchedulerError::QueueFull {
                limit: self.config.max_waiting_requests,
            });
        }
        let requested = spec.prompt.len().saturating_add(spec.max_new_tokens);
        if self.waiting_tokens.saturating_add(requested) > self.config.max_waiting_tokens {
            return Err(SchedulerError::TooManyWaitingTokens {
                requested,
                waiting: self.waiting_tokens,
                limit: self.config.max_waiting_tokens,
            });
        }
        let seq = Sequence::new(spec, self.next_arrival);
        self.next_arrival += 1;
        self.waiting[seq.lane].push_back(&seq.tenant, seq.id);
        if self.config.fair_share {
            let credit = self.quantum();
            self.fair[seq.lane].join(&seq.tenant, credit);
        }
        self.waiting_tokens += requested;
        self.seqs.insert(seq.id, seq);
        Ok(())
    }

    /// Appends a token the engine sampled from a chunk with `sample == true`.
    /// Call after [`complete_step`](Self::complete_step); the next step computes
    /// its KV as a one-token decode chunk.
    pub fn append_token(&mut self, id: SeqId, token: u32) -> Result<(), SchedulerError> {
        let seq = self
            .seqs
            .get_mut(&id)
            .ok_or(SchedulerError::UnknownSeq(id))?;
        if seq.status != SeqStatus::Running {
            return Err(SchedulerError::NotRunning(id));
        }
        if seq.generated().len() >= seq.max_new_tokens {
            return Err(SchedulerError::MaxNewTokensReached(id));
        }
        if seq.num_computed != seq.tokens.len() {
            return Err(SchedulerError::NotSampled(id));
        }
        seq.tokens.push(token);
        Ok(())
    }

    /// Forgets a sequence that completed, releasing all its blocks at once.
    pub fn finish(&mut self, id: SeqId) -> Result<(), SchedulerError> {
        self.remove(id).map(drop)
    }

    /// Forgets a sequence the client abandoned, whether waiting or running.
    /// Same effect as [`finish`](Self::finish); kept separate for readability
    /// at call sites.
    pub fn cancel(&mut self, id: SeqId) -> Result<(), SchedulerError> {
        self.remove(id).map(drop)
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    pub fn limits(&self) -> LaneLimits {
        self.limits
    }

    /// The block pool, read-only (gauges, reference counts, audit).
    pub fn kv(&self) -> &BlockManager {
        &self.kv
    }

    pub fn sequence(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    /// Every sequence the scheduler knows, in no particular order.
    pub fn sequences(&self) -> impl Iterator<Item = &Sequence> {
        self.seqs.values()
    }

    /// Prompt and generated tokens of `id`.
    pub fn tokens(&self, id: SeqId) -> Option<&[u32]> {
        self.seqs.get(&id).map(|s| s.tokens())
    }

    /// The blocks holding `id`'s KV; position `p` lives in `table[p / BLOCK_SIZE]`.
    pub fn block_table(&self, id: SeqId) -> Option<&[BlockId]> {
        self.seqs.get(&id).map(|s| s.block_table())
    }

    /// The tokens a chunk computes.
    pub fn chunk_tokens(&self, chunk: &ScheduledChunk) -> Option<&[u32]> {
        self.seqs.get(&chunk.seq)?.tokens.get(chunk.positions())
    }

    /// Running sequences of `lane`, oldest first.
    pub fn running(&self, lane: Lane) -> &[SeqId] {
        &self.running[lane]
    }

    pub fn num_waiting(&self, lane: Lane) -> usize {
        self.waiting[lane].len()
    }

    /// Blocks a new request of `lane` could get right now without preempting
    /// anyone: free plus evictable blocks, capped for batch by its reserve.
    pub fn free_block_headroom(&self, lane: Lane) -> usize {
        let pool = self.kv.num_available();
        match lane {
            Lane::Interactive => pool,
            Lane::Batch => pool.min(
                self.limits
                    .batch_blocks
                    .saturating_sub(self.lane_blocks.batch),
            ),
        }
    }

    /// The planner's targets, its cost model, and the limits of the last step.
    pub fn planner(&self) -> PlannerSnapshot {
        PlannerSnapshot {
            config: self.config.planner,
            cost: self.cost.snapshot(),
            last: self.targets,
        }
    }

    /// Replaces the planner's targets; refused (and nothing changed) when the
    /// configuration with them would not validate.
    pub fn set_planner(&mut self, planner: PlannerConfig) -> Result<(), ConfigError> {
        let candidate = SchedulerConfig {
            planner,
            ..self.config.clone()
        };
        candidate.validate()?;
        self.config = candidate;
        Ok(())
    }

    /// The cost model's prediction for a plan, in milliseconds.
    pub fn predict_ms(&self, plan: &StepPlan) -> f64 {
        self.cost.predict_ms(&step::features_of(&plan.chunks))
    }

    pub fn stats(&self) -> SchedulerStats {
        SchedulerStats {
            running: PerLane {
                interactive: self.running.interactive.len(),
                batch: self.running.batch.len(),
            },
            waiting: PerLane {
                interactive: self.waiting.interactive.len(),
                batch: self.waiting.batch.len(),
            },
            waiting_tokens: self.waiting_tokens,
            prefill_backlog_tokens: self
                .seqs
                .values()
                .filter(|s| s.num_computed < s.prompt_len)
                .map(|s| s.tokens.len() - s.num_computed)
                .sum(),
            lane_blocks: self.lane_blocks,
            kv: self.kv.stats(),
            preemptions: self.preemptions,
            aborted: self.aborted,
        }
    }

    /// Drops `id` from every structure and releases its blocks.
    fn remove(&mut self, id: SeqId) -> Result<Sequence, SchedulerError> {
        let mut seq = self
            .seqs
            .remove(&id)
            .ok_or(SchedulerError::UnknownSeq(id))?;
        if self.config.fair_share {
            self.fair[seq.lane].leave(&seq.tenant);
        }
        match seq.status {
            SeqStatus::Waiting => {
                let queued = self.waiting[seq.lane].remove(&seq.tenant, id);
                debug_assert!(queued, "a waiting sequence is queued");
                self.waiting_tokens -= seq.waiting_estimate();
            }
            SeqStatus::Running => {
                self.running[seq.lane].retain(|&s| s != id);
                self.release_blocks(&mut seq);
            }
        }
        Ok(seq)
    }

    /// Releases every block of `seq`, tail first so that the deepest cached
    /// blocks are the first evicted (as vLLM does).
    fn release_blocks(&mut self, seq: &mut Sequence) {
        self.lane_blocks[seq.lane] -= seq.block_table.len();
        for b in seq.block_table.drain(..).rev() {
            let released = self.kv.release(b);
            debug_assert!(
                released.is_ok(),
                "scheduler released {b:?} it does not hold"
            );
        }
        seq.num_computed = 0;
        seq.num_registered = 0;
    }
}

#[cfg(test)]
mod tests;
