//! Paged attention for one query row and one head, fused in a single pass.
//!
//! The row walks its own block table over positions `0..=pos` with an online
//! softmax (running max and sum), so no score buffer is allocated and the
//! arithmetic for a row depends only on that row's query and its own cached
//! keys and values, never on what else shares the step. That is what makes
//! our outputs batch-invariant.

use crate::ids::{BLOCK_SIZE, BlockId};
use crate::model::kv_storage::KvStorage;

/// Computes `softmax(q·Kᵀ·scale)·V` over positions `0..=pos` into `out`.
#[allow(clippy::too_many_arguments)]
pub fn attend_one(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    kv: &KvStorage,
    block_table: &[BlockId],
    kv_head: usize,
    pos: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len();
    out.fill(0.0);
    let mut max = f32::NEG_INFINITY;
    let mut sum = 0f32;
    let n = pos + 1;
    for (b, &block) in block_table.iter().enumerate() {
        let first = b * BLOCK_SIZE;
        if first >= n {
            break;
        }
        let slots = (n - first).min(BLOCK_SIZE);
        let base = kv.offset(block, kv_head, 0);
        for s in 0..slots {
            let k = &k_cache[base + s * d..base + (s + 1) * d];
            let score = dot(q, k) * scale;
            let v = &v_cache[base + s * d..base + (s + 1) * d];
            if score > max {
                let correction = (max - score).exp();
                sum *= correction;
                for o in out.iter_mut() {
                    *o *= correction;
                }
                max = score;
            }
            let w = (score - max).exp();
            sum += w;
            for (o, &vv) in out.iter_mut().zip(v) {
                *o += w * vv;
            }
        }
    }
    let inv = 1.0 / sum;
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// Dot product with 8 independent accumulators in a fixed order, so the
/// compiler vectorises it while the result stays a pure function of the inputs.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for j in 0..8 {
            acc[j] += a[c * 8 + j] * b[c * 8 + j];
        }
    }
    let mut tail = 0f32;
    for i in chunks * 8..a.len() {
        tail += a[i] * b[i];
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}
