//! Activation quantization for the K-quants: f32 rows into ggml's `block_q8_K` (one f32
//! scale, 256 signed bytes and the sums of each 16 of them).
//!
//! K-quant weights come in super-blocks of 256 with one scale per 16 or 32 weights, so
//! their dot products take activations quantized per 256 as well; the per-16 sums let the
//! kernels apply a sub-block's minimum with one multiply instead of 16. The scale is
//! `amax / 127` and quants are rounded half away from zero, as in the 32-value
//! activation blocks (`quant` module); non-finite input gives a NaN scale so that it
//! propagates into every product instead of vanishing.

use super::blocks::QK_K;
use super::quant::round_away;

/// One quantized activation super-block.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Q8KBlock {
    pub qs: [i8; QK_K],
    pub bsums: [i16; 16],
    pub d: f32,
}

impl Default for Q8KBlock {
    fn default() -> Self {
        Q8KBlock {
            qs: [0; QK_K],
            bsums: [0; 16],
            d: 0.0,
        }
    }
}

/// Quantizes one super-block.
fn quantize_block(x: &[f32], out: &mut Q8KBlock) {
    let mut amax = 0f32;
    let mut finite = true;
    for &v in x {
        finite &= v.is_finite();
        amax = amax.max(v.abs());
    }
    if !finite {
        *out = Q8KBlock {
            d: f32::NAN,
            ..Q8KBlock::default()
        };
        return;
    }
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let id = if id.is_finite() { id } else { 0.0 };
    for (q, &v) in out.qs.iter_mut().zip(x) {
        *q = round_away(v * id).clamp(-127, 127) as i8;
    }
    finish(out, d);
}

/// The per-16 sums and the scale, once the quants are set.
#[inline(always)]
fn finish(out: &mut Q8KBlock, d: f32) {
    for (s, qs) in out.bsums.iter_mut().zip(out.qs.chunks_exact(16)) {
        *s = qs.iter().map(|&q| q as i16).sum();
    }
    out.d = d;
}

/// Quantizes `x` (a whole number of super-blocks) into `out`, on the AVX2 path when
/// `avx2` (the same blocks, bit for bit).
pub(crate) fn quantize_row(avx2: bool, x: &[f32], out: &mut [Q8KBlock]) {
    debug_assert_eq!(x.len(), out.len() * QK_K);
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(QK_K)) {
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: callers pass `avx2 = true` only after runtime detection (`dispatch`).
            unsafe { quantize_block_avx2(xs, b) };
            continue;
        }
        let _ = avx2;
        quantize_block(xs, b);
    }
}

/// [`quantize_block`] eight lanes at a time: the same float operations per value (the
/// scale from the same maximum, `v·id`, then rounding half away from zero by truncating
/// and comparing the exact fraction with ½), so the same quants.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn quantize_block_avx2(x: &[f32], out: &mut Q8KBlock) {
    use std::arch::x86_64::*;
    assert_eq!(x.len(), QK_K);
    let load = |i: usize| {
        // SAFETY: `i + 8 <= QK_K == x.len()` for every call below.
        unsafe { _mm256_loadu_ps(x.as_ptr().add(i)) }
    };
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let inf = _mm256_set1_ps(f32::INFINITY);
    let mut amax = _mm256_setzero_ps();
    let mut fin = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for i in (0..QK_K).step_by(8) {
        let a = _mm256_and_ps(load(i), abs_mask);
        fin = _mm256_and_ps(fin, _mm256_cmp_ps::<_CMP_LT_OQ>(a, inf));
        amax = _mm256_max_ps(amax, a);
    }
    if _mm256_movemask_ps(fin) != 0xff {
        *out = Q8KBlock {
            d: f32::NAN,
            ..Q8KBlock::default()
        };
        return;
    }
    // The lanes are finite, so the order of the maximum does not matter.
    let m = _mm_max_ps(
        _mm256_castps256_ps128(amax),
        _mm256_extractf128_ps::<1>(amax),
    );
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_movehdup_ps(m));
    let amax = _mm_cvtss_f32(m);
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let id = if id.is_finite() { id } else { 0.0 };
    let idv = _mm256_set1_ps(id);
    let (half, neg_half, one) = (
        _mm256_set1_ps(0.5),
        _mm256_set1_ps(-0.5),
        _mm256_set1_ps(1.0),
    );
    let (lo, hi) = (_mm256_set1_epi32(-127), _mm256_set1_epi32(127));
    let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for c in 0..QK_K / 32 {
        let q: [__m256i; 4] = std::array::from_fn(|k| {
            let p = _mm256_mul_ps(load(32 * c + 8 * k), idv);
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
            let frac = _mm256_sub_ps(p, t);
            let up = _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half), one);
            let down = _mm256_and_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(frac, neg_half), one);
            let r = _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(t, up), down));
            _mm256_min_epi32(_mm256_max_epi32(r, lo), hi)
        });
        let p01 = _mm256_packs_epi32(q[0], q[1]);
        let p23 = _mm256_packs_epi32(q[2], q[3]);
        let bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm);
        // SAFETY: stores 32 bytes at offset 32c of the 256-byte quant array (c < 8).
        unsafe { _mm256_storeu_si256(out.qs.as_mut_ptr().add(32 * c).cast(), bytes) };
    }
    finish(out, d);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quants_sums_and_scale_reconstruct_the_input() {
        let x: Vec<f32> = (0..QK_K)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let mut b = [Q8KBlock::default()];
        quantize_row(false, &x, &mut b);
        let b = &b[0];
        for (q, v) in b.qs.iter().zip(&x) {
            assert!((*q as f32 * b.d - v).abs() <= b.d / 2.0 + 1e-6);
        }
        for (s, qs) in b.bsums.iter().zip(b.qs.chunks_exact(16)) {
            assert_eq!(*s as i32, qs.iter().map(|&q| q as i32).sum::<i32>());
        }
        assert_eq!(b.qs.iter().map(|q| q.unsigned_abs()).max(), Some(127));
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn avx2_quantization_is_bitwise_identical_to_scalar() {
        crate::kernels::dispatch::require_avx2();
        let mut seed = 7u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        let mut x: Vec<f32> = (0..8 * QK_K)
            .map(|i| {
                let r = (next() >> 8) as f32 / (1 << 24) as f32 - 0.5;
                r * [1e-3, 1.0, 37.0, 1e4][i % 4]
            })
            .collect();
        // Ties: values landing exactly on k + 0.5 quant steps, and an all-zero block.
        for (i, v) in x[QK_K..2 * QK_K].iter_mut().enumerate() {
            *v = (i as f32 - 128.0) / 2.0;
        }
        x[2 * QK_K..3 * QK_K].fill(0.0);
        x[3 * QK_K + 5] = f32::NAN;
        x[4 * QK_K + 9] = f32::NEG_INFINITY;
        x[5 * QK_K + 1] = 1e-40;
        let (mut a, mut b) = (vec![Q8KBlock::default(); 8], vec![Q8KBlock::default(); 8]);
        quantize_row(false, &x, &mut a);
        quantize_row(true, &x, &mut b);
        for (k, (a, b)) in a.iter().zip(&b).enumerate() {
            assert_eq!(a.qs, b.qs, "block {k}");
            assert_eq!(a.bsums, b.bsums, "block {k}");
            assert_eq!(a.d.to_bits(), b.d.to_bits(), "block {k}");
        }
    }

    #[test]
    fn non_finite_input_gives_a_nan_scale() {
        let mut x = vec![1.0f32; QK_K];
        x[3] = f32::INFINITY;
        let mut b = [Q8KBlock::default()];
        quantize_row(false, &x, &mut b);
        assert!(b[0].d.is_nan());
        let mut z = [Q8KBlock::default()];
        quantize_row(false, &[0.0; QK_K], &mut z);
        assert_eq!(z[0].d, 0.0);
        assert!(z[0].qs.iter().all(|&q| q == 0));
    }
}
