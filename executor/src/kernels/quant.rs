//! Activation quantization: f32 rows into 8-bit blocks of 32 values, as ggml does before
//! every quantized dot product.
//!
//! This reproduces ggml's reference `quantize_row_q8_1_ref` (and `quantize_row_q8_0_ref`,
//! which computes the same quants and scale without the sum): per block of 32 values,
//! `d = amax / 127`, `q = roundf(x / d)` (ties away from zero), the scale stored as f16,
//! and for Q8_1 the block sum `s = fp16(d · Σq)` used by the Q4_1 min term. One block
//! type, [`Q8Block`], serves both vec-dot types; the f16 values are kept widened to f32
//! so the hot loops do not convert them again.
//!
//! The AVX2 variant performs exactly the same IEEE operations in the same order per
//! element (multiply, truncate, compare the exact fraction with ½), so both paths give
//! bitwise identical blocks. A block holding a NaN or an infinity gets `d = s = NaN` and
//! zero quants, so every dot product it enters is NaN: non-finite activations propagate
//! instead of silently vanishing (an infinity cannot be represented in the format).
//!
//! Cost: one pass over the row, about one vector instruction per 8 values; negligible
//! next to the matrix product that consumes it (`rows` times more work).

use half::f16;

/// Values per quantization block, in activations and weights alike.
pub(crate) const QK: usize = 32;

/// One quantized activation block (ggml `block_q8_1`, with `d` and `s` pre-widened).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Q8Block {
    /// The 32 quants, each in [-127, 127].
    pub qs: [i8; QK],
    /// The block scale, rounded to f16 precision.
    pub d: f32,
    /// `fp16(d · Σ qs)`, the Q8_1 block sum, widened.
    pub s: f32,
    /// `Σ qs`, exact (0 for a non-finite block), for kernels that multiply unsigned
    /// weights and subtract their offset afterwards.
    pub sum: i32,
}

impl Q8Block {
    /// The block every non-finite input maps to.
    const NON_FINITE: Q8Block = Q8Block {
        qs: [0; QK],
        d: f32::NAN,
        s: f32::NAN,
        sum: 0,
    };

    /// Four consecutive quants starting at `4 * word` as one little-endian word, the unit
    /// the SIMD kernels broadcast.
    #[inline(always)]
    pub fn word(&self, word: usize) -> i32 {
        let q = &self.qs[4 * word..4 * word + 4];
        i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8])
    }
}

/// `roundf` for finite values of magnitude below 2^31: truncate, then step away from zero
/// when the exact fractional part is at least one half.
#[inline(always)]
pub(crate) fn round_away(v: f32) -> i32 {
    let t = v as i32;
    let frac = v - t as f32;
    if frac >= 0.5 {
        t + 1
    } else if frac <= -0.5 {
        t - 1
    } else {
        t
    }
}

/// Scale, inverse scale and the widened f16 scale of a block with absolute maximum `amax`.
#[inline(always)]
fn block_scale(amax: f32) -> (f32, f32) {
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    // A subnormal scale has no finite inverse; such a block rounds to zero in f16 anyway.
    let id = if id.is_finite() { id } else { 0.0 };
    (d, id)
}

/// Finishes a block from its quants' sum and unrounded scale.
#[inline(always)]
fn finish(qs: [i8; QK], sum: i32, d: f32) -> Q8Block {
    Q8Block {
        qs,
        d: f16::from_f32(d).to_f32(),
        // candle's `BlockQ8_1::from_float` forms the sum in f16 arithmetic,
        // `fp16(Σq) · fp16(d)`; ggml uses `fp16(d · Σq)`. We follow candle, the
        // reference our parity tests hold us to.
        s: (f16::from_f32(sum as f32) * f16::from_f32(d)).to_f32(),
        sum,
    }
}

/// Quantizes one block of 32 values (portable reference).
fn quantize_block_scalar(x: &[f32]) -> Q8Block {
    debug_assert_eq!(x.len(), QK);
    let mut amax = 0f32;
    let mut finite = true;
    for &v in x {
        finite &= v.is_finite();
        amax = amax.max(v.abs());
    }
    if !finite {
        return Q8Block::NON_FINITE;
    }
    let (d, id) = block_scale(amax);
    let mut qs = [0i8; QK];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        let r = round_away(v * id);
        *q = r as i8;
        sum += r;
    }
    finish(qs, sum, d)
}

/// Quantizes `x` (a whole number of blocks) into `out` on the given path. Both paths
/// produce identical blocks.
pub(crate) fn quantize_row(avx2: bool, x: &[f32], out: &mut [Q8Block]) {
    debug_assert_eq!(x.len(), out.len() * QK);
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: callers pass `avx2 = true` only after runtime detection of avx2, fma
        // and f16c (see `dispatch`).
        unsafe { quantize_row_avx2(x, out) };
        return;
    }
    let _ = avx2;
    for (block, xs) in out.iter_mut().zip(x.chunks_exact(QK)) {
        *block = quantize_block_scalar(xs);
    }
}

/// AVX2 quantization of a row: the same operations as [`quantize_block_scalar`], eight
/// lanes at a time, with the quants packed to bytes in ggml's lane order fix-up.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn quantize_row_avx2(x: &[f32], out: &mut [Q8Block]) {
    use std::arch::x86_64::*;
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let inf = _mm256_set1_ps(f32::INFINITY);
    let half = _mm256_set1_ps(0.5);
    let neg_half = _mm256_set1_ps(-0.5);
    let one = _mm256_set1_ps(1.0);
    let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (block, xs) in out.iter_mut().zip(x.chunks_exact(QK)) {
        let xs: &[f32; QK] = xs.try_into().expect("chunks_exact yields full blocks");
        // SAFETY: each load reads 8 floats at offsets 0, 8, 16, 24 of a 32-float array.
        let v = unsafe {
            [
                _mm256_loadu_ps(xs.as_ptr()),
                _mm256_loadu_ps(xs.as_ptr().add(8)),
                _mm256_loadu_ps(xs.as_ptr().add(16)),
                _mm256_loadu_ps(xs.as_ptr().add(24)),
            ]
        };
        let a = v.map(|v| _mm256_and_ps(v, abs_mask));
        // All lanes finite iff |v| < inf (false for NaN as well).
        let fin = _mm256_and_ps(
            _mm256_and_ps(
                _mm256_cmp_ps::<_CMP_LT_OQ>(a[0], inf),
                _mm256_cmp_ps::<_CMP_LT_OQ>(a[1], inf),
            ),
            _mm256_and_ps(
                _mm256_cmp_ps::<_CMP_LT_OQ>(a[2], inf),
                _mm256_cmp_ps::<_CMP_LT_OQ>(a[3], inf),
            ),
        );
        if _mm256_movemask_ps(fin) != 0xff {
            *block = Q8Block::NON_FINITE;
            continue;
        }
        let m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_movehdup_ps(m));
        let amax = _mm_cvtss_f32(m);
        let (d, id) = block_scale(amax);
        let idv = _mm256_set1_ps(id);
        let q = v.map(|v| {
            let p = _mm256_mul_ps(v, idv);
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
            let frac = _mm256_sub_ps(p, t);
            let up = _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half), one);
            let down = _mm256_and_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(frac, neg_half), one);
            _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(t, up), down))
        });
        let s8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s4 = _mm_add_epi32(
            _mm256_castsi256_si128(s8),
            _mm256_extracti128_si256::<1>(s8),
        );
        let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32::<0b01>(s2));
        let sum = _mm_cvtsi128_si32(s1);
        let p01 = _mm256_packs_epi32(q[0], q[1]);
        let p23 = _mm256_packs_epi32(q[2], q[3]);
        let bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm);
        let mut qs = [0i8; QK];
        // SAFETY: stores 32 bytes into a 32-byte array.
        unsafe { _mm256_storeu_si256(qs.as_mut_ptr().cast(), bytes) };
        *block = finish(qs, sum, d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_matches_roundf_ties_away_from_zero() {
        for (v, r) in [
            (0.5f32, 1),
            (-0.5, -1),
            (1.5, 2),
            (2.5, 3),
            (-2.5, -3),
            (0.499_999_97, 0),
            (126.6, 127),
            (-127.0, -127),
            (0.0, 0),
        ] {
            assert_eq!(round_away(v), r, "{v}");
            assert_eq!(round_away(v), v.round() as i32, "{v}");
        }
    }

    #[test]
    fn scalar_block_follows_the_ggml_reference() {
        let x: Vec<f32> = (0..QK).map(|i| (i as f32 - 13.3) * 0.37).collect();
        let b = quantize_block_scalar(&x);
        let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let mut sum = 0;
        for (q, v) in b.qs.iter().zip(&x) {
            assert_eq!(*q as f32, (v / d).round());
            sum += *q as i32;
        }
        assert_eq!(b.d, f16::from_f32(d).to_f32());
        assert_eq!(b.s, f16::from_f32(sum as f32 * d).to_f32());
        assert!(b.qs.iter().any(|&q| q == 127 || q == -127));
    }

    #[test]
    fn zero_block_has_zero_scale_and_quants() {
        let b = quantize_block_scalar(&[0.0; QK]);
        assert_eq!(b.d, 0.0);
        assert_eq!(b.s, 0.0);
        assert_eq!(b.qs, [0; QK]);
    }

    #[test]
    fn non_finite_values_poison_only_their_block() {
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = vec![1.0f32; 2 * QK];
            x[40] = bad;
            for avx2 in [false, crate::kernels::KernelPath::Avx2.is_available()] {
                let mut out = [Q8Block::default(); 2];
                quantize_row(avx2, &x, &mut out);
                assert!(out[0].d.is_finite());
                assert!(out[1].d.is_nan() && out[1].s.is_nan());
            }
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn avx2_quantization_is_bitwise_identical_to_scalar() {
        crate::kernels::dispatch::require_avx2();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut x = vec![0f32; QK * 64];
        for (i, v) in x.iter_mut().enumerate() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let u = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            // Vary magnitudes per block and include exact ties (multiples of d/2).
            *v = u * 10f32.powi((i / QK) as i32 % 7 - 3);
        }
        // A block with d = 1 exactly whose values are all ties (k + 1/2).
        for (k, v) in x[QK * 5..QK * 6].iter_mut().enumerate() {
            *v = if k == 0 { 127.0 } else { k as f32 - 15.5 };
        }
        // Subnormal magnitudes, whose scale has no finite inverse.
        for v in x[QK * 6..QK * 7].iter_mut() {
            *v = 1e-39;
        }
        let (mut a, mut b) = (vec![Q8Block::default(); 64], vec![Q8Block::default(); 64]);
        quantize_row(false, &x, &mut a);
        quantize_row(true, &x, &mut b);
        for (a, b) in a.iter().zip(&b) {
            assert_eq!(a.qs, b.qs);
            assert_eq!(a.d.to_bits(), b.d.to_bits());
            assert_eq!(a.s.to_bits(), b.s.to_bits());
        }
    }
}
