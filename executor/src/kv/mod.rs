//! Accounting for the paged KV cache: which fixed-size blocks of the pool hold
//! which tokens, and which finished blocks are kept for automatic prefix
//! caching.
//!
//! This is pure bookkeeping with no tensors: the forward pass owns the K/V
//! memory and indexes it by the [`BlockId`](crate::ids::BlockId)s handed out
//! here. The layout follows vLLM's paged attention (blocks of
//! [`BLOCK_SIZE`] tokens, a per-sequence block table) and its v1 block pool
//! for prefix caching; see [`manager`] for the pool and [`hash`] for the keys.

pub mod hash;
pub mod manager;

pub use hash::BlockHash;
pub use manager::{BlockManager, KvError, KvStats};

use crate::ids::BLOCK_SIZE;

/// Blocks needed to hold `tokens` token positions.
pub fn blocks_for(tokens: usize) -> usize {
    tokens.div_ceil(BLOCK_SIZE)
}

#[cfg(test)]
mod tests;
