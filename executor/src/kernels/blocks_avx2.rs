//! AVX2 decoding of the block formats: the same integers as the portable decoders in
//! `blocks`, 32 weights per instruction instead of one.
//!
//! Decoding runs once per weight block per kernel step, and in a one-row decode step it
//! is the larger part of the work (the dot product itself is a few `vpmaddubsw`), so it
//! decides whether those steps are bound by memory, as they should be, or by
//! arithmetic. Only the quant bits are vectorized; the handful of scales per block stay
//! scalar (`blocks::unpack_k_scales`). The tests compare both paths bit for bit.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;

use super::blocks::{self, BlockType, QK32, Unpacked32, UnpackedK};

#[target_feature(enable = "avx2")]
#[inline]
fn load(b: &[u8], at: usize) -> __m256i {
    assert!(at + 32 <= b.len());
    // SAFETY: the 32 bytes at `at` are in bounds (checked above).
    unsafe { _mm256_loadu_si256(b.as_ptr().add(at).cast()) }
}

#[target_feature(enable = "avx2")]
#[inline]
fn store(q: &mut [u8], at: usize, v: __m256i) {
    assert!(at + 32 <= q.len());
    // SAFETY: the 32 bytes at `at` are in bounds (checked above).
    unsafe { _mm256_storeu_si256(q.as_mut_ptr().add(at).cast(), v) }
}

/// Byte `j` of the result is 0x10 when bit `j` of `bits` is set, else 0.
#[target_feature(enable = "avx2")]
#[inline]
fn bits_to_0x10(bits: u32) -> __m256i {
    let v = _mm256_set1_epi32(bits as i32);
    // Byte j takes byte j/8 of the word.
    let spread = _mm256_shuffle_epi8(
        v,
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
            3, 3, 3,
        ),
    );
    let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// [`blocks::unpack32`] on AVX2.
#[target_feature(enable = "avx2")]
pub(crate) fn unpack32(ty: BlockType, b: &[u8], out: &mut Unpacked32) {
    let (hdr, has_qh) = match ty {
        BlockType::Q4_0 => (2, false),
        BlockType::Q5_0 => (2, true),
        BlockType::Q5_1 => (4, true),
        _ => unreachable!("unpack32 takes legacy formats only"),
    };
    let qs_at = if has_qh { hdr + 4 } else { hdr };
    let qs: [u8; 16] = b[qs_at..qs_at + 16].try_into().expect("16 quant bytes");
    // SAFETY: 16 bytes from a 16-byte array.
    let v = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
    let m4 = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(v, m4);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), m4);
    let mut q = _mm256_set_m128i(hi, lo);
    blocks::unpack32_header(ty, b, out);
    if has_qh {
        let qh = u32::from_le_bytes([b[hdr], b[hdr + 1], b[hdr + 2], b[hdr + 3]]);
        q = _mm256_or_si256(q, bits_to_0x10(qh));
    }
    let mut tmp = [0u8; QK32];
    store(&mut tmp, 0, q);
    out.q = tmp;
}

/// [`blocks::unpack_k`] on AVX2.
#[target_feature(enable = "avx2")]
pub(crate) fn unpack_k(ty: BlockType, b: &[u8], out: &mut UnpackedK) {
    blocks::unpack_k_scales(ty, b, out);
    let q = &mut out.q;
    let m4 = _mm256_set1_epi8(0x0f);
    let m2 = _mm256_set1_epi8(0x03);
    match ty {
        BlockType::Q2K => {
            for half in 0..2 {
                let v = load(b, 16 + 32 * half);
                for j in 0..4 {
                    let s = _mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * j as i32));
                    store(q, 128 * half + 32 * j, _mm256_and_si256(s, m2));
                }
            }
        }
        BlockType::Q3K => {
            let hm = load(b, 0);
            let one = _mm256_set1_epi8(1);
            for half in 0..2 {
                let v = load(b, 32 + 32 * half);
                for j in 0..4 {
                    let shift = _mm_cvtsi32_si128(2 * j as i32);
                    let low = _mm256_and_si256(_mm256_srl_epi16(v, shift), m2);
                    let bit = _mm_cvtsi32_si128((4 * half + j) as i32);
                    let high = _mm256_and_si256(_mm256_srl_epi16(hm, bit), one);
                    let val = _mm256_or_si256(low, _mm256_slli_epi16::<2>(high));
                    store(q, 128 * half + 32 * j, val);
                }
            }
        }
        BlockType::Q4K | BlockType::Q5K => {
            let (qs_at, qh) = if ty == BlockType::Q5K {
                (48, Some(load(b, 16)))
            } else {
                (16, None)
            };
            let one = _mm256_set1_epi8(1);
            for chunk in 0..4 {
                let v = load(b, qs_at + 32 * chunk);
                let mut lo = _mm256_and_si256(v, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4);
                if let Some(qh) = qh {
                    let s0 = _mm_cvtsi32_si128(2 * chunk as i32);
                    let s1 = _mm_cvtsi32_si128(2 * chunk as i32 + 1);
                    let b0 = _mm256_and_si256(_mm256_srl_epi16(qh, s0), one);
                    let b1 = _mm256_and_si256(_mm256_srl_epi16(qh, s1), one);
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16::<4>(b0));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi16::<4>(b1));
                }
                store(q, 64 * chunk, lo);
                store(q, 64 * chunk + 32, hi);
            }
        }
        BlockType::Q6K => {
            for half in 0..2 {
                let ql0 = load(b, 64 * half);
                let ql1 = load(b, 64 * half + 32);
                let qh = load(b, 128 + 32 * half);
                let base = 128 * half;
                let h0 = _mm256_slli_epi16::<4>(_mm256_and_si256(qh, m2));
                let h1 = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<2>(qh), m2));
                let h2 = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<4>(qh), m2));
                let h3 = _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srli_epi16::<6>(qh), m2));
                let n0 = _mm256_and_si256(ql0, m4);
                let n1 = _mm256_and_si256(ql1, m4);
                let n2 = _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4);
                let n3 = _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4);
                store(q, base, _mm256_or_si256(n0, h0));
                store(q, base + 32, _mm256_or_si256(n1, h1));
                store(q, base + 64, _mm256_or_si256(n2, h2));
                store(q, base + 96, _mm256_or_si256(n3, h3));
            }
        }
        _ => unreachable!("unpack_k takes K-quant formats only"),
    }
}
