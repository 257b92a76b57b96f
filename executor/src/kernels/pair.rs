//! Helpers of the 512-bit kernels that take two 8-row tile groups at a time: the
//! tiles of groups `g` and `g + 1` are loaded side by side, `g` in the low half of
//! each vector, and each result row of 16 lanes is handed back as two groups of 8.

use super::{GROUP, Sink};

/// Hands the 16 outputs of groups `g` and `g + 1` for activation row `i` to `sink`.
#[inline(always)]
pub(crate) fn split(sink: &mut Sink<'_>, g: usize, i: usize, out: &[f32; 2 * GROUP]) {
    let (lo, hi) = out.split_at(GROUP);
    sink(g, i, lo.try_into().expect("8 outputs"));
    sink(g + 1, i, hi.try_into().expect("8 outputs"));
}

/// Two 32-byte arrays as one 512-bit vector, `a` in the low half.
///
/// # Safety
/// The CPU must support avx512f; each pointer must have 32 readable bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn join32(a: *const u8, b: *const u8) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    // SAFETY: see the function's contract.
    unsafe {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_loadu_si256(a.cast())),
            _mm256_loadu_si256(b.cast()),
        )
    }
}

/// Two 16-byte arrays as one 256-bit vector, `a` in the low half.
///
/// # Safety
/// The CPU must support avx2; each pointer must have 16 readable bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn join16(a: *const u8, b: *const u8) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: see the function's contract.
    unsafe {
        _mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_loadu_si128(a.cast())),
            _mm_loadu_si128(b.cast()),
        )
    }
}
