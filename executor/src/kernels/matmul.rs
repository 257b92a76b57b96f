//! The product `out = x · Wᵀ`: the public entry points, their reusable scratch
//! buffers, and the quantization of the activation rows into the blocks the
//! weight format's kernel takes. How the work is then split is in `job`.

use std::cell::RefCell;
use std::fmt;

use rayon::prelude::*;

use super::blocked::BlockActs;
use super::job::{ACT_SPLIT_MIN_T, Job, TASKS_PER_THREAD, Work};
use super::q8k::{self, Q8KBlock};
use super::quant::{self, Q8Block, QK};
use super::{KernelError, KernelPath, QData, QMatrix, blocks, kernel_path};

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
    let (rows, cols) = (w.rows(), w.cols());
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
    let work = match w.data() {
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
