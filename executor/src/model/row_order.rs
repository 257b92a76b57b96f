//! The order in which one row's attention sums are taken, chosen the way the
//! single-sequence reference (candle-transformers' quantized Llama over
//! candle's CPU `gemm` and softmax) takes them.
//!
//! Why it matters: f32 addition is not associative, and SmolLM2's residual
//! stream has outliers large enough that a last-bit difference in one
//! attention output flips an 8-bit activation rounding in the next matmul and
//! grows through 30 layers. To give the same greedy tokens as the reference we
//! reproduce its summation order, not just its formula.
//!
//! The reference runs the prompt as one call of `P` rows and then one call per
//! generated token, and candle picks a different kernel per shape:
//! - `q·kᵀ` over the 64 head dims: the prompt call (`P×P` scores) uses gemm's
//!   horizontal kernel (8 lanes, reduced as a tree) when `P ≤ 16` and its
//!   packed microkernel (one fused multiply-add chain) above; a decode call
//!   (`1×L` scores, `L = pos + 1`) uses the horizontal kernel when `L ≤ 256`
//!   and gemv (eight products per lane, a tree, then the lanes in turn) above.
//! - the softmax denominator is candle's AVX `vec_sum` over the whole score
//!   row (`P` long in the prompt call, masked entries being zero; `L` in a
//!   decode call): 32 elements per step into 4×8 lanes, a fixed reduction,
//!   then the remaining `len % 32` elements one by one.
//! - `p·V` is one fused multiply-add chain over the positions (gemm's
//!   microkernel in the prompt call, gemv in a decode call), except over
//!   exactly two positions, where gemm adds two rounded products. For prompts over
//!   512 tokens gemm splits that chain into blocks; we keep one chain (see
//!   [`RowOrder`]), so parity there is close but not exact.
//!
//! So a row's order depends on its position and on whether it was computed as
//! part of the prompt (and how long that prompt was). Rows of a sequence are
//! therefore always computed with the order of "prompt once, then one token at
//! a time", whatever chunking, batching or preemption the scheduler applies,
//! and the prefix cache keys a block by the orders of its rows as well as by
//! its tokens ([`block_tag`]), so reusing a block never changes a result.

use crate::ids::BLOCK_SIZE;

/// Which summation order an engine uses for its rows.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum AttentionOrder {
    /// The reference's: prompt rows as in one whole-prompt call, generated
    /// rows as in one-token calls. Logits are candle-transformers' bits. A
    /// block is reused only by a sequence that sums its rows the same way, so
    /// the next turn of a conversation recomputes the previous reply and the
    /// previous prompt's last partial 32-position group.
    #[default]
    Reference,
    /// Every row as in a one-token call: a row's order depends on its
    /// position alone, so every full block of a conversation, generated
    /// tokens included, serves its next turn. Still deterministic and
    /// batch-invariant, but not the reference's bits.
    Position,
}

impl AttentionOrder {
    /// The prompt length that rows are ordered by ([`RowOrder::for_row`]):
    /// the prompt's own in reference order, none in position order.
    pub fn ordered_prompt_len(self, prompt_len: usize) -> usize {
        match self {
            AttentionOrder::Reference => prompt_len,
            AttentionOrder::Position => 0,
        }
    }
}

/// How `q·k` over the head dimensions is summed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DotOrder {
    /// Lane `l` accumulates dims `l, l+8, ..` with fused multiply-adds; the
    /// lanes are then reduced as `((0+4)+(2+6)) + ((1+5)+(3+7))`.
    Lanes,
    /// One fused multiply-add chain over the dims in order.
    Chain,
    /// Eight rounded products per lane summed as a tree over the eight
    /// 8-dim chunks, then lane 0 + lane 1 + .. + lane 7 in order.
    Tree,
}

/// The summation order of one row's attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowOrder {
    pub dot: DotOrder,
    /// Whether every score of the row goes through `vec_sum`'s lanes. If not,
    /// positions from the start of the row's 32-position group onwards are
    /// added one by one after the lanes are reduced.
    pub all_lanes: bool,
    /// A row two positions long: gemm sums `p·V` as two rounded products
    /// added (its `k = 2` path) instead of a fused multiply-add chain.
    pub pair_sum: bool,
}

/// Scores up to this many per decode call use gemm's horizontal kernel.
const HORIZONTAL_MAX: usize = 16 * 16;
/// Elements per step of candle's AVX `vec_sum`.
const SUM_STEP: usize = 32;

impl RowOrder {
    /// The order for the row at position `pos` of a sequence whose prompt is
    /// `prompt_len` tokens long (positions past the prompt are generated).
    pub fn for_row(pos: usize, prompt_len: usize) -> RowOrder {
        let (dot, row_len) = if pos < prompt_len {
            let dot = if prompt_len * prompt_len <= HORIZONTAL_MAX {
                DotOrder::Lanes
            } else {
                DotOrder::Chain
            };
            (dot, prompt_len)
        } else {
            let len = pos + 1;
            let dot = if len <= HORIZONTAL_MAX {
                DotOrder::Lanes
            } else {
                DotOrder::Tree
            };
            (dot, len)
        };
        let lanes_end = row_len / SUM_STEP * SUM_STEP;
        RowOrder {
            dot,
            all_lanes: lanes_end > pos,
            pair_sum: row_len == 2 && pos == 1,
        }
    }

    /// Where the row's one-by-one tail of the softmax sum starts.
    pub fn lane_sum_end(&self, pos: usize) -> usize {
        if self.all_lanes {
            pos + 1
        } else {
            pos / SUM_STEP * SUM_STEP
        }
    }

    /// A one-byte code, distinct for distinct orders.
    pub fn code(&self) -> u8 {
        let dot = match self.dot {
            DotOrder::Lanes => 0,
            DotOrder::Chain => 1,
            DotOrder::Tree => 2,
        };
        dot | (u8::from(self.all_lanes) << 2) | (u8::from(self.pair_sum) << 3)
    }
}

/// The orders of the rows of block `block` (positions `block * BLOCK_SIZE ..`)
/// for a sequence with a `prompt_len`-token prompt, one code per row: part of
/// the block's prefix-cache key.
pub fn block_tag(block: usize, prompt_len: usize) -> [u8; BLOCK_SIZE] {
    let mut tag = [0u8; BLOCK_SIZE];
    for (slot, code) in tag.iter_mut().enumerate() {
        *code = RowOrder::for_row(block * BLOCK_SIZE + slot, prompt_len).code();
    }
    tag
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_rows_follow_the_prompt_call_and_generated_rows_their_own() {
        // A 16-token prompt fits the horizontal kernel, a 17-token one does not.
        assert_eq!(RowOrder::for_row(3, 16).dot, DotOrder::Lanes);
        assert_eq!(RowOrder::for_row(3, 17).dot, DotOrder::Chain);
        // Generated rows: horizontal up to 256 scores, gemv above.
        assert_eq!(RowOrder::for_row(40, 17).dot, DotOrder::Lanes);
        assert_eq!(RowOrder::for_row(255, 17).dot, DotOrder::Lanes);
        assert_eq!(RowOrder::for_row(256, 17).dot, DotOrder::Tree);
    }

    #[test]
    fn the_softmax_tail_starts_where_vec_sum_stops_using_lanes() {
        // A 70-token prompt: lanes cover 0..64, so rows 0..64 are all lanes
        // and rows 64..70 add their own group one by one.
        assert!(RowOrder::for_row(10, 70).all_lanes);
        assert!(RowOrder::for_row(63, 70).all_lanes);
        let r = RowOrder::for_row(65, 70);
        assert!(!r.all_lanes);
        assert_eq!(r.lane_sum_end(65), 64);
        // Generated rows: only the last row of a 32-group is all lanes.
        assert!(!RowOrder::for_row(70, 70).all_lanes);
        assert!(RowOrder::for_row(95, 70).all_lanes);
        assert_eq!(RowOrder::for_row(95, 70).lane_sum_end(95), 96);
    }

    #[test]
    fn position_order_depends_on_the_position_alone() {
        let len = |p| AttentionOrder::Position.ordered_prompt_len(p);
        for pos in [0, 15, 31, 40, 300] {
            assert_eq!(
                RowOrder::for_row(pos, len(20)),
                RowOrder::for_row(pos, len(500))
            );
        }
        assert_eq!(block_tag(3, len(20)), block_tag(3, len(90)));
        assert_eq!(AttentionOrder::Reference.ordered_prompt_len(90), 90);
    }

    #[test]
    fn block_tags_differ_exactly_where_the_orders_do() {
        // Shared full groups of two prompts have the same tags...
        assert_eq!(block_tag(1, 70), block_tag(1, 100));
        // ...but a group the shorter prompt does not complete does not.
        assert_eq!(block_tag(2, 70), block_tag(2, 100));
        assert_ne!(block_tag(4, 70), block_tag(4, 100));
        // A prompt row and a generated row at the same position differ.
        assert_ne!(block_tag(0, 40), block_tag(0, 8));
    }
}
