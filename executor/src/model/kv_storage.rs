//! The tensor memory behind the paged KV cache.
//!
//! One contiguous f32 buffer per layer for keys and one for values. Values are
//! laid out `[block][kv_head][slot][head_dim]`, keys `[block][kv_head][head_dim]
//! [slot]`: one head's keys inside a block are stored dimension-major, so the
//! attention loop multiplies a query dimension into 16 keys with one vector op
//! while each key's sum keeps its own order (see `model::attention`). The bookkeeping (which block belongs to
//! whom) lives in `kv::BlockManager`; this type only stores numbers. Memory is
//! allocated zeroed, so the OS maps pages lazily as blocks are first written.

use crate::ids::{BLOCK_SIZE, BlockId};
use crate::model::config::ModelConfig;

pub struct KvStorage {
    layers: Vec<(Vec<f32>, Vec<f32>)>,
    num_blocks: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

impl std::fmt::Debug for KvStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvStorage")
            .field("layers", &self.layers.len())
            .field("num_blocks", &self.num_blocks)
            .finish()
    }
}

impl KvStorage {
    pub fn new(cfg: &ModelConfig, num_blocks: usize) -> Self {
        let per_layer = num_blocks * cfg.n_kv_heads * BLOCK_SIZE * cfg.head_dim;
        KvStorage {
            layers: (0..cfg.n_layers)
                .map(|_| (vec![0.0; per_layer], vec![0.0; per_layer]))
                .collect(),
            num_blocks,
            n_kv_heads: cfg.n_kv_heads,
            head_dim: cfg.head_dim,
        }
    }

    /// How many blocks fit in `budget_bytes`, keeping `headroom` (0..1) unplanned.
    pub fn blocks_for_budget(cfg: &ModelConfig, budget_bytes: usize, headroom: f32) -> usize {
        let usable = (budget_bytes as f64 * (1.0 - headroom.clamp(0.0, 0.99) as f64)) as usize;
        usable / (BLOCK_SIZE * cfg.kv_bytes_per_token())
    }

    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    pub fn bytes(&self) -> usize {
        self.layers.len() * 2 * self.num_blocks * self.n_kv_heads * BLOCK_SIZE * self.head_dim * 4
    }

    #[inline]
    pub fn offset(&self, block: BlockId, head: usize, slot: usize) -> usize {
        ((block.index() * self.n_kv_heads + head) * BLOCK_SIZE + slot) * self.head_dim
    }

    /// Writes one token's key and value for `head` at `slot` of `block`.
    pub fn write_token(
        &mut self,
        layer: usize,
        block: BlockId,
        head: usize,
        slot: usize,
        k: &[f32],
        v: &[f32],
    ) {
        let base = self.offset(block, head, 0);
        let d = self.head_dim;
        let (kc, vc) = &mut self.layers[layer];
        for (i, &x) in k[..d].iter().enumerate() {
            kc[base + i * BLOCK_SIZE + slot] = x;
        }
        vc[base + slot * d..base + (slot + 1) * d].copy_from_slice(&v[..d]);
    }

    pub fn layer(&self, layer: usize) -> (&[f32], &[f32]) {
        let (k, v) = &self.layers[layer];
        (k, v)
    }
}
