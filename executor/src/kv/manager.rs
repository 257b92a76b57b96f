//! The block pool: reference counts, the free list and the prefix cache.
//!
//! This owns which of the `num_blocks` fixed-size KV blocks are in use, by how
//! many sequences, and which finished blocks are kept as a prefix cache. The
//! design follows vLLM's block manager (v1 `BlockPool` / `KVCacheManager`):
//! blocks are reference counted so sequences with a common prompt prefix share
//! them; a block whose count drops to zero is either free (never cached) or
//! stays cached and evictable in an LRU, and allocation takes a free block
//! before evicting the least recently used cached one. TGI's block allocator and
//! mistral.rs's paged-attention block engine keep the same free-list shape.
//!
//! Every block is in exactly one state: free (count 0, no key, on the free
//! list), used (count > 0, key optional) or cached-evictable (count 0, key, in
//! the LRU). Misuse (releasing a block nobody holds, acquiring a free block) is
//! reported as a typed [`KvError`] and leaves the counts untouched.
//!
//! Cost: `allocate` and `release` are O(log n) (the LRU is a `BTreeMap` keyed
//! by a monotonic tick), a prefix lookup is one hash-map probe per full block,
//! and the memory is a few words per block.

use std::collections::{BTreeMap, HashMap};

use crate::ids::{BLOCK_SIZE, BlockId};
use crate::kv::hash::{BlockHash, hash_blocks};

/// Misuse of the block pool. None of these change any count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvError {
    #[error("a KV pool needs at least one block")]
    ZeroBlocks,
    #[error("a KV pool of {0} blocks exceeds the u32 block id space")]
    TooManyBlocks(usize),
    #[error("block {0:?} is outside the pool")]
    UnknownBlock(BlockId),
    #[error("block {0:?} holds no reference (double release or never allocated)")]
    NotAllocated(BlockId),
    #[error("block {0:?} is free and not cached, so it cannot be acquired")]
    NotCached(BlockId),
    #[error("block {0:?} is already registered under another key")]
    AlreadyRegistered(BlockId),
}

/// Gauges and counters of the pool. `free + cached_evictable + used == total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KvStats {
    pub total: usize,
    /// Blocks on the free list (count 0, not cached).
    pub free: usize,
    /// Blocks with count 0 still holding a prefix-cache entry.
    pub cached_evictable: usize,
    /// Blocks with count > 0.
    pub used: usize,
    /// Tokens offered to prefix lookups, like vLLM's `prefix_cache_queries`.
    pub prefix_queries: u64,
    /// Tokens found in the prefix cache, like vLLM's `prefix_cache_hits`.
    pub prefix_hits: u64,
    /// Cached blocks evicted to satisfy an allocation.
    pub evictions: u64,
}

/// The pool of KV blocks with automatic prefix caching.
#[derive(Debug)]
pub struct BlockManager {
    refcount: Vec<u32>,
    key: Vec<Option<BlockHash>>,
    /// `Some(tick)` while the block is cached-evictable.
    lru_tick: Vec<Option<u64>>,
    /// Stack of free blocks; the initial order hands out low ids first.
    free: Vec<BlockId>,
    evictable: BTreeMap<u64, BlockId>,
    cached: HashMap<BlockHash, BlockId>,
    next_tick: u64,
    used: usize,
    root: BlockHash,
    prefix_caching: bool,
    prefix_queries: u64,
    prefix_hits: u64,
    evictions: u64,
}

impl BlockManager {
    /// A pool of `num_blocks` free blocks. `revision_salt` seeds every hash
    /// chain; with `enable_prefix_caching == false` nothing is ever cached.
    pub fn new(
        num_blocks: usize,
        enable_prefix_caching: bool,
        revision_salt: [u8; 32],
    ) -> Result<Self, KvError> {
        if num_blocks == 0 {
            return Err(KvError::ZeroBlocks);
        }
        if num_blocks > u32::MAX as usize {
            return Err(KvError::TooManyBlocks(num_blocks));
        }
        Ok(Self {
            refcount: vec![0; num_blocks],
            key: vec![None; num_blocks],
            lru_tick: vec![None; num_blocks],
            free: (0..num_blocks as u32).rev().map(BlockId).collect(),
            evictable: BTreeMap::new(),
            cached: HashMap::new(),
            next_tick: 0,
            used: 0,
            root: BlockHash::root(&revision_salt),
            prefix_caching: enable_prefix_caching,
            prefix_queries: 0,
            prefix_hits: 0,
            evictions: 0,
        })
    }

    pub fn num_blocks(&self) -> usize {
        self.refcount.len()
    }

    /// Blocks an allocation can obtain right now: free plus evictable.
    pub fn num_available(&self) -> usize {
        self.free.len() + self.evictable.len()
    }

    pub fn prefix_caching_enabled(&self) -> bool {
        self.prefix_caching
    }

    /// The chain root derived from the revision salt.
    pub fn root_hash(&self) -> BlockHash {
        self.root
    }

    /// The chain of every full block of `tokens` under this pool's salt.
    pub fn block_hashes(&self, tokens: &[u32]) -> Vec<BlockHash> {
        hash_blocks(&self.root, tokens)
    }

    /// References held on `block`; 0 for a block outside the pool.
    pub fn refcount(&self, block: BlockId) -> u32 {
        self.refcount.get(block.index()).copied().unwrap_or(0)
    }

    /// The prefix-cache key `block` is registered under, if any.
    pub fn cached_hash(&self, block: BlockId) -> Option<BlockHash> {
        self.key.get(block.index()).copied().flatten()
    }

    pub fn is_evictable(&self, block: BlockId) -> bool {
        matches!(self.lru_tick.get(block.index()), Some(Some(_)))
    }

    /// Takes a block with a count of 1: a free one first, else the least
    /// recently used cached block (dropping its key). `None` when every block is
    /// in use.
    pub fn allocate(&mut self) -> Option<BlockId> {
        let block = match self.free.pop() {
            Some(b) => b,
            None => {
                let (_, b) = self.evictable.pop_first()?;
                self.lru_tick[b.index()] = None;
                if let Some(k) = self.key[b.index()].take()
                    && self.cached.get(&k) == Some(&b)
                {
                    self.cached.remove(&k);
                }
                self.evictions += 1;
                b
            }
        };
        debug_assert_eq!(self.refcount[block.index()], 0);
        self.refcount[block.index()] = 1;
        self.used += 1;
        Some(block)
    }

    /// Drops one reference. At zero the block becomes free, or evictable (most
    /// recently used) if it is registered in the prefix cache.
    pub fn release(&mut self, block: BlockId) -> Result<(), KvError> {
        let i = self.check(block)?;
        if self.refcount[i] == 0 {
            return Err(KvError::NotAllocated(block));
        }
        self.refcount[i] -= 1;
        if self.refcount[i] == 0 {
            self.used -= 1;
            if self.key[i].is_some() {
                let tick = self.bump_tick();
                self.lru_tick[i] = Some(tick);
                self.evictable.insert(tick, block);
            } else {
                self.free.push(block);
            }
        }
        Ok(())
    }

    /// The longest chain of cached blocks matching `hashes` from the start,
    /// without taking references or counting a query. Pair with
    /// [`acquire_cached`](Self::acquire_cached) once the caller commits.
    pub fn lookup_prefix(&self, hashes: &[BlockHash]) -> Vec<BlockId> {
        if !self.prefix_caching {
            return Vec::new();
        }
        hashes
            .iter()
            .map_while(|h| self.cached.get(h).copied())
            .collect()
    }

    /// Takes a reference on a cached block found by a lookup; an evictable block
    /// leaves the LRU (it is re-inserted as most recent when released again).
    pub fn acquire_cached(&mut self, block: BlockId) -> Result<(), KvError> {
        let i = self.check(block)?;
        if self.refcount[i] == 0 {
            let Some(tick) = self.lru_tick[i].take() else {
                return Err(KvError::NotCached(block));
            };
            self.evictable.remove(&tick);
            self.used += 1;
        }
        self.refcount[i] += 1;
        Ok(())
    }

    /// Counts one prefix lookup of `query_tokens` tokens of which `hit_tokens`
    /// were served from the cache.
    pub fn record_prefix_lookup(&mut self, query_tokens: usize, hit_tokens: usize) {
        if self.prefix_caching {
            self.prefix_queries += query_tokens as u64;
            self.prefix_hits += hit_tokens as u64;
        }
    }

    /// Looks up the cached full blocks of `tokens`, takes a reference on each
    /// and counts the query. The caller owns the returned references.
    pub fn match_prefix(&mut self, tokens: &[u32]) -> Vec<BlockId> {
        if !self.prefix_caching {
            return Vec::new();
        }
        let blocks = self.lookup_prefix(&self.block_hashes(tokens));
        for &b in &blocks {
            // Blocks just returned by the lookup are cached, so this cannot fail.
            let acquired = self.acquire_cached(b);
            debug_assert!(acquired.is_ok());
        }
        self.record_prefix_lookup(tokens.len(), blocks.len() * BLOCK_SIZE);
        blocks
    }

    /// Registers a fully written, held block under `hash`. Returns whether it
    /// became the cache entry: `false` when caching is off, when the block is
    /// already registered under `hash`, or when another block already holds
    /// `hash` (this block then stays private and is freed normally).
    pub fn register(&mut self, hash: BlockHash, block: BlockId) -> Result<bool, KvError> {
        let i = self.check(block)?;
        if self.refcount[i] == 0 {
            return Err(KvError::NotAllocated(block));
        }
        if !self.prefix_caching {
            return Ok(false);
        }
        match self.key[i] {
            Some(k) if k == hash => return Ok(false),
            Some(_) => return Err(KvError::AlreadyRegistered(block)),
            None => {}
        }
        if self.cached.contains_key(&hash) {
            return Ok(false);
        }
        self.cached.insert(hash, block);
        self.key[i] = Some(hash);
        Ok(true)
    }

    pub fn stats(&self) -> KvStats {
        KvStats {
            total: self.num_blocks(),
            free: self.free.len(),
            cached_evictable: self.evictable.len(),
            used: self.used,
            prefix_queries: self.prefix_queries,
            prefix_hits: self.prefix_hits,
            evictions: self.evictions,
        }
    }

    /// Checks every internal structure against the others; for tests and
    /// debugging. O(num_blocks).
    pub fn audit(&self) -> Result<(), String> {
        let n = self.num_blocks();
        let mut on_free = vec![false; n];
        for b in &self.free {
            let i = b.index();
            if i >= n || on_free[i] {
                return Err(format!("{b:?} is out of range or twice on the free list"));
            }
            on_free[i] = true;
            if self.refcount[i] != 0 || self.key[i].is_some() || self.lru_tick[i].is_some() {
                return Err(format!("free {b:?} has a count, key or LRU entry"));
            }
        }
        for (tick, b) in &self.evictable {
            let i = b.index();
            if self.lru_tick[i] != Some(*tick) || self.refcount[i] != 0 || self.key[i].is_none() {
                return Err(format!("evictable {b:?} is inconsistent"));
            }
        }
        let used = self.refcount.iter().filter(|&&c| c > 0).count();
        if used != self.used {
            return Err(format!(
                "used gauge {} but {used} blocks hold references",
                self.used
            ));
        }
        if self.free.len() + self.evictable.len() + used != n {
            return Err("free + evictable + used != total".to_string());
        }
        for (h, b) in &self.cached {
            if self.key[b.index()] != Some(*h) {
                return Err(format!("cache entry for {b:?} disagrees with its key"));
            }
        }
        let keyed = self.key.iter().filter(|k| k.is_some()).count();
        if keyed != self.cached.len() {
            return Err(format!(
                "{keyed} keyed blocks but {} cache entries",
                self.cached.len()
            ));
        }
        Ok(())
    }

    fn check(&self, block: BlockId) -> Result<usize, KvError> {
        let i = block.index();
        if i < self.num_blocks() {
            Ok(i)
        } else {
            Err(KvError::UnknownBlock(block))
        }
    }

    fn bump_tick(&mut self) -> u64 {
        self.next_tick += 1;
        self.next_tick
    }
}
