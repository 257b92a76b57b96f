//! One product's work (weights with their quantized activations) and how it is
//! run: on the calling thread, split over the rayon pool by activation rows or
//! by weight-row groups, and inside each task in L2/L1 cache blocks. Also the
//! tuning constants of those choices.

use std::ops::Range;

use rayon::prelude::*;

use super::blocked::{self, BlockActs};
#[cfg(target_arch = "x86_64")]
use super::driver;
use super::q8k::Q8KBlock;
use super::quant::{Q8Block, QK};
use super::{
    BF16Bits, F16Bits, GROUP, KernelPath, PackedBlocks, Sink, blocks, dense, q4_1, q4k, q6k, q8_0,
    qx_0,
};

/// Products estimated to take less than this many nanoseconds on one core run on the
/// calling thread. A fork/join costs microseconds when the pool is idle, and on a shared
/// machine a pool thread preempted in the middle of its task holds up the whole call for a
/// scheduler slice, so tiny products are not split. Measured on a single-sequence decode
/// of SmolLM2 Q4_K_M on 2 cores: at 100 µs every layer product ran on one core (135
/// tok/s); at 20 µs all of them but the smallest are split (194-210 tok/s); 5 and 10 µs
/// gave no more.
pub const PAR_MIN_NS: usize = 20_000;
/// One core's throughput assumed by that estimate: weight bytes streamed from memory per
/// nanosecond (8 GB/s) and multiply-adds per nanosecond (50 GMAC/s, about 100 GFLOP/s).
const SEQ_BYTES_PER_NS: usize = 8;
const SEQ_MACS_PER_NS: usize = 50;
/// Batches at least this large are split across threads by activation rows, when the
/// weights are small enough to be re-read from cache by every task.
pub const ACT_SPLIT_MIN_T: usize = 32;
/// Largest weight matrix (bytes) split by activation rows; larger ones (the output head)
/// are always split by weight rows so they are streamed from memory once per round.
const ACT_SPLIT_MAX_WEIGHT_BYTES: usize = 4 << 20;
/// Fewest activation rows per task when splitting by activation rows.
const ACT_SPLIT_MIN_ROWS: usize = 8;
/// Activation rows are handed to the kernels in multiples of this (the kernels take
/// runs of 3, 4 or 6 rows).
const ROW_RUN: usize = 12;
/// Most activation rows per round when splitting by weight rows (bounds the scratch).
const GROUP_SPLIT_MAX_T: usize = 64;
/// Tasks per pool thread, so a slow core (the machine is shared) does not stall the call.
pub(super) const TASKS_PER_THREAD: usize = 4;
/// Weight bytes per cache block (kept in L2 across a block of activation rows).
const L2_BLOCK_BYTES: usize = 256 << 10;
/// Quantized activation bytes per cache block (kept in L1 across a weight group).
const L1_BLOCK_BYTES: usize = 8 << 10;

/// Weights with their (quantized) activations.
#[derive(Clone, Copy)]
pub(super) enum Work<'a> {
    Q4_1 {
        tiles: &'a [q4_1::Q4_1x8],
        acts: &'a [Q8Block],
    },
    Q8_0 {
        tiles: &'a [q8_0::Q8_0x8],
        acts: &'a [Q8Block],
    },
    Q4_0 {
        tiles: &'a [qx_0::Q4_0x8],
        acts: &'a [Q8Block],
    },
    Q5_0 {
        tiles: &'a [qx_0::Q5_0x8],
        acts: &'a [Q8Block],
    },
    Q4K {
        tiles: &'a [q4k::Q4Kx8],
        acts: &'a [Q8KBlock],
    },
    Q6K {
        tiles: &'a [q6k::Q6Kx8],
        acts: &'a [Q8KBlock],
    },
    Blocks {
        w: &'a PackedBlocks,
        acts: BlockActs<'a>,
    },
    F32 {
        w: &'a [f32],
        x: &'a [f32],
    },
    F16 {
        w: &'a [F16Bits],
        x: &'a [f32],
    },
    BF16 {
        w: &'a [BF16Bits],
        x: &'a [f32],
    },
}

/// One product to compute.
pub(super) struct Job<'a> {
    pub(super) work: Work<'a>,
    pub(super) path: KernelPath,
    pub(super) rows: usize,
    pub(super) cols: usize,
}

impl Job<'_> {
    /// Computes the outputs of weight-row groups `groups` for activation rows `act_rows`.
    fn run(&self, groups: Range<usize>, act_rows: Range<usize>, sink: &mut Sink<'_>) {
        let nb = self.cols / QK;
        let nb_k = self.cols / blocks::QK_K;
        #[cfg(target_arch = "x86_64")]
        if self.path.uses_avx2() {
            // SAFETY: `matmul_on_path` only builds a job on an AVX2 path after
            // `is_available()`, i.e. runtime detection of avx2, fma, f16c (and avx512f,
            // avx512vl, avx512bw, avx512vnni for `Avx512Vnni`).
            let vnni = self.path == KernelPath::Avx512Vnni;
            unsafe {
                match self.work {
                    Work::Q4_1 { tiles, acts } => {
                        q4_1::run_avx2(tiles, nb, acts, groups, act_rows, sink)
                    }
                    Work::Q8_0 { tiles, acts } => {
                        q8_0::run_avx2(tiles, nb, acts, groups, act_rows, sink)
                    }
                    Work::Q4_0 { tiles, acts } => {
                        driver::run_avx2(vnni, tiles, nb, acts, groups, act_rows, sink)
                    }
                    Work::Q5_0 { tiles, acts } => {
                        driver::run_avx2(vnni, tiles, nb, acts, groups, act_rows, sink)
                    }
                    Work::Q4K { tiles, acts } => {
                        driver::run_avx2(vnni, tiles, nb_k, acts, groups, act_rows, sink)
                    }
                    Work::Q6K { tiles, acts } => {
                        driver::run_avx2(vnni, tiles, nb_k, acts, groups, act_rows, sink)
                    }
                    Work::Blocks { w, acts } => blocked::run(true, w, acts, groups, act_rows, sink),
                    Work::F32 { w, x } => {
                        dense::run_avx2(w, self.rows, self.cols, x, groups, act_rows, sink)
                    }
                    Work::F16 { w, x } => {
                        dense::run_avx2(w, self.rows, self.cols, x, groups, act_rows, sink)
                    }
                    Work::BF16 { w, x } => {
                        dense::run_avx2(w, self.rows, self.cols, x, groups, act_rows, sink)
                    }
                }
            }
            return;
        }
        match self.work {
            Work::Q4_1 { tiles, acts } => q4_1::run_scalar(tiles, nb, acts, groups, act_rows, sink),
            Work::Q8_0 { tiles, acts } => q8_0::run_scalar(tiles, nb, acts, groups, act_rows, sink),
            Work::Q4_0 { tiles, acts } => qx_0::run_scalar(tiles, nb, acts, groups, act_rows, sink),
            Work::Q5_0 { tiles, acts } => qx_0::run_scalar(tiles, nb, acts, groups, act_rows, sink),
            Work::Q4K { tiles, acts } => q4k::run_scalar(tiles, nb_k, acts, groups, act_rows, sink),
            Work::Q6K { tiles, acts } => q6k::run_scalar(tiles, nb_k, acts, groups, act_rows, sink),
            Work::Blocks { w, acts } => blocked::run(false, w, acts, groups, act_rows, sink),
            Work::F32 { w, x } => {
                dense::run_scalar(w, self.rows, self.cols, x, groups, act_rows, sink)
            }
            Work::F16 { w, x } => {
                dense::run_scalar(w, self.rows, self.cols, x, groups, act_rows, sink)
            }
            Work::BF16 { w, x } => {
                dense::run_scalar(w, self.rows, self.cols, x, groups, act_rows, sink)
            }
        }
    }

    /// [`Job::run`] in cache blocks: a chunk of weight groups sized to stay in L2, and
    /// within it chunks of activation rows sized to stay in L1, so large batches do not
    /// stream every activation row past every weight group from L2.
    fn run_blocked(&self, groups: Range<usize>, act_rows: Range<usize>, sink: &mut Sink<'_>) {
        let nb = self.cols.div_ceil(QK);
        let (group_bytes, act_row_bytes) = match self.work {
            Work::Q4_1 { .. } => (nb * size_of::<q4_1::Q4_1x8>(), nb * size_of::<Q8Block>()),
            Work::Q8_0 { .. } => (nb * size_of::<q8_0::Q8_0x8>(), nb * size_of::<Q8Block>()),
            Work::Q4_0 { .. } => (nb * size_of::<qx_0::Q4_0x8>(), nb * size_of::<Q8Block>()),
            Work::Q5_0 { .. } => (nb * size_of::<qx_0::Q5_0x8>(), nb * size_of::<Q8Block>()),
            Work::Q4K { .. } => {
                let nb_k = self.cols / blocks::QK_K;
                (nb_k * size_of::<q4k::Q4Kx8>(), nb_k * size_of::<Q8KBlock>())
            }
            Work::Q6K { .. } => {
                let nb_k = self.cols / blocks::QK_K;
                (nb_k * size_of::<q6k::Q6Kx8>(), nb_k * size_of::<Q8KBlock>())
            }
            Work::Blocks { w, acts } => (
                GROUP * w.byte_size() / self.rows,
                match acts {
                    BlockActs::Q8(_) => nb * size_of::<Q8Block>(),
                    BlockActs::K(_) => self.cols / blocks::QK_K * size_of::<Q8KBlock>(),
                },
            ),
            Work::F32 { .. } => (GROUP * self.cols * 4, self.cols * 4),
            Work::F16 { .. } | Work::BF16 { .. } => (GROUP * self.cols * 2, self.cols * 4),
        };
        let group_block = (L2_BLOCK_BYTES / group_bytes).max(1);
        // Whole runs of the kernels' row counts (3, 4 and 6 rows share a weight chunk):
        // a block of 8 rows would run 6 + 2, the 2 at half the speed.
        let row_block = (L1_BLOCK_BYTES / act_row_bytes / ROW_RUN * ROW_RUN).max(ROW_RUN);
        let mut g0 = groups.start;
        while g0 < groups.end {
            let g1 = groups.end.min(g0 + group_block);
            let mut r0 = act_rows.start;
            while r0 < act_rows.end {
                let r1 = act_rows.end.min(r0 + row_block);
                self.run(g0..g1, r0..r1, sink);
                r0 = r1;
            }
            g0 = g1;
        }
    }

    /// Runs the whole product, choosing how to split it across the rayon pool.
    pub(super) fn execute(&self, t: usize, out: &mut [f32], tmp: &mut Vec<f32>) {
        let rows = self.rows;
        let groups = rows.div_ceil(GROUP);
        let threads = rayon::current_num_threads();
        let macs = t.saturating_mul(rows).saturating_mul(self.cols);
        let est_ns = (self.weight_bytes() / SEQ_BYTES_PER_NS).max(macs / SEQ_MACS_PER_NS);
        if threads <= 1 || est_ns < PAR_MIN_NS {
            self.run_blocked(0..groups, 0..t, &mut |g, i, v| put(out, rows, 0, g, i, v));
        } else if t >= ACT_SPLIT_MIN_T && self.weight_bytes() <= ACT_SPLIT_MAX_WEIGHT_BYTES {
            // Each task owns whole output rows and re-reads the (cache-resident) weights.
            let per = t
                .div_ceil(threads * TASKS_PER_THREAD)
                .next_multiple_of(ROW_RUN)
                .max(ACT_SPLIT_MIN_ROWS);
            out.par_chunks_mut(per * rows)
                .enumerate()
                .for_each(|(c, chunk)| {
                    let i0 = c * per;
                    let n = chunk.len() / rows;
                    self.run_blocked(0..groups, i0..i0 + n, &mut |g, i, v| {
                        put(chunk, rows, 0, g, i - i0, v)
                    });
                });
        } else {
            // Each task owns a range of weight-row groups, so the weights are streamed once
            // per round of at most GROUP_SPLIT_MAX_T activation rows.
            let per = groups.div_ceil(threads * TASKS_PER_THREAD);
            for (r, out) in out.chunks_mut(GROUP_SPLIT_MAX_T * rows).enumerate() {
                let i0 = r * GROUP_SPLIT_MAX_T;
                let t = out.len() / rows;
                if t == 1 {
                    // One output row: tasks own disjoint column ranges of it directly.
                    out.par_chunks_mut(per * GROUP)
                        .enumerate()
                        .for_each(|(c, chunk)| {
                            let g0 = c * per;
                            let n = chunk.len().div_ceil(GROUP);
                            self.run_blocked(g0..g0 + n, i0..i0 + 1, &mut |g, _, v| {
                                put(chunk, chunk.len(), g0, g, 0, v)
                            });
                        });
                    continue;
                }
                // Results go through `tmp`, group-major, then are gathered row by row.
                if tmp.len() < groups * t * GROUP {
                    tmp.resize(groups * t * GROUP, 0.0);
                }
                let tmp = &mut tmp[..groups * t * GROUP];
                tmp.par_chunks_mut(per * t * GROUP)
                    .enumerate()
                    .for_each(|(c, chunk)| {
                        let g0 = c * per;
                        let n = chunk.len() / (t * GROUP);
                        self.run_blocked(g0..g0 + n, i0..i0 + t, &mut |g, i, v| {
                            let at = ((g - g0) * t + i - i0) * GROUP;
                            chunk[at..at + GROUP].copy_from_slice(v)
                        });
                    });
                let tmp = &*tmp;
                out.par_chunks_mut(rows).enumerate().for_each(|(i, row)| {
                    for (g, per_group) in tmp.chunks_exact(t * GROUP).enumerate() {
                        put(row, rows, 0, g, 0, &per_group[i * GROUP..(i + 1) * GROUP]);
                    }
                });
            }
        }
    }

    fn weight_bytes(&self) -> usize {
        let nb = self.cols.div_ceil(QK);
        let groups = self.rows.div_ceil(GROUP);
        match self.work {
            Work::Q4_1 { .. } => groups * nb * size_of::<q4_1::Q4_1x8>(),
            Work::Q8_0 { .. } => groups * nb * size_of::<q8_0::Q8_0x8>(),
            Work::Q4_0 { .. } => groups * nb * size_of::<qx_0::Q4_0x8>(),
            Work::Q5_0 { .. } => groups * nb * size_of::<qx_0::Q5_0x8>(),
            Work::Q4K { .. } => groups * (self.cols / blocks::QK_K) * size_of::<q4k::Q4Kx8>(),
            Work::Q6K { .. } => groups * (self.cols / blocks::QK_K) * size_of::<q6k::Q6Kx8>(),
            Work::Blocks { w, .. } => w.byte_size(),
            Work::F32 { .. } => self.rows * self.cols * 4,
            Work::F16 { .. } | Work::BF16 { .. } => self.rows * self.cols * 2,
        }
    }
}

/// Stores the valid part of group `g`'s 8 results for activation row `i` into `out`, a
/// buffer of `width` values per activation row whose first column is that of group `g0`.
#[inline(always)]
fn put(out: &mut [f32], width: usize, g0: usize, g: usize, i: usize, v: &[f32]) {
    let c0 = (g - g0) * GROUP;
    let n = GROUP.min(width - c0);
    out[i * width + c0..i * width + c0 + n].copy_from_slice(&v[..n]);
}
