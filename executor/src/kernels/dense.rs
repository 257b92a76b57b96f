//! Unquantized weights: plain row-major storage and f32 dot-product kernels.
//!
//! Used for matrices the caller keeps in full precision and as the reference format
//! ([`super::QMatrix::dequantize`]). Activations are not quantized on this path.
//! F16 and BF16 weights stay in their 2 bytes (half the memory and half the bytes
//! read per step of widening them at load) and are widened to f32 as they are
//! loaded; the widening is exact, so every output has the bits it would have with
//! the weights held as f32.
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

/// A weight element: f32, or the bits of an f16 or bf16 value.
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    /// The exact f32 value.
    fn widen(self) -> f32;
    /// Eight consecutive elements widened to f32.
    ///
    /// # Safety
    /// `p` must point to 8 readable elements, and the CPU must support avx2, fma and
    /// f16c (callers are `target_feature` functions on the detected AVX2 path).
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl Elem for f32 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller guarantees 8 readable floats.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
}

/// The bits of an IEEE half-precision value, as GGUF stores F16 weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct F16Bits(pub u16);

impl Elem for F16Bits {
    #[inline(always)]
    fn widen(self) -> f32 {
        half::f16::from_bits(self.0).to_f32()
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const F16Bits) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees 8 readable halves (16 bytes) and f16c.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
}

/// The bits of a bfloat16 value (the high half of an f32), as GGUF stores BF16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub struct BF16Bits(pub u16);

impl Elem for BF16Bits {
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const BF16Bits) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees 8 readable values (16 bytes) and avx2.
        unsafe {
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                _mm_loadu_si128(p.cast()),
            )))
        }
    }
}

/// Portable kernel: sequential dot products.
pub(crate) fn run_scalar<E: Elem>(
    w: &[E],
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
                *o = wr.iter().zip(xr).fold(0f32, |s, (a, b)| s + a.widen() * b);
            }
            sink(g, i, &out);
        }
    }
}

/// AVX2 kernel over a rectangle of row groups × activation rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn run_avx2<E: Elem>(
    w: &[E],
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
fn dot_rows_avx2<E: Elem, const R: usize>(w: [&[E]; R], x: &[f32]) -> [f32; R] {
    use std::arch::x86_64::*;
    let n = x.len();
    let w = w.map(|w| &w[..n]);
    let mut acc = [_mm256_setzero_ps(); R];
    let mut k = 0;
    while k + 8 <= n {
        // SAFETY: k + 8 <= n and every row slice has length n.
        let xv = unsafe { _mm256_loadu_ps(x.as_ptr().add(k)) };
        for r in 0..R {
            // SAFETY: as above; this function runs with avx2, fma and f16c.
            let wv = unsafe { E::load8(w[r].as_ptr().add(k)) };
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
            s += w[r][kk].widen() * x[kk];
        }
        out[r] = s;
    }
    out
}
