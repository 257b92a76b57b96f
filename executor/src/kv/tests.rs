//! Unit tests of the block pool: counting, misuse, prefix matching and LRU
//! eviction.

use super::*;
use crate::ids::{BLOCK_SIZE, BlockId};

const SALT: [u8; 32] = [7; 32];

fn pool(n: usize) -> BlockManager {
    BlockManager::new(n, true, SALT).unwrap()
}

fn tokens(blocks: usize, seed: u32) -> Vec<u32> {
    (0..(blocks * BLOCK_SIZE) as u32)
        .map(|t| t.wrapping_mul(31) ^ seed)
        .collect()
}

/// Allocates one block per full block of `t`, registers them and returns them.
fn write_and_register(m: &mut BlockManager, t: &[u32]) -> Vec<BlockId> {
    let hashes = m.block_hashes(t);
    hashes
        .iter()
        .map(|&h| {
            let b = m.allocate().unwrap();
            assert!(m.register(h, b).unwrap());
            b
        })
        .collect()
}

#[test]
fn a_new_pool_is_all_free_and_hands_out_every_block_once() {
    let mut m = pool(4);
    assert_eq!(m.stats().free, 4);
    let mut got: Vec<_> = (0..4).map(|_| m.allocate().unwrap()).collect();
    assert_eq!(m.allocate(), None);
    got.sort();
    assert_eq!(got, (0..4).map(BlockId).collect::<Vec<_>>());
    let s = m.stats();
    assert_eq!((s.free, s.cached_evictable, s.used), (0, 0, 4));
    m.audit().unwrap();
}

#[test]
fn a_zero_block_pool_is_a_typed_error() {
    assert_eq!(
        BlockManager::new(0, true, SALT).unwrap_err(),
        KvError::ZeroBlocks
    );
}

#[test]
fn a_double_release_is_a_typed_error_and_changes_nothing() {
    let mut m = pool(2);
    let b = m.allocate().unwrap();
    m.release(b).unwrap();
    let before = m.stats();
    assert_eq!(m.release(b), Err(KvError::NotAllocated(b)));
    assert_eq!(
        m.release(BlockId(1)),
        Err(KvError::NotAllocated(BlockId(1)))
    );
    assert_eq!(
        m.release(BlockId(9)),
        Err(KvError::UnknownBlock(BlockId(9)))
    );
    assert_eq!(m.stats(), before);
    m.audit().unwrap();
}

#[test]
fn acquiring_or_registering_a_free_block_is_a_typed_error() {
    let mut m = pool(2);
    assert_eq!(
        m.acquire_cached(BlockId(0)),
        Err(KvError::NotCached(BlockId(0)))
    );
    let h = m.root_hash().chain(&tokens(1, 0), &[0; BLOCK_SIZE]);
    assert_eq!(
        m.register(h, BlockId(0)),
        Err(KvError::NotAllocated(BlockId(0)))
    );
    m.audit().unwrap();
}

#[test]
fn a_released_registered_block_stays_cached_until_evicted() {
    let mut m = pool(1);
    let t = tokens(1, 1);
    let [b] = write_and_register(&mut m, &t)[..] else {
        panic!()
    };
    m.release(b).unwrap();
    let s = m.stats();
    assert_eq!((s.free, s.cached_evictable, s.used), (0, 1, 0));
    // A hit revives it without recomputation.
    assert_eq!(m.match_prefix(&t), vec![b]);
    assert_eq!(m.refcount(b), 1);
    m.release(b).unwrap();
    // Allocation evicts it and drops its key.
    assert_eq!(m.allocate(), Some(b));
    assert_eq!(m.cached_hash(b), None);
    assert_eq!(m.stats().evictions, 1);
    m.release(b).unwrap();
    assert!(m.match_prefix(&t).is_empty());
    m.audit().unwrap();
}

#[test]
fn allocation_prefers_free_blocks_over_evicting_cached_ones() {
    let mut m = pool(2);
    let [cached] = write_and_register(&mut m, &tokens(1, 2))[..] else {
        panic!()
    };
    m.release(cached).unwrap();
    let fresh = m.allocate().unwrap();
    assert_ne!(fresh, cached);
    assert_eq!(m.stats().evictions, 0);
    assert!(m.cached_hash(cached).is_some());
}

#[test]
fn eviction_takes_the_least_recently_used_block_first() {
    let mut m = pool(3);
    let blocks = write_and_register(&mut m, &tokens(3, 3));
    let (a, b, c) = (blocks[0], blocks[1], blocks[2]);
    for x in [b, a, c] {
        m.release(x).unwrap();
    }
    assert_eq!(m.allocate(), Some(b));
    assert_eq!(m.allocate(), Some(a));
    assert_eq!(m.allocate(), Some(c));
    assert_eq!(m.stats().evictions, 3);
    m.audit().unwrap();
}

#[test]
fn a_prefix_hit_makes_its_blocks_the_most_recently_used() {
    let mut m = pool(3);
    let t = tokens(2, 3);
    let chain = write_and_register(&mut m, &t);
    let [other] = write_and_register(&mut m, &tokens(1, 4))[..] else {
        panic!()
    };
    // Tail first, as the scheduler releases a block table.
    m.release(chain[1]).unwrap();
    m.release(chain[0]).unwrap();
    m.release(other).unwrap();
    // LRU is now chain[1], chain[0], other; a hit on the chain touches it.
    let hit = m.match_prefix(&t);
    assert_eq!(hit, chain);
    for x in hit.iter().rev() {
        m.release(*x).unwrap();
    }
    assert_eq!(m.allocate(), Some(other));
    assert_eq!(m.allocate(), Some(chain[1]));
    assert_eq!(m.allocate(), Some(chain[0]));
    m.audit().unwrap();
}

#[test]
fn a_prefix_match_stops_at_the_first_missing_block() {
    let mut m = pool(8);
    let t = tokens(4, 4);
    let blocks = write_and_register(&mut m, &t[..2 * BLOCK_SIZE]);
    let mut other = t.clone();
    other[BLOCK_SIZE] ^= 1; // second block differs
    assert_eq!(m.match_prefix(&other), vec![blocks[0]]);
    assert_eq!(m.refcount(blocks[0]), 2);
    assert_eq!(m.refcount(blocks[1]), 1);
    let s = m.stats();
    assert_eq!((s.prefix_queries, s.prefix_hits), (64, 16));
    // A partial trailing block never matches.
    assert_eq!(m.match_prefix(&t[..2 * BLOCK_SIZE + 5]).len(), 2);
    // A 21-token prompt sums its first block's rows in another order than a
    // 32-token one (see `model::row_order`), so that block does not match.
    assert_eq!(m.match_prefix(&t[..BLOCK_SIZE + 5]).len(), 0);
}

#[test]
fn the_same_tokens_under_another_salt_do_not_match() {
    let mut a = BlockManager::new(4, true, [1; 32]).unwrap();
    let b = BlockManager::new(4, true, [2; 32]).unwrap();
    let t = tokens(2, 5);
    write_and_register(&mut a, &t);
    assert_ne!(a.block_hashes(&t), b.block_hashes(&t));
    assert!(a.lookup_prefix(&b.block_hashes(&t)).is_empty());
    assert_eq!(a.lookup_prefix(&a.block_hashes(&t)).len(), 2);
}

#[test]
fn a_duplicate_key_keeps_the_first_block_and_frees_the_second() {
    let mut m = pool(2);
    let h = m.root_hash().chain(&tokens(1, 6), &[0; BLOCK_SIZE]);
    let first = m.allocate().unwrap();
    let second = m.allocate().unwrap();
    assert!(m.register(h, first).unwrap());
    assert!(!m.register(h, second).unwrap());
    assert!(!m.register(h, first).unwrap());
    let other = m.root_hash().chain(&tokens(1, 7), &[0; BLOCK_SIZE]);
    assert_eq!(
        m.register(other, first),
        Err(KvError::AlreadyRegistered(first))
    );
    m.release(second).unwrap();
    m.release(first).unwrap();
    let s = m.stats();
    assert_eq!((s.free, s.cached_evictable), (1, 1));
    m.audit().unwrap();
}

#[test]
fn with_prefix_caching_disabled_nothing_is_cached_or_counted() {
    let mut m = BlockManager::new(2, false, SALT).unwrap();
    let t = tokens(1, 8);
    let b = m.allocate().unwrap();
    assert!(!m.register(m.block_hashes(&t)[0], b).unwrap());
    m.release(b).unwrap();
    assert!(m.match_prefix(&t).is_empty());
    let s = m.stats();
    assert_eq!((s.free, s.cached_evictable, s.prefix_queries), (2, 0, 0));
}
