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
        *q = (v * id).round().clamp(-127.0, 127.0) as i8;
    }
    for (s, qs) in out.bsums.iter_mut().zip(out.qs.chunks_exact(16)) {
        *s = qs.iter().map(|&q| q as i16).sum();
    }
    out.d = d;
}

/// Quantizes `x` (a whole number of super-blocks) into `out`.
pub(crate) fn quantize_row(x: &[f32], out: &mut [Q8KBlock]) {
    debug_assert_eq!(x.len(), out.len() * QK_K);
    for (b, xs) in out.iter_mut().zip(x.chunks_exact(QK_K)) {
        quantize_block(xs, b);
    }
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
        quantize_row(&x, &mut b);
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
    fn non_finite_input_gives_a_nan_scale() {
        let mut x = vec![1.0f32; QK_K];
        x[3] = f32::INFINITY;
        let mut b = [Q8KBlock::default()];
        quantize_row(&x, &mut b);
        assert!(b[0].d.is_nan());
        let mut z = [Q8KBlock::default()];
        quantize_row(&[0.0; QK_K], &mut z);
        assert_eq!(z[0].d, 0.0);
        assert!(z[0].qs.iter().all(|&q| q == 0));
    }
}
