//! Matrices in ggml's other block formats (Q4_0, Q5_0, Q5_1, Q2_K … Q6_K) and their
//! product with quantized activations.
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

use super::blocks::{self, BlockType, QK_K, QK32, Unpacked32, UnpackedK};
use super::q8k::Q8KBlock;
use super::quant::Q8Block;
use super::{GROUP, Sink};

/// A weight matrix in one of the [`BlockType`] formats.
#[derive(Clone)]
pub struct PackedBlocks {
    ty: BlockType,
    row_bytes: usize,
    bytes: Vec<u8>,
}

impl PackedBlocks {
    /// Takes `rows` rows of ggml blocks (lengths checked by the caller).
    pub(crate) fn pack(ty: BlockType, bytes: &[u8], cols: usize) -> Self {
        PackedBlocks {
            ty,
            row_bytes: cols / ty.block_values() * ty.block_bytes(),
            bytes: bytes.to_vec(),
        }
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
                            unpack32(avx2, w.ty, &row[b * bb..(b + 1) * bb], u);
                        }
                        for (i, acc) in acc.iter_mut().enumerate().take(n) {
                            let a = &a[(i0 + i) * nb + b];
                            for (acc, u) in acc.iter_mut().zip(&u).take(live) {
                                *acc += dot32(avx2, u, a);
                            }
                        }
                    }
                }
                BlockActs::K(a) => {
                    let mut u = [UnpackedK::default(); GROUP];
                    for b in 0..nb {
                        for (k, u) in u.iter_mut().enumerate().take(live) {
                            let row = w.row(r0 + k);
                            unpack_k(avx2, w.ty, &row[b * bb..(b + 1) * bb], u);
                        }
                        for (i, acc) in acc.iter_mut().enumerate().take(n) {
                            let a = &a[(i0 + i) * nb + b];
                            for (acc, u) in acc.iter_mut().zip(&u).take(live) {
                                *acc += dot_k(avx2, u, a);
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

#[inline(always)]
fn unpack32(avx2: bool, ty: BlockType, b: &[u8], u: &mut Unpacked32) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: callers pass `avx2 = true` only after runtime detection (see `dispatch`).
        return unsafe { super::blocks_avx2::unpack32(ty, b, u) };
    }
    let _ = avx2;
    blocks::unpack32(ty, b, u)
}

#[inline(always)]
fn unpack_k(avx2: bool, ty: BlockType, b: &[u8], u: &mut UnpackedK) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: as in `unpack32`.
        return unsafe { super::blocks_avx2::unpack_k(ty, b, u) };
    }
    let _ = avx2;
    blocks::unpack_k(ty, b, u)
}

/// One legacy block's contribution: `(d·dx)·(Σ q·a − offset·Σ a) + m·s`.
#[inline(always)]
fn dot32(avx2: bool, u: &Unpacked32, a: &Q8Block) -> f32 {
    let (sq, sa) = int_sums32(avx2, &u.q, &a.qs);
    let isum = sq - u.offset * sa;
    (u.d * a.d) * isum as f32 + u.m * a.s
}

/// One super-block's contribution: `dx·(d·Σ scale·Σ q·a − dmin·Σ min·bsum)`.
#[inline(always)]
fn dot_k(avx2: bool, u: &UnpackedK, a: &Q8KBlock) -> f32 {
    let (isum, msum) = int_sums_k(avx2, u, a);
    a.d * (u.d * isum as f32 - u.dmin * msum as f32)
}

/// `(Σ q·a, Σ a)` over 32 values.
#[inline(always)]
fn int_sums32(avx2: bool, q: &[u8; QK32], a: &[i8; QK32]) -> (i32, i32) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: callers pass `avx2 = true` only after runtime detection (see `dispatch`).
        return unsafe { int_sums32_avx2(q, a) };
    }
    let _ = avx2;
    let mut sq = 0i32;
    let mut sa = 0i32;
    for (&q, &a) in q.iter().zip(a) {
        sq += q as i32 * a as i32;
        sa += a as i32;
    }
    (sq, sa)
}

/// `(Σₛ scaleₛ·Σ q·a, Σₛ minₛ·bsumₛ)` over a super-block.
#[inline(always)]
fn int_sums_k(avx2: bool, u: &UnpackedK, a: &Q8KBlock) -> (i32, i32) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: as in `int_sums32`.
        return unsafe { int_sums_k_avx2(u, a) };
    }
    let _ = avx2;
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
    (isum, msum)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn hsum_epi32(v: std::arch::x86_64::__m256i) -> i32 {
    use std::arch::x86_64::*;
    let s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<0b01>(s2));
    _mm_cvtsi128_si32(s1)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn int_sums32_avx2(q: &[u8; QK32], a: &[i8; QK32]) -> (i32, i32) {
    use std::arch::x86_64::*;
    // SAFETY: both arrays are exactly 32 bytes.
    let (qv, av) = unsafe {
        (
            _mm256_loadu_si256(q.as_ptr().cast()),
            _mm256_loadu_si256(a.as_ptr().cast()),
        )
    };
    let ones16 = _mm256_set1_epi16(1);
    let p = _mm256_madd_epi16(_mm256_maddubs_epi16(qv, av), ones16);
    let s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), av), ones16);
    (hsum_epi32(p), hsum_epi32(s))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn int_sums_k_avx2(u: &UnpackedK, a: &Q8KBlock) -> (i32, i32) {
    use std::arch::x86_64::*;
    let mut acc = _mm256_setzero_si256();
    for v in 0..QK_K / 32 {
        // SAFETY: offsets 32·v..32·v + 32 lie inside the 256-byte arrays.
        let (qv, av) = unsafe {
            (
                _mm256_loadu_si256(u.q.as_ptr().add(32 * v).cast()),
                _mm256_loadu_si256(a.qs.as_ptr().add(32 * v).cast()),
            )
        };
        // Lanes 0..8 hold sub-block 2v's pair sums, lanes 8..16 those of 2v + 1.
        let sc = _mm256_set_m128i(
            _mm_set1_epi16(u.scales[2 * v + 1]),
            _mm_set1_epi16(u.scales[2 * v]),
        );
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(qv, av), sc));
    }
    // SAFETY: 16 i16 values each.
    let (mv, bv) = unsafe {
        (
            _mm256_loadu_si256(u.mins.as_ptr().cast()),
            _mm256_loadu_si256(a.bsums.as_ptr().cast()),
        )
    };
    (hsum_epi32(acc), hsum_epi32(_mm256_madd_epi16(mv, bv)))
}
