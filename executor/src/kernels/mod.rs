//! CPU matrix multiplication against quantized weights: the linear layers of the model.
//!
//! This module owns the weight matrices ([`QMatrix`], built from GGUF tensors or raw ggml
//! block bytes) and the product `out = x · Wᵀ` ([`matmul`]) for a batch of `t` activation
//! rows. Formats: ggml Q4_1, Q8_0, Q4_0, Q5_0, Q4_K and Q6_K in 8-row tiles with their
//! own kernels (`q4_1`, `q8_0`, `qx_0`, `q4k`, `q6k`), the other block formats as
//! stored (`blocked`; one activation row of Q5_K in `k_row`), and f32, f16 and bf16
//! (`dense`).
//!
//! Numerics follow ggml: each activation row is quantized per block of 32 values exactly
//! like `quantize_row_q8_1` (Q8_1 for Q4_1 weights, the same quants without the sum for
//! Q8_0 weights, see the `quant` module), then every output element is one dot product in the style
//! of `ggml_vec_dot_q4_1_q8_1` / `ggml_vec_dot_q8_0_q8_0`: exact integer sums per block,
//! scaled and accumulated in f32. Results therefore agree closely with candle's `QMatMul`,
//! which uses the same block types.
//!
//! Batch invariance: the value of `out[i][n]` depends only on activation row `i` and
//! weight row `n`, bit for bit, whatever `t` is, whatever the other rows are, and however
//! the work is split across threads. Every element is computed by one instruction sequence
//! fixed per path; tiling and the rayon split only decide which elements a task computes,
//! never split a reduction. Weight rows are stored in tiles of eight (see the `q4_1` module) so a
//! weight block is loaded once per step for up to four activation rows, and the eight
//! rows' results come out in the eight lanes of one register.
//!
//! Parallelism and blocking: small products (estimated under [`PAR_MIN_NS`] on one core) run
//! on the calling thread. Small batches, and any batch against a matrix too large to re-read
//! per task (the 30 MB output head), are split over weight-row groups so every core
//! streams a disjoint slice of the weights once (in rounds of at most 64 activation rows);
//! one activation row writes its output directly, more go through a group-major scratch
//! and a parallel gather. Large batches against layer-sized matrices are split over
//! activation rows, each task writing whole output rows. Inside a task the work runs in
//! cache blocks: ~256 KiB of weight tiles (L2) × ~8 KiB of quantized activations (L1).
//!
//! Cost, measured on a 2-core AMD EPYC (Zen 3) VM: the AVX2 Q4_1 kernel sustains roughly
//! 100–130 GFLOP/s per core for batches of 4 or more rows; Q8_0 about two thirds of that
//! (signed products need a sign fix and a widening per 32 multiply-adds); one-row decode
//! is bound by memory bandwidth (weights read once per call, ~26 GB/s per core from cache).
//! Per call: activation quantization (one pass over `x`) and, for 2..64-row batches split
//! by weight rows, one copy of the output.
//!
//! Kernel selection: AVX2+FMA+F16C after runtime detection, otherwise (or with
//! `STOKER_KERNELS=scalar`) a portable scalar path; see [`dispatch`].
//!
//! Layout: `dtype` names the storage formats and `error` the failures; `matrix` builds
//! and reads a [`QMatrix`]; `matmul` is the product's entry points and activation
//! quantization, `job` how one product is split over threads and cache blocks; the
//! per-format modules above hold the tiles and their kernels.

/// Hands activation rows `$rows` of weight group `$g` to a tile kernel in runs: of the
/// first size while that many rows remain (and its guard holds), then of the next, and
/// so on down to 1, binding each run's rows (`$row(i)`) to `$a` and passing the run's
/// outputs to `$sink`. One definition of the run split the SIMD kernels share.
macro_rules! tile_runs {
    ($rows:expr, $g:expr, $row:expr, $sink:expr, |$a:ident| {
        $($n:literal $(if $ok:expr)? => $call:expr),+ $(,)?
    }) => {{
        let mut i = $rows.start;
        $(
            while $($ok &&)? $rows.end - i >= $n {
                let $a: [_; $n] = std::array::from_fn(|k| $row(i + k));
                let out = $call;
                for (k, o) in out.iter().enumerate() {
                    $sink($g, i + k, o);
                }
                i += $n;
            }
        )+
        debug_assert_eq!(i, $rows.end);
    }};
}

pub mod dispatch;

mod blocked;
mod blocks;
mod blocks_avx2;
mod dense;
#[cfg(target_arch = "x86_64")]
mod driver;
mod dtype;
mod error;
mod job;
mod k_row;
mod matmul;
mod matrix;
mod pair;
mod q4_1;
mod q4k;
mod q6k;
mod q8_0;
mod q8k;
mod quant;
mod qx_0;
mod stored;

pub use blocked::PackedBlocks;
pub use blocks::BlockType;
/// For the quantizers (`crate::quantize`), which write the layouts this module reads.
pub(crate) use blocks::{QK_K, scale_min_k4};
pub use dense::{BF16Bits, F16Bits};
pub use dispatch::{KernelPath, kernel_path};
pub use dtype::{QDtype, SUPPORTED_TENSOR_TYPES};
pub use error::KernelError;
pub use job::{ACT_SPLIT_MIN_T, PAR_MIN_NS};
pub use matmul::{MatmulScratch, matmul, matmul_on_path, matmul_with_scratch};
pub use matrix::{QData, QMatrix};
pub use q4_1::PackedQ4_1;
pub use q4k::PackedQ4K;
pub use q6k::PackedQ6K;
pub use q8_0::PackedQ8_0;
pub use qx_0::{PackedQ4_0, PackedQ5_0};
pub use stored::{Plain, SharedBytes, Stored};

/// Weight rows computed together by one kernel step (the tile height of every format).
const GROUP: usize = 8;
const _: () = assert!(
    q4_1::GROUP == GROUP
        && q8_0::GROUP == GROUP
        && qx_0::GROUP == GROUP
        && q4k::GROUP == GROUP
        && q6k::GROUP == GROUP
        && dense::GROUP == GROUP
);

/// Receives one kernel step's results: (weight-row group, activation row, 8 outputs).
pub(crate) type Sink<'a> = dyn FnMut(usize, usize, &[f32; GROUP]) + 'a;
