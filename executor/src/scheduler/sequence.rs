//! One sequence as the scheduler sees it: its tokens, how many of them have KV
//! written, and the blocks holding that KV.
//!
//! This is vLLM's `Request` reduced to what scheduling needs: the token list
//! (prompt, then generated tokens), `num_computed` (the prefix whose KV is in the
//! cache) and the block table mapping token position `p` to block
//! `block_table[p / BLOCK_SIZE]`. The prefix-cache keys of its full blocks are
//! memoised here so each block is hashed once. Memory: the tokens plus one
//! block id and one 32-byte key per 16 tokens.

use crate::ids::{BlockId, Lane, SeqId, TenantId};
use crate::kv::BlockHash;

/// A request to schedule, as handed to [`Scheduler::add`](super::Scheduler::add).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqSpec {
    pub id: SeqId,
    pub lane: Lane,
    pub tenant: TenantId,
    /// The tenant's fair-share weight in its lane (at least 1; 0 counts as
    /// 1): its tokens count `1 / weight` against its share (`super::fair`).
    pub tenant_weight: u32,
    pub prompt: Vec<u32>,
    pub max_new_tokens: usize,
    /// Positions before this one are summed in whole-prompt order
    /// (`model::row_order`): the prompt's length in reference order, 0 in
    /// position order. Part of every block's prefix-cache key.
    pub ordered_prompt_len: usize,
    /// Every prompt position is computed (no prefix-cache hit on admission
    /// or readmission), because the engine scores each prompt token from
    /// the logits before it. Its full blocks are still registered for others.
    pub compute_whole_prompt: bool,
}

/// Where a sequence is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqStatus {
    /// Queued for admission; holds no blocks. A preempted sequence is waiting
    /// again, with its tokens kept and `num_computed == 0`.
    Waiting,
    /// Admitted: holds blocks and is scheduled every step it can progress.
    Running,
}

/// A sequence the scheduler owns. Read-only outside the scheduler.
#[derive(Debug, Clone)]
pub struct Sequence {
    pub(super) id: SeqId,
    pub(super) lane: Lane,
    pub(super) tenant: TenantId,
    /// At least 1.
    pub(super) tenant_weight: u32,
    pub(super) tokens: Vec<u32>,
    pub(super) prompt_len: usize,
    pub(super) ordered_prompt_len: usize,
    pub(super) compute_whole_prompt: bool,
    pub(super) max_new_tokens: usize,
    pub(super) num_computed: usize,
    pub(super) block_table: Vec<BlockId>,
    /// Admission order; kept across preemption, so "newest" is stable.
    pub(super) arrival: u64,
    pub(super) status: SeqStatus,
    /// Prefix-cache keys of the full blocks of `tokens`, computed lazily.
    pub(super) block_hashes: Vec<BlockHash>,
    /// Leading blocks of `block_table` already offered to the prefix cache.
    pub(super) num_registered: usize,
}

impl Sequence {
    pub(super) fn new(spec: SeqSpec, arrival: u64) -> Self {
        Self {
            id: spec.id,
            lane: spec.lane,
            tenant: spec.tenant,
            tenant_weight: spec.tenant_weight.max(1),
            prompt_len: spec.prompt.len(),
            ordered_prompt_len: spec.ordered_prompt_len.min(spec.prompt.len()),
            compute_whole_prompt: spec.compute_whole_prompt,
            tokens: spec.prompt,
            max_new_tokens: spec.max_new_tokens,
            num_computed: 0,
            block_table: Vec::new(),
            arrival,
            status: SeqStatus::Waiting,
            block_hashes: Vec::new(),
            num_registered: 0,
        }
    }

    pub fn id(&self) -> SeqId {
        self.id
    }

    pub fn lane(&self) -> Lane {
        self.lane
    }

    pub fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    /// See [`SeqSpec::tenant_weight`].
    pub fn tenant_weight(&self) -> u32 {
        self.tenant_weight
    }

    /// Prompt followed by every generated token appended so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// See [`SeqSpec::ordered_prompt_len`].
    pub fn ordered_prompt_len(&self) -> usize {
        self.ordered_prompt_len
    }

    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    pub fn max_new_tokens(&self) -> usize {
        self.max_new_tokens
    }

    /// Leading tokens whose KV is written.
    pub fn num_computed(&self) -> usize {
        self.num_computed
    }

    pub fn block_table(&self) -> &[BlockId] {
        &self.block_table
    }

    pub fn arrival(&self) -> u64 {
        self.arrival
    }

    pub fn status(&self) -> SeqStatus {
        self.status
    }

    /// Tokens not yet computed.
    pub(super) fn remaining(&self) -> usize {
        self.tokens.len() - self.num_computed
    }

    /// What this request counts against the waiting-token bound.
    pub(super) fn waiting_estimate(&self) -> usize {
        self.prompt_len.saturating_add(self.max_new_tokens)
    }
}

/// KV positions a request needs at most: the final sampled token is never fed
/// back, so `prompt + max_new_tokens - 1`.
pub(super) fn max_kv_tokens(prompt_len: usize, max_new_tokens: usize) -> usize {
    prompt_len.saturating_add(max_new_tokens).saturating_sub(1)
}
