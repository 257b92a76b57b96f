//! The K-quants: Q2_K, Q3_K, Q4_K, Q5_K and Q6_K, as ggml's reference quantizers
//! (`quantize_row_q*_K_ref` in ggml-quants.c, used by `llama-quantize` without an
//! importance matrix) write them.
//!
//! Why they are more than a scale per block: a super-block of 256 values has 8 or 16
//! sub-blocks, each with its own scale (and, for Q2_K/Q4_K/Q5_K, minimum), and those
//! are themselves quantized to 4, 6 or 8 bits against one f16 super-scale. Every format
//! runs in three steps:
//!
//! 1. per sub-block, a small search for the best float scale (and minimum):
//!    [`fit_affine`] (ggml's `make_qkx2_quants`: a grid of candidate scales, each
//!    refined by weighted least squares) for the formats with a minimum,
//!    [`fit_symmetric`] (`make_qx_quants`, 18 perturbed scales) for Q6_K and
//!    [`fit_symmetric_iterative`] (`make_q3_quants`, coordinate descent) for Q3_K;
//! 2. the sub-block scales are quantized against the largest one;
//! 3. every value is re-quantized against the scale it will actually be decoded with
//!    (f16 super-scale × integer sub-scale), unless that scale is zero, in which case
//!    the quants of step 1 stay.
//!
//! Bit-exactness depends on doing the float arithmetic in ggml's order, in f32, without
//! fused multiply-adds: `a*b + c` is two roundings here as in ggml's C. The comments
//! give ggml's expression where the order matters.
//!
//! Non-finite input: the searches are bounded loops, `nearest_int` is total (see the
//! `float` module), and every narrowing is a wrapping integer conversion as in C, so
//! NaN or ±inf produce the same deterministic bytes ggml writes and never a panic.

use super::float::{fp16_to_fp32, fp32_to_fp16, nearest_int};
use crate::kernels::{QK_K, scale_min_k4};

/// Sub-blocks whose largest magnitude is below this are all zero (ggml's
/// `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// The result of [`fit_affine`]: `x ≈ scale·L − min`.
struct Affine {
    scale: f32,
    /// Subtracted on decoding (ggml's `the_min`, the negated fitted offset).
    min: f32,
}

/// ggml's `make_qkx2_quants`: fits `x ≈ scale·L + m` with `L` in `0..=nmax` and
/// `m ≤ 0`, minimising the `weights`-weighted squared (or, with `use_mad`, absolute)
/// error. Starts from the min–max scale, then tries `nstep + 1` scales
/// `(nmax + rmin + rdelta·k)/(max − min)`; for each, the quants it gives are refitted
/// by weighted least squares, and the fit is kept if its error is smaller.
#[allow(clippy::too_many_arguments)]
fn fit_affine(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> Affine {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return Affine {
            scale: 0.0,
            min: -min,
        };
    }
    let err = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let clamp_q = |v: i32| v.clamp(0, nmax) as u8;
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        l[i] = clamp_q(nearest_int(iscale * (x[i] - min)));
        // scale*L + min - x
        let diff = scale * l[i] as f32 + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if nstep < 1 {
        return Affine { scale, min: -min };
    }
    let mut laux = [0u8; 32];
    let laux = &mut laux[..n];
    for is in 0..=nstep {
        // (rmin + rdelta*is + nmax)/(max - min)
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = clamp_q(nearest_int(iscale * (x[i] - min)));
            laux[i] = q;
            let (w, q) = (weights[i], q as f32);
            sum_l += w * q;
            sum_l2 += w * q * q;
            sum_xl += w * q * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l.copy_from_slice(laux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    Affine { scale, min: -min }
}

/// First element of largest magnitude, with its sign (`if (ax > amax)`), and that
/// magnitude.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    (max, amax)
}

/// ggml's `make_qx_quants` with `rmse_type = 1` and no importance weights (the only
/// way the reference quantizers call it): symmetric quants `L − nmax` in
/// `−nmax..nmax`, weights `x²`. Tries the scale that maps the extreme value to
/// `−nmax` and 18 perturbations `−(nmax ± 0.1·k)/max`, keeping the one with the best
/// weighted least-squares fit. Writes `L` (offset by `nmax`) and returns the scale.
fn fit_symmetric(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let mut iscale = -nmax as f32 / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (li, &v) in l.iter_mut().zip(x) {
        let q = quant(iscale, v);
        *li = (q + nmax) as i8;
        let (w, q) = (v * v, q as f32);
        sumlx += w * v * q;
        suml2 += w * q * q;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        // -(nmax + 0.1f*is) / max
        iscale = -(nmax as f32 + 0.1f32 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let (w, q) = (v * v, quant(iscale, v) as f32);
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (li, &v) in l.iter_mut().zip(x) {
                *li = (quant(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// ggml's `make_q3_quants` with `do_rmse`: symmetric quants in `−nmax..nmax` from the
/// extreme value's scale, then up to 5 rounds of coordinate descent that move single
/// quants whenever that improves the `x²`-weighted least-squares fit. Writes `L`
/// (offset by `nmax`; all 0 for an all-zero sub-block) and returns the scale.
fn fit_symmetric_iterative(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let iscale = -nmax as f32 / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (li, &v) in l.iter_mut().zip(x) {
        let q = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *li = q as i8;
        let (w, q) = (v * v, q as f32);
        sumlx += w * v * q;
        suml2 += w * q * q;
    }
    for _ in 0..5 {
        let mut changed = false;
        for (li, &v) in l.iter_mut().zip(x) {
            let w = v * v;
            let cur = *li as f32;
            let mut slx = sumlx - w * v * cur;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * cur * cur;
                // x[i] * sl2 / slx
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *li as i32 {
                    let q = new_l as f32;
                    slx += w * v * q;
                    sl2 += w * q * q;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *li = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for li in l.iter_mut() {
        *li += nmax as i8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

/// Packs 256 two-bit quants as Q2_K and Q3_K store them: byte `32·h + l` holds quants
/// `128·h + l + 32·s` in bits `2s..2s+2`, s = 0..4.
fn pack2(l: &[u8; QK_K], out: &mut [u8]) {
    for h in 0..2 {
        for i in 0..32 {
            let j = 128 * h + i;
            out[32 * h + i] = l[j] | (l[j + 32] << 2) | (l[j + 64] << 4) | (l[j + 96] << 6);
        }
    }
}

pub(super) fn q2_k(x: &[f32], out: &mut Vec<u8>) {
    for x in x.chunks_exact(QK_K) {
        let mut block = [0u8; 84]; // scales[16], qs[64], d, dmin
        let mut l = [0u8; QK_K];
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        let mut weights = [0f32; 16];
        for j in 0..16 {
            let xs = &x[16 * j..16 * j + 16];
            for (w, &v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            let fit = fit_affine(
                3,
                xs,
                &weights,
                &mut l[16 * j..16 * j + 16],
                -0.5,
                0.1,
                15,
                true,
            );
            (scales[j], mins[j]) = (fit.scale, fit.min);
            if fit.scale > max_scale {
                max_scale = fit.scale;
            }
            if fit.min > max_min {
                max_min = fit.min;
            }
        }
        // Sub-block scales and minimums as 4-bit integers against max/15 (C stores
        // the int result into a byte, wrapping).
        let (sc, rest) = block.split_at_mut(16);
        let d = if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            fp32_to_fp16(max_scale / 15.0)
        } else {
            fp32_to_fp16(0.0)
        };
        let dmin = if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for j in 0..16 {
                sc[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            fp32_to_fp16(max_min / 15.0)
        } else {
            fp32_to_fp16(0.0)
        };
        rest[64..66].copy_from_slice(&d.to_le_bytes());
        rest[66..68].copy_from_slice(&dmin.to_le_bytes());
        let (d, dmin) = (fp16_to_fp32(d), fp16_to_fp32(dmin));
        for (j, &s) in sc.iter().enumerate() {
            let ds = d * (s & 0x0f) as f32;
            if ds == 0.0 {
                continue;
            }
            let dm = dmin * (s >> 4) as f32;
            for i in 16 * j..16 * j + 16 {
                // (x + dm)/d
                l[i] = nearest_int((x[i] + dm) / ds).clamp(0, 3) as u8;
            }
        }
        pack2(&l, &mut rest[..64]);
        out.extend_from_slice(&block);
    }
}

pub(super) fn q3_k(x: &[f32], out: &mut Vec<u8>) {
    for x in x.chunks_exact(QK_K) {
        let mut block = [0u8; 110]; // hmask[32], qs[64], scales[12], d
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut amax) = (0.0f32, 0.0f32);
        for j in 0..16 {
            scales[j] =
                fit_symmetric_iterative(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            let a = scales[j].abs();
            if a > amax {
                amax = a;
                max_scale = scales[j];
            }
        }
        // 6-bit sub-block scales in −32..32 against max_scale/−32: low nibbles in
        // bytes 0..8 (two per byte), high two bits in bytes 8..12.
        let mut sc = [0u8; 12];
        let d = if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                // int8_t l = nearest_int(..); l = MAX(-32, MIN(31, l)) + 32
                let q = ((nearest_int(iscale * scales[j]) as i8 as i32).clamp(-32, 31) + 32) as u8;
                if j < 8 {
                    sc[j] = q & 0x0f;
                } else {
                    sc[j - 8] |= (q & 0x0f) << 4;
                }
                sc[8 + j % 4] |= (q >> 4) << (2 * (j / 4));
            }
            fp32_to_fp16(1.0 / iscale)
        } else {
            fp32_to_fp16(0.0)
        };
        let df = fp16_to_fp32(d);
        for j in 0..16 {
            let low = if j < 8 { sc[j] & 0x0f } else { sc[j - 8] >> 4 };
            let high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
            let s = (low | (high << 4)) as i32 - 32;
            let ds = df * s as f32;
            if ds == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                l[i] = (nearest_int(x[i] / ds).clamp(-4, 3) + 4) as i8;
            }
        }
        // The third bit of quant j goes to bit j/32 of hmask[j % 32].
        let mut q2 = [0u8; QK_K];
        let (hmask, rest) = block.split_at_mut(32);
        for (j, (&q, q2)) in l.iter().zip(q2.iter_mut()).enumerate() {
            let mut q = q as u8;
            if q > 3 {
                hmask[j % 32] |= 1 << (j / 32);
                q -= 4;
            }
            *q2 = q;
        }
        pack2(&q2, &mut rest[..64]);
        rest[64..76].copy_from_slice(&sc);
        rest[76..78].copy_from_slice(&d.to_le_bytes());
        out.extend_from_slice(&block);
    }
}

/// The shared first half of Q4_K and Q5_K: fits the 8 sub-blocks of 32, quantizes
/// their scales and minimums to 6 bits, re-quantizes the values to `0..=nmax`. Writes
/// d, dmin and the 12 scale bytes to `head` and returns the quants.
fn q45_k_quants(nmax: i32, rmin: f32, nstep: i32, x: &[f32], head: &mut [u8; 16]) -> [u8; QK_K] {
    let mut l = [0u8; QK_K];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    let mut weights = [0f32; 32];
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let fit = fit_affine(
            nmax,
            xs,
            &weights,
            &mut l[32 * j..32 * j + 32],
            rmin,
            0.1,
            nstep,
            false,
        );
        (scales[j], mins[j]) = (fit.scale, fit.min);
        if fit.scale > max_scale {
            max_scale = fit.scale;
        }
        if fit.min > max_min {
            max_min = fit.min;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let sc = &mut head[4..16];
    for j in 0..8 {
        // uint8_t ls = nearest_int(..); ls = MIN(63, ls)
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0x0f) | ((lm & 0x0f) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let d = fp32_to_fp16(max_scale / 63.0);
    let dmin = fp32_to_fp16(max_min / 63.0);
    head[0..2].copy_from_slice(&d.to_le_bytes());
    head[2..4].copy_from_slice(&dmin.to_le_bytes());
    let (d, dmin) = (fp16_to_fp32(d), fp16_to_fp32(dmin));
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, &head[4..16]);
        let ds = d * s as f32;
        if ds == 0.0 {
            continue;
        }
        let dm = dmin * m as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / ds).clamp(0, nmax) as u8;
        }
    }
    l
}

pub(super) fn q4_k(x: &[f32], out: &mut Vec<u8>) {
    for x in x.chunks_exact(QK_K) {
        let mut head = [0u8; 16];
        let l = q45_k_quants(15, -1.0, 20, x, &mut head);
        out.extend_from_slice(&head);
        // Byte 32·c + i: quant 64·c + i in the low nibble, 64·c + 32 + i in the high.
        for c in 0..4 {
            let j = 64 * c;
            out.extend((0..32).map(|i| l[j + i] | (l[j + i + 32] << 4)));
        }
    }
}

pub(super) fn q5_k(x: &[f32], out: &mut Vec<u8>) {
    for x in x.chunks_exact(QK_K) {
        let mut head = [0u8; 16];
        let l = q45_k_quants(31, -0.5, 15, x, &mut head);
        out.extend_from_slice(&head);
        // As Q4_K, with the fifth bits of quants 64·c + i and 64·c + 32 + i in bits
        // 2c and 2c+1 of qh[i].
        let mut qh = [0u8; 32];
        let mut ql = [0u8; 128];
        for c in 0..4 {
            for i in 0..32 {
                let (mut lo, mut hi) = (l[64 * c + i], l[64 * c + 32 + i]);
                if lo > 15 {
                    lo -= 16;
                    qh[i] |= 1 << (2 * c);
                }
                if hi > 15 {
                    hi -= 16;
                    qh[i] |= 2 << (2 * c);
                }
                ql[32 * c + i] = lo | (hi << 4);
            }
        }
        out.extend_from_slice(&qh);
        out.extend_from_slice(&ql);
    }
}

pub(super) fn q6_k(x: &[f32], out: &mut Vec<u8>) {
    for x in x.chunks_exact(QK_K) {
        let mut block = [0u8; 210]; // ql[128], qh[64], scales[16] (i8), d
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for ib in 0..16 {
            let s = fit_symmetric(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
            scales[ib] = s;
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            // All zero, d = +0.
            out.extend_from_slice(&block);
            continue;
        }
        let iscale = -128.0 / max_scale;
        let d = fp32_to_fp16(1.0 / iscale);
        let mut sc = [0i8; 16];
        for (s, &f) in sc.iter_mut().zip(&scales) {
            *s = nearest_int(iscale * f).min(127) as i8;
        }
        let df = fp16_to_fp32(d);
        for (j, &s) in sc.iter().enumerate() {
            let ds = df * s as f32;
            if ds == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                l[i] = (nearest_int(x[i] / ds).clamp(-32, 31) + 32) as i8;
            }
        }
        let (ql, rest) = block.split_at_mut(128);
        let (qh, rest) = rest.split_at_mut(64);
        for h in 0..2 {
            for i in 0..32 {
                let j = 128 * h + i;
                let q = [l[j], l[j + 32], l[j + 64], l[j + 96]].map(|q| q as u8);
                ql[64 * h + i] = (q[0] & 0x0f) | ((q[2] & 0x0f) << 4);
                ql[64 * h + 32 + i] = (q[1] & 0x0f) | ((q[3] & 0x0f) << 4);
                qh[32 * h + i] =
                    (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
        for (b, s) in rest[..16].iter_mut().zip(sc) {
            *b = s as u8;
        }
        rest[16..18].copy_from_slice(&d.to_le_bytes());
        out.extend_from_slice(&block);
    }
}
