//! Q8_0 weights: storage in 8-row interleaved tiles and the Q8_0 × Q8_0 dot-product kernels.
//!
//! The format is ggml's `block_q8_0`: per 32 weights an f16 scale `d` and 32 signed bytes,
//! dequantized as `w = q·d`. Against a Q8_0 activation block one block contributes
//! `d·dx·Σ q·a`, exactly ggml's `ggml_vec_dot_q8_0_q8_0`. The model's `token_embd` (also
//! the tied output head, by far the largest matrix) is stored this way.
//!
//! Storage mirrors [`super::q4_1`]: tiles of 8 weight rows × one block, [`Q8_0x8`], with
//! the 8 scales followed by eight 32-byte chunks, chunk `j` holding bytes `4j..4j+4` of
//! each row, so one load gives 4 weights of 8 rows in 8 lanes. A tile is 272 bytes, the
//! same as its 8 source blocks. Rows can still be read back one at a time for the
//! embedding lookup ([`PackedQ8_0::dequantize_row`]).
//!
//! Cost: `vpmaddubsw` multiplies unsigned by signed bytes, so each chunk is multiplied as
//! `|w| · (a·sign w)` (ggml's AVX2 trick): per tile and activation row 8 broadcasts, 8
//! sign fixes, 8 `vpmaddubsw`, 8 `vpmaddwd` (a pair sum can reach 2 · 128 · 127, so the
//! 16-bit sums are widened every chunk), 8 32-bit adds and one FMA for 8 × 32
//! multiply-adds; the absolute values are shared by up to four activation rows. As for
//! Q4_1, the per-element operation sequence does not depend on the batch.

use std::ops::Range;

use half::f16;

use super::Sink;
use super::quant::{Q8Block, QK};

/// Weight rows per tile.
pub(crate) const GROUP: usize = 8;
/// Bytes of one ggml `block_q8_0`.
pub(crate) const BLOCK_BYTES: usize = 34;

/// One block (32 columns) of 8 interleaved Q8_0 weight rows.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Q8_0x8 {
    d: [f16; GROUP],
    qs: [i8; QK * GROUP],
}

impl Q8_0x8 {
    const ZERO: Q8_0x8 = Q8_0x8 {
        d: [f16::ZERO; GROUP],
        qs: [0; QK * GROUP],
    };

    /// Weight `k` (0..32) of row `r`.
    #[inline(always)]
    fn q(&self, r: usize, k: usize) -> i8 {
        self.qs[32 * (k / 4) + 4 * r + k % 4]
    }
}

/// A Q8_0 matrix in 8-row tiles (see the module documentation).
#[derive(Clone)]
pub struct PackedQ8_0 {
    tiles: Vec<Q8_0x8>,
}

impl PackedQ8_0 {
    /// Regroups `rows` rows of ggml blocks (`bytes.len() == rows · cols/32 · 34`, checked by
    /// the caller) into tiles.
    pub(crate) fn pack(bytes: &[u8], rows: usize, cols: usize) -> Self {
        let nb = cols / QK;
        let groups = rows.div_ceil(GROUP);
        let mut tiles = vec![Q8_0x8::ZERO; groups * nb];
        for (row, src_row) in bytes.chunks_exact(nb * BLOCK_BYTES).enumerate() {
            let (g, r) = (row / GROUP, row % GROUP);
            for (tile, src) in tiles[g * nb..(g + 1) * nb]
                .iter_mut()
                .zip(src_row.chunks_exact(BLOCK_BYTES))
            {
                tile.d[r] = f16::from_bits(u16::from_le_bytes([src[0], src[1]]));
                for j in 0..8 {
                    for e in 0..4 {
                        tile.qs[32 * j + 4 * r + e] = src[2 + 4 * j + e] as i8;
                    }
                }
            }
        }
        PackedQ8_0 { tiles }
    }

    /// The ggml bytes of rows `rows`, the inverse of [`Self::pack`].
    pub(crate) fn ggml_bytes(&self, rows: Range<usize>, cols: usize, out: &mut Vec<u8>) {
        let nb = cols / QK;
        for row in rows {
            let (g, r) = (row / GROUP, row % GROUP);
            for tile in &self.tiles[g * nb..(g + 1) * nb] {
                out.extend_from_slice(&tile.d[r].to_bits().to_le_bytes());
                out.extend((0..QK).map(|k| tile.q(r, k) as u8));
            }
        }
    }

    /// Dequantizes row `row` into `out` (`cols` values), as ggml's `dequantize_row_q8_0`.
    pub(crate) fn dequantize_row(&self, row: usize, cols: usize, out: &mut [f32]) {
        let nb = cols / QK;
        let (g, r) = (row / GROUP, row % GROUP);
        for (tile, ys) in self.tiles[g * nb..(g + 1) * nb]
            .iter()
            .zip(out.chunks_exact_mut(QK))
        {
            let d = tile.d[r].to_f32();
            for (k, y) in ys.iter_mut().enumerate() {
                *y = tile.q(r, k) as f32 * d;
            }
        }
    }

    pub(crate) fn tiles(&self) -> &[Q8_0x8] {
        &self.tiles
    }

    pub(crate) fn byte_size(&self) -> usize {
        std::mem::size_of_val(self.tiles.as_slice())
    }
}

/// Portable kernel: the 8 dot products of each tile group and activation row in ggml's
/// reference order (`sumf += d·dx·sumi` per block).
pub(crate) fn run_scalar(
    tiles: &[Q8_0x8],
    nb: usize,
    acts: &[Q8Block],
    groups: Range<usize>,
    rows: Range<usize>,
    sink: &mut Sink<'_>,
) {
    for g in groups {
        let gt = &tiles[g * nb..(g + 1) * nb];
        for i in rows.clone() {
            let xa = &acts[i * nb..(i + 1) * nb];
            let mut sumf = [0f32; GROUP];
            for (tile, a) in gt.iter().zip(xa) {
                for (r, s) in sumf.iter_mut().enumerate() {
                    let mut sumi = 0i32;
                    for (k, &aq) in a.qs.iter().enumerate() {
                        sumi += tile.q(r, k) as i32 * aq as i32;
                    }
                    *s += tile.d[r].to_f32() * a.d * sumi as f32;
                }
            }
            sink(g, i, &sumf);
        }
    }
}

/// AVX2 kernel over a rectangle of tile groups × activation rows, in tiles of up to four
/// activation rows sharing each weight chunk's absolute value.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn run_avx2(
    tiles: &[Q8_0x8],
    nb: usize,
    acts: &[Q8Block],
    groups: Range<usize>,
    rows: Range<usize>,
    sink: &mut Sink<'_>,
) {
    let row = |i: usize| &acts[i * nb..(i + 1) * nb];
    for g in groups {
        let gt = &tiles[g * nb..(g + 1) * nb];
        tile_runs!(rows, g, row, sink, |a| {
            4 => tile_avx2(gt, a),
            3 => tile_avx2(gt, a),
            2 => tile_avx2(gt, a),
            1 => tile_avx2(gt, a),
        });
    }
}

/// The 8 × R outputs of one tile group against R activation rows. Every output lane sees
/// the same instruction sequence whatever R is.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn tile_avx2<const R: usize>(gt: &[Q8_0x8], acts: [&[Q8Block]; R]) -> [[f32; GROUP]; R] {
    use std::arch::x86_64::*;
    let acts = acts.map(|a| &a[..gt.len()]);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); R];
    for (b, tile) in gt.iter().enumerate() {
        let mut isum = [_mm256_setzero_si256(); R];
        for j in 0..8 {
            // SAFETY: reads bytes 32j..32j+32 of the 256-byte `qs` array (j < 8).
            let w = unsafe { _mm256_loadu_si256(tile.qs.as_ptr().add(32 * j).cast()) };
            let aw = _mm256_sign_epi8(w, w);
            for r in 0..R {
                let a = _mm256_sign_epi8(_mm256_set1_epi32(acts[r][b].word(j)), w);
                let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, a), ones);
                isum[r] = _mm256_add_epi32(isum[r], p);
            }
        }
        // SAFETY: reads the 16 bytes of an 8-element f16 array.
        let dw = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(tile.d.as_ptr().cast())) };
        for r in 0..R {
            let f = _mm256_cvtepi32_ps(isum[r]);
            let scale = _mm256_mul_ps(dw, _mm256_set1_ps(acts[r][b].d));
            acc[r] = _mm256_fmadd_ps(f, scale, acc[r]);
        }
    }
    let mut out = [[0f32; GROUP]; R];
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: stores 8 floats into an 8-float array.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), a) };
    }
    out
}
