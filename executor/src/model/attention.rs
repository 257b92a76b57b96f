//! Paged attention for one query row and one head, summed in the reference's
//! order ([`RowOrder`]).
//!
//! The row walks its own block table over positions `0..=pos` in three passes,
//! as candle does: scores (`q·k · scale`), the softmax (max, `exp`, a sum in
//! `vec_sum` order, a division), then `p·V` as one fused multiply-add chain
//! per output dimension. Keys are stored dimension-major inside a block, so
//! the products of 16 keys vectorise across keys while each key's own sum keeps
//! its order. The arithmetic of a row depends only on its query, its own cached
//! keys and values and its order, never on what else shares the step: that is
//! what makes our outputs batch-invariant.
//!
//! Every operation is an IEEE f32 add, multiply, divide, `f32::exp` or fused
//! multiply-add, so the AVX2+FMA build of this code (chosen at run time, like
//! the matmul kernels) and the portable build give identical bits.

use std::cell::RefCell;

use crate::ids::{BLOCK_SIZE, BlockId};
#[cfg(target_arch = "x86_64")]
use crate::kernels::kernel_path;
use crate::model::kv_storage::KvStorage;
use crate::model::row_order::{DotOrder, RowOrder};

/// Where one row's attention reads from.
#[derive(Clone, Copy)]
pub struct RowKv<'a> {
    pub k_cache: &'a [f32],
    pub v_cache: &'a [f32],
    pub kv: &'a KvStorage,
    pub block_table: &'a [BlockId],
    pub kv_head: usize,
}

impl RowKv<'_> {
    /// For each block holding positions `0..=pos`: its first position, how
    /// many of its slots are in range, and where its tile starts in the cache.
    #[inline(always)]
    fn blocks(&self, pos: usize) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        let n = pos + 1;
        self.block_table[..n.div_ceil(BLOCK_SIZE)]
            .iter()
            .enumerate()
            .map(move |(b, &block)| {
                let first = b * BLOCK_SIZE;
                let slots = (n - first).min(BLOCK_SIZE);
                (first, slots, self.kv.offset(block, self.kv_head, 0))
            })
    }
}

thread_local! {
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// How one row's scores are formed and which positions it sees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scoring {
    /// Multiplies `q·k`.
    pub scale: f32,
    /// `cap * tanh(s / cap)` on each scaled score (Gemma 2).
    pub softcap: Option<f32>,
    /// Only the last `window` positions (the row's own included) are
    /// attended to; earlier ones are masked out (sliding-window layers).
    pub window: Option<usize>,
}

impl Scoring {
    pub fn plain(scale: f32) -> Scoring {
        Scoring {
            scale,
            softcap: None,
            window: None,
        }
    }

    /// The first position a row at `pos` attends to.
    #[inline(always)]
    fn first(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| (pos + 1).saturating_sub(w))
    }
}

/// Computes `softmax(q·Kᵀ·scale)·V` over positions `0..=pos` into `out`.
pub fn attend_one(
    q: &[f32],
    src: RowKv<'_>,
    pos: usize,
    order: RowOrder,
    scale: f32,
    out: &mut [f32],
) {
    attend_one_with(q, src, pos, order, Scoring::plain(scale), out)
}

/// [`attend_one`] with soft-capping and a sliding window: masked positions
/// get a score of `-inf`, so they add exact zeros to the softmax sum and
/// `p·V`, and the summation order of the rest is unchanged.
pub fn attend_one_with(
    q: &[f32],
    src: RowKv<'_>,
    pos: usize,
    order: RowOrder,
    scale: Scoring,
    out: &mut [f32],
) {
    SCORES.with_borrow_mut(|scores| {
        scores.clear();
        scores.resize(pos + 1, 0.0);
        #[cfg(target_arch = "x86_64")]
        if kernel_path().uses_avx2() {
            // SAFETY: the Avx2 path is only chosen after runtime detection of
            // avx2 and fma.
            unsafe { attend_avx2(q, src, pos, order, scale, scores, out) };
            return;
        }
        attend(q, src, pos, order, scale, scores, out);
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_avx2(
    q: &[f32],
    src: RowKv<'_>,
    pos: usize,
    order: RowOrder,
    scale: Scoring,
    scores: &mut [f32],
    out: &mut [f32],
) {
    attend(q, src, pos, order, scale, scores, out)
}

#[inline(always)]
fn attend(
    q: &[f32],
    src: RowKv<'_>,
    pos: usize,
    order: RowOrder,
    scale: Scoring,
    scores: &mut [f32],
    out: &mut [f32],
) {
    let d = q.len();
    let visible = scale.first(pos);
    for (first, slots, base) in src.blocks(pos) {
        if first + slots <= visible {
            scores[first..first + slots].fill(f32::NEG_INFINITY);
            continue;
        }
        let kt = &src.k_cache[base..base + d * BLOCK_SIZE];
        let s = block_scores(q, kt, order.dot);
        for (dst, &v) in scores[first..first + slots].iter_mut().zip(&s) {
            *dst = v * scale.scale;
        }
        if let Some(cap) = scale.softcap {
            for dst in &mut scores[first..first + slots] {
                *dst = (*dst / cap).tanh() * cap;
            }
        }
    }
    scores[..visible].fill(f32::NEG_INFINITY);

    let mut max = scores[0];
    for &s in &scores[1..] {
        max = max.max(s);
    }
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
    }
    let sum = softmax_sum(scores, order.lane_sum_end(pos));
    for s in scores.iter_mut() {
        *s /= sum;
    }

    if order.pair_sum {
        // gemm's k = 2 path: two rounded products, then one addition.
        let base = src.kv.offset(src.block_table[0], src.kv_head, 0);
        let (v0, v1) = (
            &src.v_cache[base..base + d],
            &src.v_cache[base + d..base + 2 * d],
        );
        for ((o, &a), &b) in out.iter_mut().zip(v0).zip(v1) {
            *o = a * scores[0] + b * scores[1];
        }
        return;
    }
    out.fill(0.0);
    for (first, slots, base) in src.blocks(pos) {
        if first + slots <= visible {
            continue;
        }
        for (x, &p) in scores[first..first + slots].iter().enumerate() {
            let v = &src.v_cache[base + x * d..base + (x + 1) * d];
            for (o, &vv) in out.iter_mut().zip(v) {
                *o = vv.mul_add(p, *o);
            }
        }
    }
}

/// `q·k` for the 16 keys of one block, stored dimension-major (`kt[i * 16 + x]`
/// is dimension `i` of key `x`), each summed in `order`. The lane orders run 8
/// keys at a time so their accumulators stay in registers.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // `x` indexes the keys and the sums in step
fn block_scores(q: &[f32], kt: &[f32], order: DotOrder) -> [f32; BLOCK_SIZE] {
    let mut s = [0f32; BLOCK_SIZE];
    if order == DotOrder::Chain {
        // Two independent 8-key chains in one loop: twice the parallelism of
        // a latency-bound chain, and 2 accumulator registers fit easily.
        for (i, &qi) in q.iter().enumerate() {
            let k = &kt[i * BLOCK_SIZE..(i + 1) * BLOCK_SIZE];
            for x in 0..BLOCK_SIZE {
                s[x] = k[x].mul_add(qi, s[x]);
            }
        }
        return s;
    }
    for (half, out) in s.chunks_exact_mut(HALF).enumerate() {
        let keys = |i: usize| -> &[f32; HALF] {
            let at = i * BLOCK_SIZE + half * HALF;
            kt[at..at + HALF]
                .try_into()
                .expect("half a block row is HALF wide")
        };
        let r = match order {
            DotOrder::Lanes => dot_lanes(q, keys),
            _ => dot_tree(q, keys),
        };
        out.copy_from_slice(&r);
    }
    s
}

/// Keys per vector of scores.
const HALF: usize = BLOCK_SIZE / 2;
type Keys = [f32; HALF];

#[inline(always)]
fn fma_into(acc: &mut Keys, k: &Keys, q: f32) {
    for x in 0..HALF {
        acc[x] = k[x].mul_add(q, acc[x]);
    }
}

#[inline(always)]
fn add(a: Keys, b: Keys) -> Keys {
    std::array::from_fn(|x| a[x] + b[x])
}

/// gemm's horizontal kernel: lane `l` chains dims `l, l+8, ..`; a short last
/// chunk reads zeros there, which leave a lane unchanged. Then
/// `((0+4)+(2+6)) + ((1+5)+(3+7))`.
#[inline(always)]
fn dot_lanes<'k>(q: &[f32], keys: impl Fn(usize) -> &'k Keys) -> Keys {
    let mut acc = [[0f32; HALF]; 8];
    let full = q.len() / 8 * 8;
    for c in (0..full).step_by(8) {
        for (l, a) in acc.iter_mut().enumerate() {
            fma_into(a, keys(c + l), q[c + l]);
        }
    }
    for (i, &qi) in q.iter().enumerate().skip(full) {
        fma_into(&mut acc[i % 8], keys(i), qi);
    }
    add(
        add(add(acc[0], acc[4]), add(acc[2], acc[6])),
        add(add(acc[1], acc[5]), add(acc[3], acc[7])),
    )
}

/// gemm's row-major gemv: accumulator `c` of lane `l` chains dim
/// `64t + 8c + l` over the full 64-dim chunks `t`; the eight are added as a
/// tree per lane; further full 8-dim chunks chain into their lane; the lanes
/// are summed in order, then any last dims chain one by one.
#[inline(always)]
fn dot_tree<'k>(q: &[f32], keys: impl Fn(usize) -> &'k Keys) -> Keys {
    let d = q.len();
    let (full64, full8) = (d / 64 * 64, d / 8 * 8);
    let mut lanes = [[0f32; HALF]; 8];
    for (l, lane) in lanes.iter_mut().enumerate() {
        let mut acc = [[0f32; HALF]; 8];
        for t in (0..full64).step_by(64) {
            for (c, a) in acc.iter_mut().enumerate() {
                let i = t + 8 * c + l;
                fma_into(a, keys(i), q[i]);
            }
        }
        *lane = add(
            add(add(acc[0], acc[1]), add(acc[2], acc[3])),
            add(add(acc[4], acc[5]), add(acc[6], acc[7])),
        );
    }
    for (i, &qi) in q.iter().enumerate().take(full8).skip(full64) {
        fma_into(&mut lanes[i % 8], keys(i), qi);
    }
    let mut s = lanes[0];
    for lane in &lanes[1..] {
        s = add(s, *lane);
    }
    for (i, &qi) in q.iter().enumerate().skip(full8) {
        fma_into(&mut s, keys(i), qi);
    }
    s
}

/// The softmax denominator as candle's AVX `vec_sum` forms it: elements before
/// `lanes_end` go to 4×8 lanes by index (lane `j % 32`), which are reduced as
/// `(a0+a1)+(a2+a3)` per lane and then `((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7))`;
/// the rest are added one by one.
#[inline(always)]
fn softmax_sum(e: &[f32], lanes_end: usize) -> f32 {
    let lanes_end = lanes_end.min(e.len());
    let mut acc = [[0f32; 8]; 4];
    for (j, &v) in e[..lanes_end].iter().enumerate() {
        let a = &mut acc[(j % 32) / 8][j % 8];
        *a += v;
    }
    let mut x = [0f32; 8];
    for (l, xl) in x.iter_mut().enumerate() {
        *xl = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
    }
    let t = [x[0] + x[4], x[1] + x[5], x[2] + x[6], x[3] + x[7]];
    let mut sum = (t[0] + t[1]) + (t[2] + t[3]);
    for &v in &e[lanes_end..] {
        sum += v;
    }
    sum
}
