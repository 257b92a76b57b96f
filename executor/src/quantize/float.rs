//! The scalar conversions every ggml quantizer is built from, reproduced to the bit.
//!
//! Why a module of its own: the quantizers are only bit-exact if these small steps are.
//! ggml rounds with a float trick (`nearest_int`), stores scales through its own f16 and
//! bf16 converters, and narrows floats to small integers with plain C casts. Each of
//! those has an edge (NaN, infinities, values out of range) where the obvious Rust
//! spelling (`f32::round`, `as i8`, `half::f16::from_f32`) gives different bits, so the
//! edges are spelled out here once.

use half::f16;

/// ggml's `GGML_FP32_TO_FP16` (`ggml_compute_fp32_to_fp16` in ggml-impl.h): round to
/// nearest, ties to even; overflow gives ±inf; every NaN becomes the quiet NaN `0x7e00`
/// with the input's sign (its payload is dropped).
pub(crate) fn fp32_to_fp16(f: f32) -> u16 {
    if f.is_nan() {
        ((f.to_bits() >> 16) & 0x8000) as u16 | 0x7e00
    } else {
        // `half` rounds to nearest even, like ggml, for every non-NaN input.
        f16::from_f32(f).to_bits()
    }
}

/// ggml's `GGML_FP16_TO_FP32`: exact.
pub(crate) fn fp16_to_fp32(h: u16) -> f32 {
    f16::from_bits(h).to_f32()
}

/// ggml's `ggml_compute_fp32_to_bf16`: round to nearest even on the raw bits; a NaN
/// keeps its top 16 bits with the quiet bit forced on (no rounding).
pub(crate) fn fp32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// ggml's `nearest_int`: adds 1.5·2²³ so the float unit does the rounding (to nearest,
/// ties to even), then reads the integer back from the mantissa. Exact for
/// |v| ≤ 4194303; outside that (and for NaN and ±inf, which ggml's assert does not
/// stop in release builds) it returns the same garbage ggml does: the low 23 bits of
/// the sum, minus 2²².
#[inline(always)]
pub(crate) fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0f32).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

/// A C cast of a float to an integer type of 32 bits or fewer, as x86-64 compilers emit
/// it (`cvttss2si`): truncation toward zero, and the "integer indefinite" `i32::MIN`
/// for NaN and anything out of `i32` range (where C leaves the result undefined).
/// Narrower C types keep the low bits, so callers follow with `as i8` / `as u8`.
#[inline(always)]
pub(crate) fn c_cast_i32(v: f32) -> i32 {
    if (-2_147_483_648.0..2_147_483_648.0).contains(&v) {
        v as i32
    } else {
        i32::MIN
    }
}

/// `x ? 1.0f/x : 0.0f`: the inverse scale of the legacy quantizers (NaN is truthy).
#[inline(always)]
pub(crate) fn inverse_or_zero(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even_and_matches_ggml_on_garbage() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(-2.5), -2);
        assert_eq!(nearest_int(-0.49), 0);
        assert_eq!(nearest_int(4_194_303.0), 4_194_303);
        // NaN: the quiet NaN's mantissa is 0x400000, so ggml reads 0.
        assert_eq!(nearest_int(f32::NAN), 0);
        // +inf: mantissa 0.
        assert_eq!(nearest_int(f32::INFINITY), -0x40_0000);
    }

    #[test]
    fn c_cast_follows_cvttss2si() {
        assert_eq!(c_cast_i32(15.99), 15);
        assert_eq!(c_cast_i32(-0.7), 0);
        assert_eq!(c_cast_i32(f32::NAN), i32::MIN);
        assert_eq!(c_cast_i32(3e9), i32::MIN);
        assert_eq!(c_cast_i32(f32::NEG_INFINITY), i32::MIN);
        assert_eq!(c_cast_i32(-2_147_483_648.0), i32::MIN);
    }

    #[test]
    fn f16_and_bf16_follow_ggml() {
        assert_eq!(fp32_to_fp16(1.0), 0x3c00);
        assert_eq!(fp32_to_fp16(65520.0), 0x7c00); // rounds up to inf
        assert_eq!(fp32_to_fp16(-f32::NAN), 0xfe00);
        assert_eq!(fp32_to_fp16(f32::from_bits(0x7f80_0001)), 0x7e00);
        assert_eq!(fp32_to_fp16(f32::from_bits(0x3300_0000)), 0x0000); // 2^-25: tie, to even 0
        assert_eq!(fp32_to_fp16(f32::from_bits(0x3300_0001)), 0x0001);
        assert_eq!(fp32_to_fp16(f32::from_bits(0x3380_0000)), 0x0001); // 2^-24
        assert_eq!(fp32_to_bf16(1.0), 0x3f80);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80); // tie to even
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(fp32_to_bf16(f32::from_bits(0xff81_2345)), 0xffc1);
        assert_eq!(fp32_to_bf16(f32::MAX), 0x7f80); // rounds to inf
    }
}
