//! Matrices in ggml's other block formats (Q5_1, Q2_K, Q3_K, Q5_K) and their product
//! with quantized activations. (Q4_0, Q5_0, Q4_K and Q6_K are decoded by the same
//! `blocks` code at load, but held and multiplied in their own tiles: `qx_0`, `q4k`,
//! `q6k`.)
//!
//! Storage is the file's own bytes, row-major, one row after another: the formats are
//! read in place, never requantized, so a `_M` file's mix of types keeps each tensor's
//! precision. A kernel step takes one group of 8 weight rows and a run of activation
//! rows: each weight block is decoded once (`blocks` module) into small unsigned integers
//! with integer scales, then multiplied with every activation row in the run. The
//! decoding cost is thus shared by the batch, and one integer kernel serves all eight
//! formats:
//!
//! * 32-value formats against `block_q8_0`/`q8_1` activations ([`Q8Block`]):
//!   `(d·dx)·(Σ q·a − offset·Σ a) + m·s` per block;
//! * K-quants against `block_q8_K` activations ([`Q8KBlock`]):
//!   `dx·(d·Σₛ scaleₛ·Σ q·a − dmin·Σₛ minₛ·bsumₛ)` per super-block.
//!
//! The integer sums are exact, so the scalar and AVX2 paths give the same bits, and
//! each output is one left-to-right sum over blocks of its own row: batch-invariant
//! whatever the step holds. On AVX2 the 8-bit products use `vpmaddubsw` (unsigned
//! weight × signed activation; a pair sum is at most 2·63·127, no saturation) and the
//! per-16 scales are applied by `vpmaddwd`.

use std::ops::Range;

use super::blocks::{self, BlockType, Unpacked32, UnpackedK};
use super::q8k::Q8KBlock;
use super::quant::Q8Block;
use super::stored::Stored;
use super::{GROUP, Sink};

/// A weight matrix in one of the [`BlockType`] formats.
#[derive(Clone)]
pub struct PackedBlocks {
    ty: BlockType,
    row_bytes: usize,
    bytes: Stored<u8>,
}

impl PackedBlocks {
    /// Takes `rows` rows of ggml blocks (lengths checked by the caller), owned or
    /// in the mapped file.
    pub(crate) fn pack(ty: BlockType, bytes: Stored<u8>, cols: usize) -> Self {
        PackedBlocks {
            ty,
            row_bytes: cols / ty.block_values() * ty.block_bytes(),
            bytes,
        }
    }

    pub(crate) fn is_mapped(&self) -> bool {
        self.bytes.is_mapped()
    }

    pub(crate) fn block_type(&self) -> BlockType {
        self.ty
    }

    pub(crate) fn byte_size(&self) -> usize {
        self.bytes.len()
    }

    fn row(&self, r: usize) -> &[u8] {
        &self.bytes[r * self.row_bytes..(r + 1) * self.row_bytes]
    }

    pub(crate) fn ggml_bytes(&self, rows: Range<usize>, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.bytes[rows.start * self.row_bytes..rows.end * self.row_bytes]);
    }

    pub(crate) fn dequantize_row(&self, row: usize, out: &mut [f32]) {
        blocks::dequantize_row(self.ty, self.row(row), out);
    }

    fn rows(&self) -> usize {
        self.bytes.len() / self.row_bytes
    }
}

/// The activations a [`PackedBlocks`] product consumes.
#[derive(Clone, Copy)]
pub(crate) enum BlockActs<'a> {
    /// 32-value blocks, for Q4_0, Q5_0 and Q5_1.
    Q8(&'a [Q8Block]),
    /// 256-value super-blocks, for the K-quants.
    K(&'a [Q8KBlock]),
}

/// Activation rows computed per pass over a weight group's blocks.
const RUN: usize = 16;

/// Computes the outputs of weight groups `groups` for activation rows `act_rows`.
pub(crate) fn run(
    avx2: bool,
    w: &PackedBlocks,
    acts: BlockActs<'_>,
    groups: Range<usize>,
    act_rows: Range<usize>,
    sink: &mut Sink<'_>,
) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        if let BlockActs::K(a) = acts
            && act_rows.len() == 1
            && super::k_row::handles(w.ty)
        {
            let (i, nb) = (act_rows.start, w.row_bytes / w.ty.block_bytes());
            let a = &a[i * nb..(i + 1) * nb];
            // SAFETY: as below.
            unsafe { super::k_row::run(w.ty, |r| w.row(r), w.rows(), a, groups, i, sink) };
            return;
        }
        // SAFETY: callers pass `avx2 = true` only after runtime detection (see `dispatch`).
        unsafe { avx2_path::run(w, acts, groups, act_rows, sink) };
        return;
    }
    let _ = avx2;
    run_scalar(w, acts, groups, act_rows, sink)
}

/// The portable kernel: per output, one left-to-right sum of per-block values.
fn run_scalar(
    w: &PackedBlocks,
    acts: BlockActs<'_>,
    groups: Range<usize>,
    act_rows: Range<usize>,
    sink: &mut Sink<'_>,
) {
    let rows = w.rows();
    let nb = w.row_bytes / w.ty.block_bytes();
    let bb = w.ty.block_bytes();
    for g in groups {
        let r0 = g * GROUP;
        let live = GROUP.min(rows - r0);
        let mut i0 = act_rows.start;
        while i0 < act_rows.end {
            let n = RUN.min(act_rows.end - i0);
            let mut acc = [[0f32; GROUP]; RUN];
            match acts {
                BlockActs::Q8(a) => {
                    let mut u = [Unpacked32::default(); GROUP];
                    for b in 0..nb {
                        for (k, u) in u.iter_mut().enumerate().take(live) {
                            let row = w.row(r0 + k);
                            blocks::unpack32(w.ty, &row[b * bb..(b + 1) * bb], u);
                        }
                        for (i, acc) in acc.iter_mut().enumerate().take(n) {
                            let a = &a[(i0 + i) * nb + b];
                            for (acc, u) in acc.iter_mut().zip(&u).take(live) {
                                *acc += dot32(u, a);
                            }
                        }
                    }
                }
                BlockActs::K(a) => {
                    let mut u = [UnpackedK::default(); GROUP];
                    for b in 0..nb {
                        for (k, u) in u.iter_mut().enumerate().take(live) {
                            let row = w.row(r0 + k);
                            blocks::unpack_k(w.ty, &row[b * bb..(b + 1) * bb], u);
                        }
                        for (i, acc) in acc.iter_mut().enumerate().take(n) {
                            let a = &a[(i0 + i) * nb + b];
                            for (acc, u) in acc.iter_mut().zip(&u).take(live) {
                                *acc += dot_k(u, a);
                            }
                        }
                    }
                }
            }
            for (i, acc) in acc.iter().enumerate().take(n) {
                sink(g, i0 + i, acc);
            }
            i0 += n;
        }
    }
}

/// One legacy block's contribution: `(d·dx)·(Σ q·a − offset·Σ a) + m·s`.
#[inline(always)]
fn dot32(u: &Unpacked32, a: &Q8Block) -> f32 {
    let mut sq = 0i32;
    let mut sa = 0i32;
    for (&q, &a) in u.q.iter().zip(&a.qs) {
        sq += q as i32 * a as i32;
        sa += a as i32;
    }
    let isum = sq - u.offset * sa;
    (u.d * a.d) * isum as f32 + u.m * a.s
}

/// One super-block's contribution: `dx·(d·Σ scale·Σ q·a − dmin·Σ min·bsum)`.
#[inline(always)]
fn dot_k(u: &UnpackedK, a: &Q8KBlock) -> f32 {
    let mut isum = 0i32;
    for (s, (q, a)) in u.q.chunks_exact(16).zip(a.qs.chunks_exact(16)).enumerate() {
        let mut p = 0i32;
        for (&q, &a) in q.iter().zip(a) {
            p += q as i32 * a as i32;
        }
        isum += u.scales[s] as i32 * p;
    }
    let mut msum = 0i32;
    for (&m, &b) in u.mins.iter().zip(&a.bsums) {
        msum += m as i32 * b as i32;
    }
    a.d * (u.d * isum as f32 - u.dmin * msum as f32)
}

/// The AVX2 kernel: the same integers and the same float operations per output as
/// the portable one, with the 8 rows of a group in the 8 lanes of one register.
#[cfg(target_arch = "x86_64")]
mod avx2_path {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::super::blocks_avx2;
    use super::super::{GROUP, Sink};
    use super::{BlockActs, PackedBlocks, Q8Block, Q8KBlock, RUN, Unpacked32, UnpackedK};

    #[target_feature(enable = "avx2")]
    #[inline]
    fn load(p: &[u8]) -> __m256i {
        assert!(p.len() >= 32);
        // SAFETY: 32 bytes in bounds (checked above).
        unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
    }

    /// Lane k of the result is the sum of the 8 lanes of `p[k]`.
    #[target_feature(enable = "avx2")]
    #[inline]
    fn reduce8(p: &[__m256i; GROUP]) -> __m256i {
        let s01 = _mm256_hadd_epi32(p[0], p[1]);
        let s23 = _mm256_hadd_epi32(p[2], p[3]);
        let s45 = _mm256_hadd_epi32(p[4], p[5]);
        let s67 = _mm256_hadd_epi32(p[6], p[7]);
        let t0 = _mm256_hadd_epi32(s01, s23);
        let t1 = _mm256_hadd_epi32(s45, s67);
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(t0, t1),
            _mm256_permute2x128_si256::<0x31>(t0, t1),
        )
    }

    #[target_feature(enable = "avx2")]
    #[inline]
    fn hsum(v: __m256i) -> i32 {
        let s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<0b01>(s2));
        _mm_cvtsi128_si32(s1)
    }

    #[target_feature(enable = "avx2")]
    pub(super) fn run(
        w: &PackedBlocks,
        acts: BlockActs<'_>,
        groups: Range<usize>,
        act_rows: Range<usize>,
        sink: &mut Sink<'_>,
    ) {
        let rows = w.rows();
        let bb = w.ty.block_bytes();
        let nb = w.row_bytes / bb;
        let ones8 = _mm256_set1_epi8(1);
        let ones16 = _mm256_set1_epi16(1);
        for g in groups {
            let r0 = g * GROUP;
            let live = GROUP.min(rows - r0);
            let mut i0 = act_rows.start;
            while i0 < act_rows.end {
                let n = RUN.min(act_rows.end - i0);
                let mut acc = [_mm256_setzero_ps(); RUN];
                match acts {
                    BlockActs::Q8(a) => {
                        let mut u = [Unpacked32::default(); GROUP];
                        for b in 0..nb {
                            for (k, u) in u.iter_mut().enumerate().take(live) {
                                let row = w.row(r0 + k);
                                blocks_avx2::unpack32(w.ty, &row[b * bb..(b + 1) * bb], u);
                            }
                            let dw = _mm256_setr_ps(
                                u[0].d, u[1].d, u[2].d, u[3].d, u[4].d, u[5].d, u[6].d, u[7].d,
                            );
                            let mw = _mm256_setr_ps(
                                u[0].m, u[1].m, u[2].m, u[3].m, u[4].m, u[5].m, u[6].m, u[7].m,
                            );
                            let off = _mm256_setr_epi32(
                                u[0].offset,
                                u[1].offset,
                                u[2].offset,
                                u[3].offset,
                                u[4].offset,
                                u[5].offset,
                                u[6].offset,
                                u[7].offset,
                            );
                            let mut qv = [_mm256_setzero_si256(); GROUP];
                            for (qv, u) in qv.iter_mut().zip(&u) {
                                *qv = load(&u.q);
                            }
                            for (i, acc) in acc.iter_mut().enumerate().take(n) {
                                let ab: &Q8Block = &a[(i0 + i) * nb + b];
                                // SAFETY: the 32 quants are 32 bytes.
                                let av = unsafe { _mm256_loadu_si256(ab.qs.as_ptr().cast()) };
                                let sa = hsum(_mm256_madd_epi16(
                                    _mm256_maddubs_epi16(ones8, av),
                                    ones16,
                                ));
                                let mut p = [_mm256_setzero_si256(); GROUP];
                                for (p, &qv) in p.iter_mut().zip(&qv) {
                                    *p = _mm256_madd_epi16(_mm256_maddubs_epi16(qv, av), ones16);
                                }
                                let isum = _mm256_sub_epi32(
                                    reduce8(&p),
                                    _mm256_mullo_epi32(off, _mm256_set1_epi32(sa)),
                                );
                                let val = _mm256_add_ps(
                                    _mm256_mul_ps(
                                        _mm256_mul_ps(dw, _mm256_set1_ps(ab.d)),
                                        _mm256_cvtepi32_ps(isum),
                                    ),
                                    _mm256_mul_ps(mw, _mm256_set1_ps(ab.s)),
                                );
                                *acc = _mm256_add_ps(*acc, val);
                            }
                        }
                    }
                    BlockActs::K(a) => {
                        let mut u = [UnpackedK::default(); GROUP];
                        // Per row, per 32 quants: [scale of the first 16 ×8, of the next 16 ×8].
                        let mut scv = [[_mm256_setzero_si256(); 8]; GROUP];
                        let spread = _mm256_setr_epi8(
                            0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3,
                            2, 3, 2, 3, 2, 3, 2, 3,
                        );
                        for b in 0..nb {
                            for (k, u) in u.iter_mut().enumerate().take(live) {
                                let row = w.row(r0 + k);
                                blocks_avx2::unpack_k(w.ty, &row[b * bb..(b + 1) * bb], u);
                                // SAFETY: 16 i16 scales are 32 bytes.
                                let sc = unsafe { _mm256_loadu_si256(u.scales.as_ptr().cast()) };
                                for (v, out) in scv[k].iter_mut().enumerate() {
                                    let pair = _mm256_permutevar8x32_epi32(
                                        sc,
                                        _mm256_set1_epi32(v as i32),
                                    );
                                    *out = _mm256_shuffle_epi8(pair, spread);
                                }
                            }
                            let dw = _mm256_setr_ps(
                                u[0].d, u[1].d, u[2].d, u[3].d, u[4].d, u[5].d, u[6].d, u[7].d,
                            );
                            let dmw = _mm256_setr_ps(
                                u[0].dmin, u[1].dmin, u[2].dmin, u[3].dmin, u[4].dmin, u[5].dmin,
                                u[6].dmin, u[7].dmin,
                            );
                            for (i, acc) in acc.iter_mut().enumerate().take(n) {
                                let ab: &Q8KBlock = &a[(i0 + i) * nb + b];
                                // SAFETY: 16 i16 block sums are 32 bytes.
                                let bs = unsafe { _mm256_loadu_si256(ab.bsums.as_ptr().cast()) };
                                let mut ip = [_mm256_setzero_si256(); GROUP];
                                let mut mp = [_mm256_setzero_si256(); GROUP];
                                for v in 0..8 {
                                    // SAFETY: bytes 32·v..32·v + 32 of the 256 quants.
                                    let av = unsafe {
                                        _mm256_loadu_si256(ab.qs.as_ptr().add(32 * v).cast())
                                    };
                                    for ((ip, sc), u) in ip.iter_mut().zip(&scv).zip(&u) {
                                        let qv = load(&u.q[32 * v..]);
                                        let p = _mm256_maddubs_epi16(qv, av);
                                        *ip = _mm256_add_epi32(*ip, _mm256_madd_epi16(p, sc[v]));
                                    }
                                }
                                for (mp, u) in mp.iter_mut().zip(&u) {
                                    // SAFETY: 16 i16 minimums are 32 bytes.
                                    let mv = unsafe { _mm256_loadu_si256(u.mins.as_ptr().cast()) };
                                    *mp = _mm256_madd_epi16(mv, bs);
                                }
                                let isum = _mm256_cvtepi32_ps(reduce8(&ip));
                                let msum = _mm256_cvtepi32_ps(reduce8(&mp));
                                let val = _mm256_mul_ps(
                                    _mm256_set1_ps(ab.d),
                                    _mm256_sub_ps(
                                        _mm256_mul_ps(dw, isum),
                                        _mm256_mul_ps(dmw, msum),
                                    ),
                                );
                                *acc = _mm256_add_ps(*acc, val);
                            }
                        }
                    }
                }
                for (i, acc) in acc.iter().enumerate().take(n) {
                    let mut out = [0f32; GROUP];
                    // SAFETY: 8 f32 lanes into an 8-float array.
                    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), *acc) };
                    sink(g, i0 + i, &out);
                }
                i0 += n;
            }
        }
    }
}
