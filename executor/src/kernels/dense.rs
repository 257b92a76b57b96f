//! Unquantized f32 weights: plain row-major storage and f32 dot-product kernels.
//!
//! Used for matrices the caller keeps in full precision and as the reference format
//! ([`super::QMatrix::dequantize`]). Activations are not quantized on this path.
//!
//! The AVX2 kernel computes each output as one 8-lane FMA chain over the columns in order,
//! then a fixed horizontal-sum tree, then the `cols % 8` tail in order; eight weight rows
//! share each activation load. A partial last group runs the same chain one row at a
//! time, so an element's value never depends on its neighbours. The scalar kernel is a
//! sequential sum. Cost: one FMA per multiply-add, with the eight weight rows of a group
//! (8 · cols · 4 bytes) staying in L1 across the activation rows.

use std::ops::Range;

use super::Sink;

/// Weight rows per group, matching the quantized formats.
pub(crate) const GROUP: usize = 8;

/// Portable kernel: sequential dot products.
pub(crate) fn run_scalar(
    w: &[f32],
    rows_total: usize,
    cols: usize,
    x: &[f32],
    groups: Range<usize>,
    rows: Range<usize>,
    sink: &mut Sink<'_>,
) {
    for g in groups {
        let r_end = rows_total.min((g + 1) * GROUP);
        for i in rows.clone() {
            let xr = &x[i * cols..(i + 1) * cols];
            let mut out = [0f32; GROUP];
            for (o, row) in out.iter_mut().zip(g * GROUP..r_end) {
                let wr = &w[row * cols..(row + 1) * cols];
                *o = wr.iter().zip(xr).fold(0f32, |s, (a, b)| s + a * b);
            }
            sink(g, i, &out);
        }
    }
}

/// AVX2 kernel over a rectangle of row groups × activation rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn run_avx2(
    w: &[f32],
    rows_total: usize,
    cols: usize,
    x: &[f32],
    groups: Range<usize>,
    rows: Range<usize>,
    sink: &mut Sink<'_>,
) {
    for g in groups {
        let r0 = g * GROUP;
        let r_end = rows_total.min(r0 + GROUP);
        let wr = |r: usize| &w[r * cols..(r + 1) * cols];
        for i in rows.clone() {
            let xr = &x[i * cols..(i + 1) * cols];
            let out = if r_end - r0 == GROUP {
                dot_rows_avx2(
                    [
                        wr(r0),
                        wr(r0 + 1),
                        wr(r0 + 2),
                        wr(r0 + 3),
                        wr(r0 + 4),
                        wr(r0 + 5),
                        wr(r0 + 6),
                        wr(r0 + 7),
                    ],
                    xr,
                )
            } else {
                let mut out = [0f32; GROUP];
                for (o, r) in out.iter_mut().zip(r0..r_end) {
                    *o = dot_rows_avx2([wr(r)], xr)[0];
                }
                out
            };
            sink(g, i, &out);
        }
    }
}

/// R dot products of equal-length weight rows with `x`, each as one FMA chain.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn dot_rows_avx2<const R: usize>(w: [&[f32]; R], x: &[f32]) -> [f32; R] {
    use std::arch::x86_64::*;
    let n = x.len();
    let w = w.map(|w| &w[..n]);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut k = 0;
    while k + 8 <= n {
        // SAFETY: k + 8 <= n and every row slice has length n.
        let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(k)) };
        for r in 0..R {
            // SAFETY: as above.
            let wv = unsafe { _mm256_loadu_ps(w[r].as_ptr().add(k)) };
            acc[r] = _mm256_fmadd_ps(wv, xv, acc[r]);
        }
        k += 8;
    }
    let mut out = [0f32; R];
    for r in 0..R {
        let v = acc[r];
        let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));
        let mut s = _mm_cvtss_f32(s1);
        for kk in k..n {
            s += w[r][kk] * x[kk];
        }
        out[r] = s;
    }
    out
}
