//! Prefix-cache keys for full KV blocks.
//!
//! A full block is identified by a hash chain: `hash_0 = H(domain, revision salt)`
//! and `hash_i = H(hash_{i-1}, token ids of block i, row orders of block i)`,
//! so a block's key covers every token before it, like vLLM's automatic prefix
//! caching (`hash_block_tokens`) and mistral.rs's paged-attention prefix
//! cacher. The salt is per model revision, so KV written by one set of weights
//! is never served to another. The row orders (`model::row_order::block_tag`,
//! a function of the block's positions and the sequence's prompt length) say
//! in which order each row's attention was summed; two blocks with the same
//! tokens but different orders hold different bits, and sharing them would
//! make a result depend on which request came first.
//!
//! `H` is SHA-256 over fixed little-endian encodings, never std's randomly
//! keyed SipHash: keys must be stable across processes (for logs and for a
//! future shared cache) and collision resistant, because a collision would
//! silently serve another request's KV. Cost: one SHA-256 compression of about
//! 100 bytes per 16 tokens, well under a microsecond, computed once per block.

use std::fmt;

use sha2::{Digest, Sha256};

use crate::ids::BLOCK_SIZE;
use crate::model::row_order::block_tag;

/// Domain separator so these digests can never equal a digest of other data.
const DOMAIN: &[u8] = b"stoker.kv.prefix-block.v2\0";

/// The key of one full block in the prefix cache: a SHA-256 digest covering the
/// revision salt and every token from the start of the sequence to the end of
/// the block.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub [u8; 32]);

impl fmt::Debug for BlockHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlockHash({}..)", hex::encode(&self.0[..8]))
    }
}

impl BlockHash {
    /// The root of every chain for one model revision.
    pub fn root(revision_salt: &[u8; 32]) -> BlockHash {
        let mut h = Sha256::new();
        h.update(DOMAIN);
        h.update(revision_salt);
        BlockHash(h.finalize().into())
    }

    /// The key of the block holding `tokens`, with rows summed in the orders
    /// `tag`, whose predecessor's key is `self`. `tokens` is one full block; a
    /// shorter slice still hashes deterministically but callers only ever
    /// register full blocks.
    pub fn chain(&self, tokens: &[u32], tag: &[u8; BLOCK_SIZE]) -> BlockHash {
        debug_assert_eq!(tokens.len(), BLOCK_SIZE, "only full blocks are hashed");
        let mut buf = [0u8; 4 * BLOCK_SIZE];
        let mut used = 0;
        for (slot, t) in buf.chunks_exact_mut(4).zip(tokens) {
            slot.copy_from_slice(&t.to_le_bytes());
            used += 4;
        }
        let mut h = Sha256::new();
        h.update(self.0);
        h.update((tokens.len() as u32).to_le_bytes());
        h.update(&buf[..used]);
        h.update(tag);
        BlockHash(h.finalize().into())
    }
}

/// Extends `hashes` (the chain of `tokens`' first `hashes.len()` full blocks,
/// starting from `root`) to cover every full block of `tokens`, a sequence
/// whose first `prompt_len` positions are summed in whole-prompt order (its
/// prompt in reference order, none in position order). Already computed entries are
/// kept, so calling this after each appended token costs one hash per newly
/// completed block.
pub fn extend_chain(
    root: &BlockHash,
    hashes: &mut Vec<BlockHash>,
    tokens: &[u32],
    prompt_len: usize,
) {
    let full = tokens.len() / BLOCK_SIZE;
    while hashes.len() < full {
        let i = hashes.len();
        let parent = hashes.last().copied().unwrap_or(*root);
        let block = &tokens[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
        hashes.push(parent.chain(block, &block_tag(i, prompt_len)));
    }
}

/// The chain of every full block of `prompt`, taken as a whole prompt.
pub fn hash_blocks(root: &BlockHash, prompt: &[u32]) -> Vec<BlockHash> {
    let mut hashes = Vec::with_capacity(prompt.len() / BLOCK_SIZE);
    extend_chain(root, &mut hashes, prompt, prompt.len());
    hashes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: usize, offset: u32) -> Vec<u32> {
        (0..n as u32).map(|t| t * 7 + offset).collect()
    }

    #[test]
    fn the_chain_covers_only_full_blocks() {
        let root = BlockHash::root(&[0; 32]);
        assert_eq!(hash_blocks(&root, &tokens(15, 0)).len(), 0);
        assert_eq!(hash_blocks(&root, &tokens(16, 0)).len(), 1);
        assert_eq!(hash_blocks(&root, &tokens(47, 0)).len(), 2);
    }

    #[test]
    fn a_different_salt_changes_every_key() {
        let t = tokens(64, 3);
        let a = hash_blocks(&BlockHash::root(&[1; 32]), &t);
        let b = hash_blocks(&BlockHash::root(&[2; 32]), &t);
        assert_eq!(a.len(), 4);
        for (x, y) in a.iter().zip(&b) {
            assert_ne!(x, y);
        }
    }

    #[test]
    fn a_block_key_depends_on_every_earlier_token() {
        let root = BlockHash::root(&[0; 32]);
        let mut t = tokens(48, 0);
        let before = hash_blocks(&root, &t);
        t[0] += 1;
        let after = hash_blocks(&root, &t);
        assert!(before.iter().zip(&after).all(|(x, y)| x != y));
        // Same tokens in the last block, different prefix: different key.
        assert_eq!(t[32..], tokens(48, 0)[32..]);
    }

    #[test]
    fn extending_incrementally_matches_hashing_at_once() {
        let root = BlockHash::root(&[9; 32]);
        let t = tokens(100, 1);
        let mut inc = Vec::new();
        for n in 0..=t.len() {
            extend_chain(&root, &mut inc, &t[..n], t.len());
        }
        assert_eq!(inc, hash_blocks(&root, &t));
    }

    #[test]
    fn the_same_tokens_summed_in_another_order_are_another_block() {
        let root = BlockHash::root(&[0; 32]);
        let t = tokens(100, 2);
        // Rows 64..80: inside the prompt of 100 all lanes, as generated rows
        // after a 64-token prompt not.
        let whole = hash_blocks(&root, &t);
        let mut generated = Vec::new();
        extend_chain(&root, &mut generated, &t, 64);
        assert_eq!(whole[..4], generated[..4]);
        assert_ne!(whole[4], generated[4]);
    }
}
