//! The 32-value formats: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, as ggml's reference
//! quantizers (`quantize_row_q*_ref` in ggml-quants.c) write them.
//!
//! Why these are simple: each block is scaled once, from its extreme values, with no
//! search. Symmetric formats (Q4_0, Q5_0) take the value of largest magnitude, sign
//! included, and map it to the most negative level (`d = max / −8` or `/ −16`), so the
//! extreme is represented exactly and the other side gets one level less. Asymmetric
//! formats (Q4_1, Q5_1) spread `[min, max]` over all levels (`d = (max − min)/15` or
//! `/31`) and store `min`. Q8_0 is symmetric around zero (`d = amax/127`,
//! `roundf`). Quants are `trunc(x/d + offset + 0.5)` except in Q8_0; the inverse
//! scale is computed from the f32 `d`, not the f16 one that is stored.
//!
//! Non-finite input: a NaN never wins the maximum search of Q4_0, Q5_0, Q4_1 or Q5_1
//! (ggml's comparisons are false for it); its own quant comes from the C cast of NaN,
//! which on x86-64 gives 0 in the low byte. In Q8_0, ggml's `MAX(amax, |v|)` takes a
//! NaN and drops it again at the next value. An infinity becomes the block's maximum,
//! so `d` is ±inf (stored as f16 inf), the inverse scale 0, and the other quants land
//! on the zero level. No input panics.

use super::float::{c_cast_i32, fp32_to_fp16, inverse_or_zero};

/// First value of largest magnitude, with its sign (ggml: `if (amax < fabsf(v))`).
fn signed_absmax(b: &[f32]) -> f32 {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in b {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// Smallest and largest value (ggml starts from ±FLT_MAX; NaN never replaces them).
fn min_max(b: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in b {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// The 4-bit quant `MIN(15, (int8_t)(v + bias))`, as a byte.
fn quant4(v: f32, bias: f32) -> u8 {
    (c_cast_i32(v + bias) as i8 as i32).min(15) as u8
}

/// Packs 32 quants of 5 bits: low nibbles (j, j+16) into 16 bytes, fifth bits into a
/// little-endian u32 (bit j for quant j).
fn pack5(q: &[u8; 32], out: &mut Vec<u8>) {
    let mut qh = 0u32;
    for (j, &v) in q.iter().enumerate() {
        qh |= (((v & 0x10) >> 4) as u32) << j;
    }
    out.extend_from_slice(&qh.to_le_bytes());
    out.extend((0..16).map(|j| (q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4)));
}

pub(super) fn q4_0(x: &[f32], out: &mut Vec<u8>) {
    for b in x.chunks_exact(32) {
        let d = signed_absmax(b) / -8.0;
        let id = inverse_or_zero(d);
        out.extend_from_slice(&fp32_to_fp16(d).to_le_bytes());
        out.extend((0..16).map(|j| quant4(b[j] * id, 8.5) | (quant4(b[j + 16] * id, 8.5) << 4)));
    }
}

pub(super) fn q4_1(x: &[f32], out: &mut Vec<u8>) {
    for b in x.chunks_exact(32) {
        let (min, max) = min_max(b);
        let d = (max - min) / 15.0;
        let id = inverse_or_zero(d);
        out.extend_from_slice(&fp32_to_fp16(d).to_le_bytes());
        out.extend_from_slice(&fp32_to_fp16(min).to_le_bytes());
        let q = |v: f32| quant4((v - min) * id, 0.5);
        out.extend((0..16).map(|j| q(b[j]) | (q(b[j + 16]) << 4)));
    }
}

pub(super) fn q5_0(x: &[f32], out: &mut Vec<u8>) {
    for b in x.chunks_exact(32) {
        let d = signed_absmax(b) / -16.0;
        let id = inverse_or_zero(d);
        out.extend_from_slice(&fp32_to_fp16(d).to_le_bytes());
        let mut q = [0u8; 32];
        for (q, &v) in q.iter_mut().zip(b) {
            // MIN(31, (int8_t)(v·id + 16.5)) as a byte.
            *q = (c_cast_i32(v * id + 16.5) as i8 as i32).min(31) as u8;
        }
        pack5(&q, out);
    }
}

pub(super) fn q5_1(x: &[f32], out: &mut Vec<u8>) {
    for b in x.chunks_exact(32) {
        let (min, max) = min_max(b);
        let d = (max - min) / 31.0;
        let id = inverse_or_zero(d);
        out.extend_from_slice(&fp32_to_fp16(d).to_le_bytes());
        out.extend_from_slice(&fp32_to_fp16(min).to_le_bytes());
        let mut q = [0u8; 32];
        for (q, &v) in q.iter_mut().zip(b) {
            // (uint8_t)((v − min)·id + 0.5): no clamp in ggml.
            *q = c_cast_i32((v - min) * id + 0.5) as u8;
        }
        pack5(&q, out);
    }
}

pub(super) fn q8_0(x: &[f32], out: &mut Vec<u8>) {
    for b in x.chunks_exact(32) {
        let mut amax = 0.0f32;
        for &v in b {
            // ggml's MAX(a, b) is `a > b ? a : b`.
            amax = if amax > v.abs() { amax } else { v.abs() };
        }
        let d = amax / 127.0;
        let id = inverse_or_zero(d);
        out.extend_from_slice(&fp32_to_fp16(d).to_le_bytes());
        // roundf: half away from zero, like f32::round.
        out.extend(b.iter().map(|&v| c_cast_i32((v * id).round()) as u8));
    }
}
