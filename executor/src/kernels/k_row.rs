//! One activation row against Q5_K weights, decoded in registers.
//!
//! Why: the blocked kernel (`blocked` module) decodes each super-block of 8 weight rows
//! into bytes and integer scales once, then multiplies it with a run of activation rows.
//! That pays off from two rows on; at one row (the decode step of a single sequence) the
//! decoding is most of the work and the kernel is bound by it, not by memory. Here each
//! super-block is unpacked into registers as it is multiplied, the way ggml's
//! `ggml_vec_dot_q4_K_q8_K` does, and nothing is written back.
//!
//! Numerics: per super-block the same two exact integers as the blocked kernel, `isum =
//! Σ scale·Σ q·a` and `msum = Σ min·bsum`, and the same float operations per output
//! (`acc += dx·(d·isum − dmin·msum)`, unfused), so a row computed here has the bits of the
//! same row computed in a batch by the blocked kernel: batch invariance holds across the
//! two.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;
use std::ops::Range;

use half::f16;

use super::blocks::{BlockType, scale_min_k4};
use super::q8k::Q8KBlock;
use super::{GROUP, Sink};

/// Whether [`run`] handles `ty`.
pub(crate) fn handles(ty: BlockType) -> bool {
    // Q4_K and Q6_K have their own tiles (`q4k`, `q6k`).
    ty == BlockType::Q5K
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Outputs of weight-row groups `groups` for one activation row `a` (its `nb`
/// super-blocks). `row(r)` gives weight row `r`'s bytes; rows past `rows` are padding
/// and come out as zero.
///
/// # Safety
/// The CPU must support AVX2 (runtime detection, see `dispatch`).
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn run<'w>(
    ty: BlockType,
    row: impl Fn(usize) -> &'w [u8],
    rows: usize,
    a: &[Q8KBlock],
    groups: Range<usize>,
    act_row: usize,
    sink: &mut Sink<'_>,
) {
    let bb = ty.block_bytes();
    for g in groups {
        let mut out = [0f32; GROUP];
        for (k, o) in out.iter_mut().enumerate() {
            let r = g * GROUP + k;
            if r >= rows {
                break;
            }
            let mut acc = 0f32;
            for (w, a) in row(r).chunks_exact(bb).zip(a) {
                let (isum, msum, d, dmin) = q5k(w, a);
                acc += a.d * (d * isum as f32 - dmin * msum as f32);
            }
            *o = acc;
        }
        sink(g, act_row, &out);
    }
}

#[target_feature(enable = "avx2")]
#[inline]
fn load(p: &[u8]) -> __m256i {
    assert!(p.len() >= 32);
    // SAFETY: 32 bytes in bounds (checked above).
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

#[target_feature(enable = "avx2")]
#[inline]
fn load_i8(p: &[i8]) -> __m256i {
    assert!(p.len() >= 32);
    // SAFETY: 32 bytes in bounds (checked above).
    unsafe { _mm256_loadu_si256(p.as_ptr().cast()) }
}

#[target_feature(enable = "avx2")]
#[inline]
fn hsum(v: __m256i) -> i32 {
    let s4 = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<0b01>(s2));
    _mm_cvtsi128_si32(s1)
}

/// Bit `bit` of every byte of `h`, moved to bit 4 (other bits cleared).
#[target_feature(enable = "avx2")]
#[inline]
fn bit_to_4(h: __m256i, bit: i32) -> __m256i {
    let moved = if bit <= 4 {
        _mm256_sll_epi16(h, _mm_cvtsi32_si128(4 - bit))
    } else {
        _mm256_srl_epi16(h, _mm_cvtsi32_si128(bit - 4))
    };
    _mm256_and_si256(moved, _mm256_set1_epi8(0x10))
}

/// Σ q·a over 32 values with per-16 scales `lo` (values 0..16) and `hi` (16..32).
#[target_feature(enable = "avx2")]
#[inline]
fn scaled(q: __m256i, a: __m256i, lo: i16, hi: i16) -> __m256i {
    let sc = _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
    _mm256_madd_epi16(_mm256_maddubs_epi16(q, a), sc)
}

/// A Q5_K super-block against one activation super-block: `(isum, msum, d, dmin)`.
#[target_feature(enable = "avx2")]
#[inline]
fn q5k(w: &[u8], a: &Q8KBlock) -> (i32, i32, f32, f32) {
    let (d, dmin, sc) = (f16_at(w, 0), f16_at(w, 2), &w[4..16]);
    let (qh, qs) = (load(&w[16..48]), &w[48..176]);
    let m4 = _mm256_set1_epi8(0x0f);
    let mut sumi = _mm256_setzero_si256();
    let mut msum = 0i32;
    for j in 0..4 {
        let (s0, m0) = scale_min_k4(2 * j, sc);
        let (s1, m1) = scale_min_k4(2 * j + 1, sc);
        let q = load(&qs[32 * j..]);
        let lo = _mm256_or_si256(_mm256_and_si256(q, m4), bit_to_4(qh, 2 * j as i32));
        let hi = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
            bit_to_4(qh, 2 * j as i32 + 1),
        );
        let (s0, s1) = (s0 as i16, s1 as i16);
        let plo = scaled(lo, load_i8(&a.qs[64 * j..]), s0, s0);
        let phi = scaled(hi, load_i8(&a.qs[64 * j + 32..]), s1, s1);
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
        let b = &a.bsums[4 * j..4 * j + 4];
        msum += m0 as i32 * (b[0] as i32 + b[1] as i32) + m1 as i32 * (b[2] as i32 + b[3] as i32);
    }
    (hsum(sumi), msum, d, dmin)
}
