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
mod k_row;
mod pair;
mod q4_1;
mod q4k;
mod q6k;
mod q8_0;
mod q8k;
mod quant;
mod qx_0;
mod stored;

use std::cell::RefCell;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};
use rayon::prelude::*;

pub use blocked::PackedBlocks;
pub use blocks::BlockType;
/// For the quantizers (`crate::quantize`), which write the layouts this module reads.
pub(crate) use blocks::{QK_K, scale_min_k4};
pub use dense::{BF16Bits, F16Bits};
pub use dispatch::{KernelPath, kernel_path};
pub use q4_1::PackedQ4_1;
pub use q4k::PackedQ4K;
pub use q6k::PackedQ6K;
pub use q8_0::PackedQ8_0;
pub use qx_0::{PackedQ4_0, PackedQ5_0};
pub use stored::{Plain, SharedBytes, Stored};

use blocked::BlockActs;
use q8k::Q8KBlock;
use quant::{Q8Block, QK};

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
const TASKS_PER_THREAD: usize = 4;
/// Weight bytes per cache block (kept in L2 across a block of activation rows).
const L2_BLOCK_BYTES: usize = 256 << 10;
/// Quantized activation bytes per cache block (kept in L1 across a weight group).
const L1_BLOCK_BYTES: usize = 8 << 10;

/// Receives one kernel step's results: (weight-row group, activation row, 8 outputs).
pub(crate) type Sink<'a> = dyn FnMut(usize, usize, &[f32; GROUP]) + 'a;

/// Errors of matrix construction and multiplication. Nothing in this module panics on
/// bad input; it returns one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("a matrix needs at least one row and one column, got {rows}×{cols}")]
    EmptyMatrix { rows: usize, cols: usize },
    #[error("{dtype:?} weights need a column count divisible by 32, got {cols}")]
    ColsNotMultipleOf32 { dtype: QDtype, cols: usize },
    #[error("{dtype:?} weights need a column count divisible by {block}, got {cols}")]
    ColsNotMultipleOfBlock {
        dtype: QDtype,
        cols: usize,
        block: usize,
    },
    #[error("size of a {rows}×{cols} matrix overflows usize")]
    SizeOverflow { rows: usize, cols: usize },
    #[error("{dtype:?} data for a {rows}×{cols} matrix needs {expected} bytes, got {actual}")]
    ByteLength {
        dtype: QDtype,
        rows: usize,
        cols: usize,
        expected: usize,
        actual: usize,
    },
    #[error("f32 data for a {rows}×{cols} matrix needs {expected} values, got {actual}")]
    ValueCount {
        rows: usize,
        cols: usize,
        expected: usize,
        actual: usize,
    },
    #[error("activations: expected {expected} values (t × cols), got {actual}")]
    InputLength { expected: usize, actual: usize },
    #[error("output: expected {expected} values (t × rows), got {actual}")]
    OutputLength { expected: usize, actual: usize },
    #[error("row {row} out of range for a matrix of {rows} rows")]
    RowOutOfRange { row: usize, rows: usize },
    #[error("unsupported weight type {0}")]
    UnsupportedDtype(String),
    #[error("expected a 2-D tensor, got shape {0:?}")]
    NotAMatrix(Vec<usize>),
    #[error("cannot concatenate matrices: {0}")]
    ConcatMismatch(String),
    #[error("the {0:?} kernel path is not available on this CPU")]
    PathUnavailable(KernelPath),
    #[error("reading tensor data failed: {0}")]
    Tensor(String),
}

/// Storage formats accepted by [`QMatrix::from_ggml_bytes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QDtype {
    /// Little-endian f32 values (stored as is).
    F32,
    /// Little-endian f16 values (widened to f32 on load).
    F16,
    /// ggml `block_q4_1`: 20 bytes per 32 values.
    Q4_1,
    /// ggml `block_q8_0`: 34 bytes per 32 values.
    Q8_0,
    /// Little-endian bfloat16 values (widened to f32 on load).
    BF16,
    /// One of ggml's other block formats, kept as stored ([`BlockType`]).
    Blocks(BlockType),
}

/// Every tensor type [`QMatrix`] accepts, by ggml's name (for messages).
pub const SUPPORTED_TENSOR_TYPES: &[&str] = &[
    "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
    "Q6_K",
];

impl QDtype {
    /// Bytes of storage for `n` values (`n` a multiple of the block size for quantized
    /// types), or `None` on overflow.
    pub(crate) fn bytes_for(self, n: usize) -> Option<usize> {
        match self {
            QDtype::F32 => n.checked_mul(4),
            QDtype::F16 | QDtype::BF16 => n.checked_mul(2),
            QDtype::Q4_1 => (n / QK).checked_mul(q4_1::BLOCK_BYTES),
            QDtype::Q8_0 => (n / QK).checked_mul(q8_0::BLOCK_BYTES),
            QDtype::Blocks(b) => (n / b.block_values()).checked_mul(b.block_bytes()),
        }
    }

    /// Values per block: 1 for the float types.
    pub fn block_values(self) -> usize {
        match self {
            QDtype::F32 | QDtype::F16 | QDtype::BF16 => 1,
            QDtype::Q4_1 | QDtype::Q8_0 => QK,
            QDtype::Blocks(b) => b.block_values(),
        }
    }

    /// ggml's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            QDtype::F32 => "F32",
            QDtype::F16 => "F16",
            QDtype::BF16 => "BF16",
            QDtype::Q4_1 => "Q4_1",
            QDtype::Q8_0 => "Q8_0",
            QDtype::Blocks(b) => b.name(),
        }
    }
}

impl TryFrom<GgmlDType> for QDtype {
    type Error = KernelError;
    fn try_from(d: GgmlDType) -> Result<Self, KernelError> {
        match d {
            GgmlDType::F32 => Ok(QDtype::F32),
            GgmlDType::F16 => Ok(QDtype::F16),
            GgmlDType::BF16 => Ok(QDtype::BF16),
            GgmlDType::Q4_1 => Ok(QDtype::Q4_1),
            GgmlDType::Q8_0 => Ok(QDtype::Q8_0),
            GgmlDType::Q4_0 => Ok(QDtype::Blocks(BlockType::Q4_0)),
            GgmlDType::Q5_0 => Ok(QDtype::Blocks(BlockType::Q5_0)),
            GgmlDType::Q5_1 => Ok(QDtype::Blocks(BlockType::Q5_1)),
            GgmlDType::Q2K => Ok(QDtype::Blocks(BlockType::Q2K)),
            GgmlDType::Q3K => Ok(QDtype::Blocks(BlockType::Q3K)),
            GgmlDType::Q4K => Ok(QDtype::Blocks(BlockType::Q4K)),
            GgmlDType::Q5K => Ok(QDtype::Blocks(BlockType::Q5K)),
            GgmlDType::Q6K => Ok(QDtype::Blocks(BlockType::Q6K)),
            other => Err(KernelError::UnsupportedDtype(format!(
                "{other:?} (supported: {})",
                SUPPORTED_TENSOR_TYPES.join(", ")
            ))),
        }
    }
}

/// The weights of a [`QMatrix`].
#[derive(Clone)]
pub enum QData {
    /// Q4_1 blocks in 8-row tiles.
    Q4_1(PackedQ4_1),
    /// Q8_0 blocks in 8-row tiles.
    Q8_0(PackedQ8_0),
    /// Q4_0 blocks in 8-row tiles.
    Q4_0(PackedQ4_0),
    /// Q5_0 blocks in 8-row tiles.
    Q5_0(PackedQ5_0),
    /// Q4_K super-blocks in 8-row tiles.
    Q4K(PackedQ4K),
    /// Q6_K super-blocks in 8-row tiles.
    Q6K(PackedQ6K),
    /// Other ggml blocks, row-major as stored.
    Blocks(PackedBlocks),
    /// Row-major f32, `rows × cols`.
    F32(Stored<f32>),
    /// Row-major f16 bits as stored in the file, widened on load by the kernel.
    F16(Stored<F16Bits>),
    /// Row-major bf16 bits as stored in the file, widened on load by the kernel.
    BF16(Stored<BF16Bits>),
}

/// A weight matrix of `rows` output features × `cols` input features, as stored in GGUF
/// (`[out, in]`, each row one output feature). Immutable once built.
#[derive(Clone)]
pub struct QMatrix {
    rows: usize,
    cols: usize,
    data: QData,
}

impl fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QMatrix")
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("dtype", &self.dtype())
            .field("bytes", &self.byte_size())
            .finish()
    }
}

impl QMatrix {
    /// Builds a matrix from ggml tensor bytes (`rows` rows of `cols` values, row-major,
    /// blocks of 32 for quantized types). Checks the byte length exactly and, for
    /// quantized types, that `cols` is a multiple of 32.
    pub fn from_ggml_bytes(
        dtype: QDtype,
        bytes: &[u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        check_ggml_len(dtype, bytes.len(), rows, cols)?;
        let data = match dtype {
            QDtype::F32 => QData::F32(collect(bytes, decode_f32)),
            QDtype::F16 => QData::F16(collect(bytes, decode_f16)),
            QDtype::BF16 => QData::BF16(collect(bytes, decode_bf16)),
            QDtype::Q4_1 => QData::Q4_1(PackedQ4_1::pack(bytes, rows, cols)),
            QDtype::Q8_0 => QData::Q8_0(PackedQ8_0::pack(bytes, rows, cols)),
            QDtype::Blocks(BlockType::Q4_0) => QData::Q4_0(PackedQ4_0::pack(bytes, rows, cols)),
            QDtype::Blocks(BlockType::Q5_0) => QData::Q5_0(PackedQ5_0::pack(bytes, rows, cols)),
            QDtype::Blocks(BlockType::Q4K) => QData::Q4K(PackedQ4K::pack(bytes, rows, cols)),
            QDtype::Blocks(BlockType::Q6K) => QData::Q6K(PackedQ6K::pack(bytes, rows, cols)),
            QDtype::Blocks(b) => QData::Blocks(PackedBlocks::pack(b, bytes.to_vec().into(), cols)),
        };
        Ok(QMatrix { rows, cols, data })
    }

    /// Builds a matrix from the ggml bytes `shared[range]` as [`Self::from_ggml_bytes`]
    /// does, but where a format is multiplied as stored (F32, F16, BF16 and the block
    /// formats without tiles) the matrix borrows the bytes instead of copying them: it
    /// then reads the memory-mapped file itself. The tiled formats are rebuilt from the
    /// bytes and own their tiles.
    pub fn from_ggml_shared(
        dtype: QDtype,
        shared: &Arc<SharedBytes>,
        range: Range<usize>,
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        let all = (**shared).as_ref();
        let Some(bytes) = all.get(range.clone()) else {
            return Err(KernelError::ByteLength {
                dtype,
                rows,
                cols,
                expected: range.len(),
                actual: all.len().saturating_sub(range.start),
            });
        };
        check_ggml_len(dtype, bytes.len(), rows, cols)?;
        let data = match dtype {
            QDtype::F32 => QData::F32(Stored::from_shared(shared, range, decode_f32)),
            QDtype::F16 => QData::F16(Stored::from_shared(shared, range, decode_f16)),
            QDtype::BF16 => QData::BF16(Stored::from_shared(shared, range, decode_bf16)),
            QDtype::Blocks(
                b @ (BlockType::Q5_1 | BlockType::Q2K | BlockType::Q3K | BlockType::Q5K),
            ) => QData::Blocks(PackedBlocks::pack(
                b,
                Stored::from_shared(shared, range, |x| x[0]),
                cols,
            )),
            // The tiled formats.
            _ => return Self::from_ggml_bytes(dtype, bytes, rows, cols),
        };
        Ok(QMatrix { rows, cols, data })
    }

    /// Whether any of the weights are read from a memory-mapped file.
    pub fn is_mapped(&self) -> bool {
        match &self.data {
            QData::F32(v) => v.is_mapped(),
            QData::F16(v) => v.is_mapped(),
            QData::BF16(v) => v.is_mapped(),
            QData::Blocks(p) => p.is_mapped(),
            _ => false,
        }
    }

    /// Builds a matrix from a 2-D candle tensor read from GGUF (shape `[rows, cols]`).
    /// Supports every type in [`SUPPORTED_TENSOR_TYPES`]; others (the IQ and ternary
    /// types) give [`KernelError::UnsupportedDtype`].
    pub fn from_qtensor(t: &QTensor) -> Result<Self, KernelError> {
        let dims = t.shape().dims();
        let &[rows, cols] = dims else {
            return Err(KernelError::NotAMatrix(dims.to_vec()));
        };
        let dtype = QDtype::try_from(t.dtype())?;
        let bytes = t.data().map_err(|e| KernelError::Tensor(e.to_string()))?;
        Self::from_ggml_bytes(dtype, &bytes, rows, cols)
    }

    /// Builds an f32 matrix from row-major values (`values.len() == rows · cols`; any
    /// `cols` is accepted).
    pub fn from_f32(rows: usize, cols: usize, values: Vec<f32>) -> Result<Self, KernelError> {
        if rows == 0 || cols == 0 {
            return Err(KernelError::EmptyMatrix { rows, cols });
        }
        let expected = rows
            .checked_mul(cols)
            .ok_or(KernelError::SizeOverflow { rows, cols })?;
        if values.len() != expected {
            return Err(KernelError::ValueCount {
                rows,
                cols,
                expected,
                actual: values.len(),
            });
        }
        Ok(QMatrix {
            rows,
            cols,
            data: QData::F32(values.into()),
        })
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The file's format.
    pub fn dtype(&self) -> QDtype {
        match &self.data {
            QData::Q4_1(_) => QDtype::Q4_1,
            QData::Q8_0(_) => QDtype::Q8_0,
            QData::Q4_0(_) => QDtype::Blocks(BlockType::Q4_0),
            QData::Q5_0(_) => QDtype::Blocks(BlockType::Q5_0),
            QData::Q4K(_) => QDtype::Blocks(BlockType::Q4K),
            QData::Q6K(_) => QDtype::Blocks(BlockType::Q6K),
            QData::Blocks(b) => QDtype::Blocks(b.block_type()),
            QData::F32(_) => QDtype::F32,
            QData::F16(_) => QDtype::F16,
            QData::BF16(_) => QDtype::BF16,
        }
    }

    /// The weights.
    pub fn data(&self) -> &QData {
        &self.data
    }

    /// Bytes of weight storage held (including the zero padding of a partial last tile).
    pub fn byte_size(&self) -> usize {
        match &self.data {
            QData::Q4_1(p) => p.byte_size(),
            QData::Q8_0(p) => p.byte_size(),
            QData::Q4_0(p) => p.byte_size(),
            QData::Q5_0(p) => p.byte_size(),
            QData::Q4K(p) => p.byte_size(),
            QData::Q6K(p) => p.byte_size(),
            QData::Blocks(p) => p.byte_size(),
            QData::F32(v) => std::mem::size_of_val(&**v),
            QData::F16(v) => std::mem::size_of_val(&**v),
            QData::BF16(v) => std::mem::size_of_val(&**v),
        }
    }

    /// The weights as ggml bytes in the file's layout (the inverse of
    /// [`QMatrix::from_ggml_bytes`] with [`QMatrix::dtype`]).
    pub fn to_ggml_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match &self.data {
            QData::Q4_1(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Q8_0(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Q4_0(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Q5_0(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Q4K(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Q6K(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Blocks(p) => p.ggml_bytes(0..self.rows, &mut out),
            QData::F32(v) => out.extend(v.iter().flat_map(|x| x.to_le_bytes())),
            QData::F16(v) => out.extend(v.iter().flat_map(|x| x.0.to_le_bytes())),
            QData::BF16(v) => out.extend(v.iter().flat_map(|x| x.0.to_le_bytes())),
        }
        out
    }

    /// Writes row `row`, dequantized as ggml does, into `out` (`cols` values). Used for
    /// embedding lookups, where `row` is a token id and may come from outside.
    pub fn row_f32_into(&self, row: usize, out: &mut [f32]) -> Result<(), KernelError> {
        if row >= self.rows {
            return Err(KernelError::RowOutOfRange {
                row,
                rows: self.rows,
            });
        }
        if out.len() != self.cols {
            return Err(KernelError::OutputLength {
                expected: self.cols,
                actual: out.len(),
            });
        }
        match &self.data {
            QData::Q4_1(p) => p.dequantize_row(row, self.cols, out),
            QData::Q8_0(p) => p.dequantize_row(row, self.cols, out),
            QData::Q4_0(p) => p.dequantize_row(row, self.cols, out),
            QData::Q5_0(p) => p.dequantize_row(row, self.cols, out),
            QData::Q4K(p) => {
                let mut bytes = Vec::new();
                p.ggml_bytes(row..row + 1, self.cols, &mut bytes);
                blocks::dequantize_row(BlockType::Q4K, &bytes, out);
            }
            QData::Q6K(p) => {
                let mut bytes = Vec::new();
                p.ggml_bytes(row..row + 1, self.cols, &mut bytes);
                blocks::dequantize_row(BlockType::Q6K, &bytes, out);
            }
            QData::Blocks(p) => p.dequantize_row(row, out),
            QData::F32(v) => out.copy_from_slice(&v[row * self.cols..(row + 1) * self.cols]),
            QData::F16(v) => widen_row(&v[row * self.cols..(row + 1) * self.cols], out),
            QData::BF16(v) => widen_row(&v[row * self.cols..(row + 1) * self.cols], out),
        }
        Ok(())
    }

    /// Row `row` dequantized (see [`QMatrix::row_f32_into`]).
    pub fn row_f32(&self, row: usize) -> Result<Vec<f32>, KernelError> {
        let mut out = vec![0f32; self.cols];
        self.row_f32_into(row, &mut out)?;
        Ok(out)
    }

    /// The same matrix with every weight dequantized to f32.
    pub fn dequantize(&self) -> QMatrix {
        let mut values = vec![0f32; self.rows * self.cols];
        for (row, out) in values.chunks_exact_mut(self.cols).enumerate() {
            // Cannot fail: `row < rows` and `out.len() == cols`.
            let _ = self.row_f32_into(row, out);
        }
        QMatrix {
            rows: self.rows,
            cols: self.cols,
            data: QData::F32(values.into()),
        }
    }

    /// Stacks matrices of one format and column count on top of each other (rows of
    /// `parts[0]` first), e.g. to fuse the q, k and v projections into one product.
    /// Quantized blocks are copied, never requantized.
    pub fn concat_rows(parts: &[&QMatrix]) -> Result<QMatrix, KernelError> {
        let Some(first) = parts.first() else {
            return Err(KernelError::EmptyMatrix { rows: 0, cols: 0 });
        };
        let (cols, dtype) = (first.cols, first.dtype());
        for p in parts {
            if p.cols != cols || p.dtype() != dtype {
                return Err(KernelError::ConcatMismatch(format!(
                    "{:?} with {} columns after {:?} with {} columns",
                    p.dtype(),
                    p.cols,
                    dtype,
                    cols
                )));
            }
        }
        let rows = parts
            .iter()
            .try_fold(0usize, |acc, p| acc.checked_add(p.rows))
            .ok_or(KernelError::SizeOverflow {
                rows: usize::MAX,
                cols,
            })?;
        if let QData::F32(_) = first.data {
            let mut values = Vec::with_capacity(rows * cols);
            for p in parts {
                if let QData::F32(v) = &p.data {
                    values.extend_from_slice(v);
                }
            }
            return QMatrix::from_f32(rows, cols, values);
        }
        let mut bytes = Vec::new();
        for p in parts {
            bytes.extend(p.to_ggml_bytes());
        }
        QMatrix::from_ggml_bytes(dtype, &bytes, rows, cols)
    }
}

/// Checks that `len` bytes hold `rows × cols` values of `dtype` and that `cols` is a
/// whole number of blocks.
fn check_ggml_len(dtype: QDtype, len: usize, rows: usize, cols: usize) -> Result<(), KernelError> {
    if rows == 0 || cols == 0 {
        return Err(KernelError::EmptyMatrix { rows, cols });
    }
    let block = dtype.block_values();
    if block == QK && !cols.is_multiple_of(QK) {
        return Err(KernelError::ColsNotMultipleOf32 { dtype, cols });
    }
    if !cols.is_multiple_of(block) {
        return Err(KernelError::ColsNotMultipleOfBlock { dtype, cols, block });
    }
    let expected = rows
        .checked_mul(cols)
        .and_then(|n| dtype.bytes_for(n))
        .ok_or(KernelError::SizeOverflow { rows, cols })?;
    if len != expected {
        return Err(KernelError::ByteLength {
            dtype,
            rows,
            cols,
            expected,
            actual: len,
        });
    }
    Ok(())
}

fn collect<T>(bytes: &[u8], decode: fn(&[u8]) -> T) -> Stored<T> {
    Stored::Owned(
        bytes
            .chunks_exact(std::mem::size_of::<T>())
            .map(decode)
            .collect(),
    )
}

fn decode_f32(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn decode_f16(b: &[u8]) -> F16Bits {
    F16Bits(u16::from_le_bytes([b[0], b[1]]))
}

fn decode_bf16(b: &[u8]) -> BF16Bits {
    BF16Bits(u16::from_le_bytes([b[0], b[1]]))
}

fn widen_row<E: dense::Elem>(src: &[E], out: &mut [f32]) {
    for (o, v) in out.iter_mut().zip(src) {
        *o = v.widen();
    }
}

/// Reusable buffers of [`matmul_with_scratch`]: the quantized activations and, for
/// batches split over weight-row groups, the per-group results. They only grow.
#[derive(Default)]
pub struct MatmulScratch {
    acts: Vec<Q8Block>,
    acts_k: Vec<Q8KBlock>,
    tmp: Vec<f32>,
}

impl fmt::Debug for MatmulScratch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MatmulScratch")
            .field("act_blocks", &self.acts.len())
            .field("tmp", &self.tmp.len())
            .finish()
    }
}

impl MatmulScratch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Heap bytes held.
    pub fn byte_size(&self) -> usize {
        self.acts.capacity() * std::mem::size_of::<Q8Block>()
            + self.acts_k.capacity() * std::mem::size_of::<Q8KBlock>()
            + self.tmp.capacity() * 4
    }
}

thread_local! {
    static SCRATCH: RefCell<MatmulScratch> = RefCell::new(MatmulScratch::new());
}

/// `out = x · Wᵀ` for `t` activation rows: `x` is `t × w.cols()` row-major, `out` is
/// `t × w.rows()`. Uses a per-thread scratch buffer and [`kernel_path`]. `t == 0` is an
/// empty batch and succeeds without writing.
pub fn matmul(w: &QMatrix, x: &[f32], t: usize, out: &mut [f32]) -> Result<(), KernelError> {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut s) => matmul_with_scratch(w, x, t, out, &mut s),
        // Re-entered on this thread (a rayon task stolen while waiting): use a fresh one.
        Err(_) => matmul_with_scratch(w, x, t, out, &mut MatmulScratch::new()),
    })
}

/// [`matmul`] with caller-owned scratch buffers, so the hot loop does not allocate.
pub fn matmul_with_scratch(
    w: &QMatrix,
    x: &[f32],
    t: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) -> Result<(), KernelError> {
    matmul_on_path(kernel_path(), w, x, t, out, scratch)
}

/// [`matmul_with_scratch`] on an explicit kernel path (for tests and benchmarks).
pub fn matmul_on_path(
    path: KernelPath,
    w: &QMatrix,
    x: &[f32],
    t: usize,
    out: &mut [f32],
    scratch: &mut MatmulScratch,
) -> Result<(), KernelError> {
    if !path.is_available() {
        return Err(KernelError::PathUnavailable(path));
    }
    let (rows, cols) = (w.rows, w.cols);
    let x_len = t
        .checked_mul(cols)
        .ok_or(KernelError::SizeOverflow { rows: t, cols })?;
    if x.len() != x_len {
        return Err(KernelError::InputLength {
            expected: x_len,
            actual: x.len(),
        });
    }
    let out_len = t.checked_mul(rows).ok_or(KernelError::SizeOverflow {
        rows: t,
        cols: rows,
    })?;
    if out.len() != out_len {
        return Err(KernelError::OutputLength {
            expected: out_len,
            actual: out.len(),
        });
    }
    if t == 0 {
        return Ok(());
    }
    let MatmulScratch { acts, acts_k, tmp } = scratch;
    let work = match &w.data {
        QData::F32(v) => Work::F32 { w: v, x },
        QData::F16(v) => Work::F16 { w: v, x },
        QData::BF16(v) => Work::BF16 { w: v, x },
        QData::Q4_1(p) => Work::Q4_1 {
            tiles: p.tiles(),
            acts: quantize_acts(path, x, t, cols, acts),
        },
        QData::Q8_0(p) => Work::Q8_0 {
            tiles: p.tiles(),
            acts: quantize_acts(path, x, t, cols, acts),
        },
        QData::Q4_0(p) => Work::Q4_0 {
            tiles: p.tiles(),
            acts: quantize_acts(path, x, t, cols, acts),
        },
        QData::Q5_0(p) => Work::Q5_0 {
            tiles: p.tiles(),
            acts: quantize_acts(path, x, t, cols, acts),
        },
        QData::Q4K(p) => Work::Q4K {
            tiles: p.tiles(),
            acts: quantize_acts_k(path, x, t, cols, acts_k),
        },
        QData::Q6K(p) => Work::Q6K {
            tiles: p.tiles(),
            acts: quantize_acts_k(path, x, t, cols, acts_k),
        },
        QData::Blocks(p) if p.block_type().is_k() => Work::Blocks {
            w: p,
            acts: BlockActs::K(quantize_acts_k(path, x, t, cols, acts_k)),
        },
        QData::Blocks(p) => Work::Blocks {
            w: p,
            acts: BlockActs::Q8(quantize_acts(path, x, t, cols, acts)),
        },
    };
    let job = Job {
        work,
        path,
        rows,
        cols,
    };
    job.execute(t, out, tmp);
    Ok(())
}

/// Quantizes the `t` rows of `x` into the scratch buffer (in parallel for large batches)
/// and returns the filled part.
fn quantize_acts<'s>(
    path: KernelPath,
    x: &[f32],
    t: usize,
    cols: usize,
    acts: &'s mut Vec<Q8Block>,
) -> &'s [Q8Block] {
    let nb = cols / QK;
    if acts.len() < t * nb {
        acts.resize(t * nb, Q8Block::default());
    }
    let acts = &mut acts[..t * nb];
    let avx2 = path.uses_avx2();
    if t >= ACT_SPLIT_MIN_T && rayon::current_num_threads() > 1 {
        let per = t.div_ceil(rayon::current_num_threads() * TASKS_PER_THREAD);
        acts.par_chunks_mut(per * nb)
            .zip(x.par_chunks(per * cols))
            .for_each(|(a, x)| quant::quantize_row(avx2, x, a));
    } else {
        quant::quantize_row(avx2, x, acts);
    }
    acts
}

/// Quantizes the `t` rows of `x` into 256-value super-blocks (for the K-quants).
fn quantize_acts_k<'s>(
    path: KernelPath,
    x: &[f32],
    t: usize,
    cols: usize,
    acts: &'s mut Vec<Q8KBlock>,
) -> &'s [Q8KBlock] {
    let nb = cols / blocks::QK_K;
    if acts.len() < t * nb {
        acts.resize(t * nb, Q8KBlock::default());
    }
    let acts = &mut acts[..t * nb];
    let avx2 = path.uses_avx2();
    if t >= ACT_SPLIT_MIN_T && rayon::current_num_threads() > 1 {
        let per = t.div_ceil(rayon::current_num_threads() * TASKS_PER_THREAD);
        acts.par_chunks_mut(per * nb)
            .zip(x.par_chunks(per * cols))
            .for_each(|(a, x)| q8k::quantize_row(avx2, x, a));
    } else {
        q8k::quantize_row(avx2, x, acts);
    }
    acts
}

/// Weights with their (quantized) activations.
#[derive(Clone, Copy)]
enum Work<'a> {
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
struct Job<'a> {
    work: Work<'a>,
    path: KernelPath,
    rows: usize,
    cols: usize,
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
                        qx_0::run_avx2(vnni, tiles, nb, acts, groups, act_rows, sink)
                    }
                    Work::Q5_0 { tiles, acts } => {
                        qx_0::run_avx2(vnni, tiles, nb, acts, groups, act_rows, sink)
                    }
                    Work::Q4K { tiles, acts } => {
                        q4k::run_avx2(vnni, tiles, nb_k, acts, groups, act_rows, sink)
                    }
                    Work::Q6K { tiles, acts } => {
                        q6k::run_avx2(vnni, tiles, nb_k, acts, groups, act_rows, sink)
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
    fn execute(&self, t: usize, out: &mut [f32], tmp: &mut Vec<f32>) {
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
