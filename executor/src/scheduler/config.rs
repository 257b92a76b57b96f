//! Scheduler configuration, its validation, and the lane limits derived from it.
//!
//! The knobs mirror vLLM's scheduler config (`max_num_seqs`,
//! `max_num_batched_tokens`, `enable_prefix_caching`) plus TGI-style bounded
//! waiting queues and stoker's two-lane reserve: a share of blocks and sequence
//! slots that the batch lane may never take, so interactive traffic always has
//! headroom, and the switch for token-weighted fair share between tenants. Validation happens once, at construction, and is O(1).

use crate::ids::Lane;

/// Everything the scheduler needs to know about its budget.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    /// KV blocks in the pool (each [`BLOCK_SIZE`](crate::ids::BLOCK_SIZE) tokens).
    pub num_blocks: usize,
    /// Most sequences running (holding KV) at once.
    pub max_num_seqs: usize,
    /// Most tokens computed in one step, across all sequences.
    pub max_batched_tokens: usize,
    /// Most requests waiting for admission, both lanes together.
    pub max_waiting_requests: usize,
    /// Most tokens (prompt + max_new_tokens per request) waiting, both lanes.
    pub max_waiting_tokens: usize,
    /// Share in `[0, 1)` of blocks and sequence slots the batch lane may never take.
    pub interactive_reserve_share: f32,
    pub enable_prefix_caching: bool,
    /// Per model revision; seeds every prefix-cache hash chain.
    pub revision_salt: [u8; 32],
    /// Most tokens the batch lane computes in one step (0: no cap). On a
    /// compute-bound device a step's time grows with its tokens, so this
    /// bounds how long an interactive arrival waits for the step in flight.
    pub batch_max_step_tokens: usize,
    /// While an interactive sequence waits or is prefilling, the batch lane
    /// gets no tokens, so the interactive prefill step is as short as if no
    /// batch work existed. Batch sequences keep their blocks meanwhile.
    pub batch_yields_to_prefill: bool,
    /// Token-weighted fair share between the tenants of a lane
    /// ([`super::fair`]): admission, the order prefills get the step's
    /// budget, and preemption victims follow each tenant's tokens divided
    /// by its weight. Off: tenants take turns one request at a time, and
    /// prefills and victims go by arrival alone.
    pub fair_share: bool,
    /// Latency targets the step planner packs each step to.
    pub planner: PlannerConfig,
}

/// The step planner's targets (see [`super::step`]): each step is packed, by
/// the online step-cost model, to the inter-token latency of the lanes whose
/// sequences are decoding in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlannerConfig {
    /// A step with interactive decoders costs at most this many ms
    /// (0: use `interactive_itl_factor`).
    pub interactive_itl_ms: f64,
    /// With `interactive_itl_ms` at 0: a step with interactive decoders costs
    /// at most this many times what those decoders alone would (so 2.0 lets
    /// prefills and batch rows at most double a chat's inter-token latency).
    /// 0 together with `interactive_itl_ms` 0: no time target, tokens only.
    pub interactive_itl_factor: f64,
    /// Batch prefill chunks fill a step only up to this many predicted ms,
    /// which also bounds how long an interactive arrival waits behind a
    /// batch step (0: no target). Running batch rows answer only to the
    /// interactive target and `batch_max_step_tokens`.
    pub batch_step_ms: f64,
    /// While interactive traffic is about (a sequence waiting or running in
    /// the interactive lane now or within the last [`NEAR_CHAT_STEPS`]
    /// steps), a step without interactive decoders, the batch lane's own,
    /// takes at most this many predicted ms, its running rows included (0:
    /// no such limit). A chat request arriving behind a batch step waits
    /// for the rest of it: a closed-loop client sends its next request as
    /// the previous one ends, so it arrives just after such a step began
    /// and waits nearly all of it.
    pub batch_step_beside_chat_ms: f64,
    /// The first interactive prefill of a step gets at least this many
    /// tokens even past the target, so a new prompt starts within one step.
    pub min_prefill_chunk: usize,
}

/// Steps after the last interactive sequence left during which the batch
/// lane still keeps its steps to `batch_step_beside_chat_ms` (about a
/// second of such steps: a chat's next turn usually comes sooner).
pub const NEAR_CHAT_STEPS: u64 = 32;

impl PlannerConfig {
    /// No time targets: steps are bounded by token budgets alone.
    pub const TOKENS_ONLY: PlannerConfig = PlannerConfig {
        interactive_itl_ms: 0.0,
        interactive_itl_factor: 0.0,
        batch_step_ms: 0.0,
        batch_step_beside_chat_ms: 0.0,
        min_prefill_chunk: 0,
    };
}

impl Default for PlannerConfig {
    fn default() -> Self {
        PlannerConfig {
            interactive_itl_ms: 0.0,
            interactive_itl_factor: 1.6,
            batch_step_ms: 60.0,
            batch_step_beside_chat_ms: 40.0,
            min_prefill_chunk: 32,
        }
    }
}

/// A configuration that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("num_blocks must be at least 1")]
    ZeroBlocks,
    #[error("num_blocks {0} exceeds the u32 block id space")]
    TooManyBlocks(usize),
    #[error("max_num_seqs must be at least 1")]
    ZeroSeqs,
    #[error(
        "max_batched_tokens ({tokens}) must be at least max_num_seqs ({seqs}) so every decoder fits in a step"
    )]
    BudgetBelowSeqs { tokens: usize, seqs: usize },
    #[error("max_waiting_requests and max_waiting_tokens must be at least 1")]
    ZeroWaitingBound,
    #[error("interactive_reserve_share must be finite and in [0, 1), got {0}")]
    ReserveShareOutOfRange(f32),
    #[error(
        "planner targets must be finite and non-negative, and interactive_itl_factor 0 or at least 1 (got {0})"
    )]
    PlannerTarget(String),
}

/// What the batch lane may hold, derived from the reserve share. The interactive
/// lane may hold the whole pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneLimits {
    /// Most block references batch sequences may hold together.
    pub batch_blocks: usize,
    /// Most batch sequences running at once.
    pub batch_seqs: usize,
    pub num_blocks: usize,
    pub max_num_seqs: usize,
}

impl LaneLimits {
    /// Most block references the sequences of `lane` may hold together.
    pub fn blocks(&self, lane: Lane) -> usize {
        match lane {
            Lane::Interactive => self.num_blocks,
            Lane::Batch => self.batch_blocks,
        }
    }

    /// Most running sequences of `lane`.
    pub fn seqs(&self, lane: Lane) -> usize {
        match lane {
            Lane::Interactive => self.max_num_seqs,
            Lane::Batch => self.batch_seqs,
        }
    }
}

impl SchedulerConfig {
    /// Checks the configuration and derives the batch lane's limits.
    pub fn validate(&self) -> Result<LaneLimits, ConfigError> {
        if self.num_blocks == 0 {
            return Err(ConfigError::ZeroBlocks);
        }
        if self.num_blocks > u32::MAX as usize {
            return Err(ConfigError::TooManyBlocks(self.num_blocks));
        }
        if self.max_num_seqs == 0 {
            return Err(ConfigError::ZeroSeqs);
        }
        if self.max_batched_tokens < self.max_num_seqs {
            return Err(ConfigError::BudgetBelowSeqs {
                tokens: self.max_batched_tokens,
                seqs: self.max_num_seqs,
            });
        }
        if self.max_waiting_requests == 0 || self.max_waiting_tokens == 0 {
            return Err(ConfigError::ZeroWaitingBound);
        }
        let p = self.planner;
        let targets_ok = [
            p.interactive_itl_ms,
            p.interactive_itl_factor,
            p.batch_step_ms,
            p.batch_step_beside_chat_ms,
        ]
        .iter()
        .all(|t| t.is_finite() && *t >= 0.0)
            && (p.interactive_itl_factor == 0.0 || p.interactive_itl_factor >= 1.0);
        if !targets_ok {
            return Err(ConfigError::PlannerTarget(format!("{p:?}")));
        }
        let share = self.interactive_reserve_share;
        if !share.is_finite() || !(0.0..1.0).contains(&share) {
            return Err(ConfigError::ReserveShareOutOfRange(share));
        }
        // The reserve never takes the last slot or block: the batch lane keeps
        // at least one of each, so a one-slot engine simply has no reserve.
        let limits = LaneLimits {
            batch_blocks: self.num_blocks
                - reserved(share, self.num_blocks).min(self.num_blocks - 1),
            batch_seqs: self.max_num_seqs
                - reserved(share, self.max_num_seqs).min(self.max_num_seqs - 1),
            num_blocks: self.num_blocks,
            max_num_seqs: self.max_num_seqs,
        };
        Ok(limits)
    }
}

/// `ceil(share * n)`, tolerant of f32 representation error so that 0.1 of 10
/// reserves exactly 1 (0.1f32 is slightly above 0.1).
fn reserved(share: f32, n: usize) -> usize {
    let exact = share as f64 * n as f64;
    let slack = 1e-7 * n as f64 + 1e-9;
    ((exact - slack).ceil().max(0.0) as usize).min(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> SchedulerConfig {
        SchedulerConfig {
            num_blocks: 100,
            max_num_seqs: 10,
            max_batched_tokens: 256,
            max_waiting_requests: 8,
            max_waiting_tokens: 10_000,
            interactive_reserve_share: 0.1,
            enable_prefix_caching: true,
            revision_salt: [0; 32],
            batch_max_step_tokens: 0,
            batch_yields_to_prefill: false,
            fair_share: true,
            planner: PlannerConfig::TOKENS_ONLY,
        }
    }

    #[test]
    fn the_reserve_share_takes_the_ceiling_of_blocks_and_slots_from_batch() {
        let l = cfg().validate().unwrap();
        assert_eq!((l.batch_blocks, l.batch_seqs), (90, 9));
        let l = SchedulerConfig {
            interactive_reserve_share: 0.25,
            num_blocks: 7,
            ..cfg()
        }
        .validate()
        .unwrap();
        assert_eq!((l.batch_blocks, l.batch_seqs), (5, 7));
        let l = SchedulerConfig {
            interactive_reserve_share: 0.0,
            ..cfg()
        }
        .validate()
        .unwrap();
        assert_eq!((l.batch_blocks, l.batch_seqs), (100, 10));
        let l = SchedulerConfig {
            interactive_reserve_share: 0.7,
            ..cfg()
        }
        .validate()
        .unwrap();
        assert_eq!((l.batch_blocks, l.batch_seqs), (30, 3));
    }

    #[test]
    fn nonsense_configurations_are_typed_errors() {
        let bad = |c: SchedulerConfig| c.validate().unwrap_err();
        assert_eq!(
            bad(SchedulerConfig {
                num_blocks: 0,
                ..cfg()
            }),
            ConfigError::ZeroBlocks
        );
        assert_eq!(
            bad(SchedulerConfig {
                max_num_seqs: 0,
                ..cfg()
            }),
            ConfigError::ZeroSeqs
        );
        assert!(matches!(
            bad(SchedulerConfig {
                max_batched_tokens: 4,
                ..cfg()
            }),
            ConfigError::BudgetBelowSeqs { .. }
        ));
        assert_eq!(
            bad(SchedulerConfig {
                max_waiting_requests: 0,
                ..cfg()
            }),
            ConfigError::ZeroWaitingBound
        );
        for share in [1.0, 1.5, -0.1, f32::NAN, f32::INFINITY] {
            assert!(matches!(
                bad(SchedulerConfig {
                    interactive_reserve_share: share,
                    ..cfg()
                }),
                ConfigError::ReserveShareOutOfRange(_)
            ));
        }
        for planner in [
            PlannerConfig {
                interactive_itl_factor: 0.5,
                ..PlannerConfig::default()
            },
            PlannerConfig {
                batch_step_ms: f64::NAN,
                ..PlannerConfig::default()
            },
            PlannerConfig {
                interactive_itl_ms: -1.0,
                ..PlannerConfig::default()
            },
        ] {
            assert!(matches!(
                bad(SchedulerConfig { planner, ..cfg() }),
                ConfigError::PlannerTarget(_)
            ));
        }
        // A reserve that would take everything leaves the batch lane one of each.
        let l = SchedulerConfig {
            interactive_reserve_share: 0.95,
            max_num_seqs: 1,
            ..cfg()
        }
        .validate()
        .unwrap();
        assert_eq!((l.batch_seqs, l.max_num_seqs), (1, 1));
        assert!(l.batch_blocks >= 1);
    }
}
