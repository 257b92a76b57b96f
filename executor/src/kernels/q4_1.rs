//! Q4_1 weights: storage in 8-row interleaved tiles and the Q4_1 × Q8_1 dot-product kernels.
//!
//! The format is ggml's `block_q4_1`: per 32 weights an f16 scale `d`, an f16 minimum `m`
//! and 16 bytes of nibbles (byte `k` holds weight `k` in its low and weight `k + 16` in its
//! high nibble), dequantized as `w = q·d + m`. Against a Q8_1 activation block (scale
//! `dx`, quants `a`, sum `s = dx·Σa`) one block contributes `d·dx·Σ q·a + m·s`, exactly
//! ggml's `ggml_vec_dot_q4_1_q8_1`.
//!
//! Storage: the file's blocks are regrouped losslessly (no requantization) into tiles of
//! 8 weight rows × one block, [`Q4_1x8`]: the 8 scales, the 8 minimums, then four 32-byte
//! chunks where chunk `j` holds bytes `4j..4j+4` of each of the 8 rows. One 32-byte load
//! plus a mask (or a shift) yields 4 consecutive weights of all 8 rows, one 32-bit lane per
//! row, so a broadcast activation word, `vpmaddubsw` and `vpmaddwd` produce the 8 rows'
//! partial sums in the 8 lanes of one register: the scale and minimum terms are then
//! applied to 8 outputs per instruction and no horizontal sum is ever needed. This is the
//! layout idea of ggml's `block_q4_0x8` repacking. The tile is 160 bytes, the same as the
//! 8 source blocks; the last tile of a matrix whose row count is not a multiple of 8 is
//! padded with zero rows (never returned).
//!
//! Cost: per tile and activation row, 8 broadcasts, 8 `vpmaddubsw`, 8 16-bit adds (the
//! eight pair sums stay below 2^15: 8 · 2 · 15 · 127 = 30480), one `vpmaddwd`, one convert
//! and two FMAs for 8 × 32 multiply-adds; the nibble unpacking is shared by up to four
//! activation rows. The per-element operation sequence never depends on how many rows a
//! call processes together, which is what makes results batch invariant.

use std::ops::Range;

use half::f16;

use super::Sink;
use super::quant::{Q8Block, QK};

/// Weight rows per tile.
pub(crate) const GROUP: usize = 8;
/// Bytes of one ggml `block_q4_1`.
pub(crate) const BLOCK_BYTES: usize = 20;

/// One block (32 columns) of 8 interleaved Q4_1 weight rows.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Q4_1x8 {
    d: [f16; GROUP],
    m: [f16; GROUP],
    qs: [u8; 4 * 4 * GROUP],
}

impl Q4_1x8 {
    const ZERO: Q4_1x8 = Q4_1x8 {
        d: [f16::ZERO; GROUP],
        m: [f16::ZERO; GROUP],
        qs: [0; 4 * 4 * GROUP],
    };

    /// Byte `k` (0..16) of row `r`'s source block.
    #[inline(always)]
    fn byte(&self, r: usize, k: usize) -> u8 {
        self.qs[32 * (k / 4) + 4 * r + k % 4]
    }
}

/// A Q4_1 matrix in 8-row tiles (see the module documentation).
#[derive(Clone)]
pub struct PackedQ4_1 {
    tiles: Vec<Q4_1x8>,
}

impl PackedQ4_1 {
    /// Regroups `rows` rows of ggml blocks (`bytes.len() == rows · cols/32 · 20`, checked by
    /// the caller) into tiles.
    pub(crate) fn pack(bytes: &[u8], rows: usize, cols: usize) -> Self {
        let nb = cols / QK;
        let groups = rows.div_ceil(GROUP);
        let mut tiles = vec![Q4_1x8::ZERO; groups * nb];
        for (row, src_row) in bytes.chunks_exact(nb * BLOCK_BYTES).enumerate() {
            let (g, r) = (row / GROUP, row % GROUP);
            for (tile, src) in tiles[g * nb..(g + 1) * nb]
                .iter_mut()
                .zip(src_row.chunks_exact(BLOCK_BYTES))
            {
                tile.d[r] = f16::from_bits(u16::from_le_bytes([src[0], src[1]]));
                tile.m[r] = f16::from_bits(u16::from_le_bytes([src[2], src[3]]));
                for j in 0..4 {
                    tile.qs[32 * j + 4 * r..32 * j + 4 * r + 4]
                        .copy_from_slice(&src[4 + 4 * j..8 + 4 * j]);
                }
            }
        }
        PackedQ4_1 { tiles }
    }

    /// The ggml bytes of rows `rows`, the inverse of [`Self::pack`].
    pub(crate) fn ggml_bytes(&self, rows: Range<usize>, cols: usize, out: &mut Vec<u8>) {
        let nb = cols / QK;
        for row in rows {
            let (g, r) = (row / GROUP, row % GROUP);
            for tile in &self.tiles[g * nb..(g + 1) * nb] {
                out.extend_from_slice(&tile.d[r].to_bits().to_le_bytes());
                out.extend_from_slice(&tile.m[r].to_bits().to_le_bytes());
                out.extend((0..16).map(|k| tile.byte(r, k)));
            }
        }
    }

    /// Dequantizes row `row` into `out` (`cols` values), as ggml's `dequantize_row_q4_1`.
    pub(crate) fn dequantize_row(&self, row: usize, cols: usize, out: &mut [f32]) {
        let nb = cols / QK;
        let (g, r) = (row / GROUP, row % GROUP);
        for (tile, ys) in self.tiles[g * nb..(g + 1) * nb]
            .iter()
            .zip(out.chunks_exact_mut(QK))
        {
            let d = tile.d[r].to_f32();
            let m = tile.m[r].to_f32();
            for k in 0..QK / 2 {
                let b = tile.byte(r, k);
                ys[k] = (b & 0x0f) as f32 * d + m;
                ys[k + QK / 2] = (b >> 4) as f32 * d + m;
            }
        }
    }

    pub(crate) fn tiles(&self) -> &[Q4_1x8] {
        &self.tiles
    }

    pub(crate) fn byte_size(&self) -> usize {
        std::mem::size_of_val(self.tiles.as_slice())
    }
}

/// Portable kernel: for each tile group in `groups` and activation row in `rows`, the 8
/// dot products in the reference order of candle's `vec_dot_q4_1_q8_1`
/// (`sumf += sumi·d·dx + m·s` per block, no fused multiply-add). The AVX2 kernel performs
/// the same IEEE operations per output, so the two paths agree bit for bit.
pub(crate) fn run_scalar(
    tiles: &[Q4_1x8],
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
                    for k in 0..QK / 2 {
                        let b = tile.byte(r, k);
                        sumi += (b & 0x0f) as i32 * a.qs[k] as i32
                            + (b >> 4) as i32 * a.qs[k + QK / 2] as i32;
                    }
                    *s += sumi as f32 * tile.d[r].to_f32() * a.d + tile.m[r].to_f32() * a.s;
                }
            }
            sink(g, i, &sumf);
        }
    }
}

/// AVX2 kernel over a rectangle of tile groups × activation rows, in tiles of up to four
/// activation rows sharing each unpacked weight chunk.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) fn run_avx2(
    tiles: &[Q4_1x8],
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
            6 => tile_avx2(gt, a),
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
fn tile_avx2<const R: usize>(gt: &[Q4_1x8], acts: [&[Q8Block]; R]) -> [[f32; GROUP]; R] {
    use std::arch::x86_64::*;
    let acts = acts.map(|a| &a[..gt.len()]);
    let m4 = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); R];
    for (b, tile) in gt.iter().enumerate() {
        let mut isum = [_mm256_setzero_si256(); R];
        for j in 0..4 {
            // SAFETY: reads bytes 32j..32j+32 of the 128-byte `qs` array (j < 4).
            let w = unsafe { _mm256_loadu_si256(tile.qs.as_ptr().add(32 * j).cast()) };
            let lo = _mm256_and_si256(w, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(w), m4);
            for r in 0..R {
                let a = &acts[r][b];
                let alo = _mm256_set1_epi32(a.word(j));
                let ahi = _mm256_set1_epi32(a.word(4 + j));
                isum[r] = _mm256_add_epi16(isum[r], _mm256_maddubs_epi16(lo, alo));
                isum[r] = _mm256_add_epi16(isum[r], _mm256_maddubs_epi16(hi, ahi));
            }
        }
        // SAFETY: each load reads the 16 bytes of an 8-element f16 array.
        let (dw, mw) = unsafe {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(tile.d.as_ptr().cast())),
                _mm256_cvtph_ps(_mm_loadu_si128(tile.m.as_ptr().cast())),
            )
        };
        for r in 0..R {
            let a = &acts[r][b];
            let f = _mm256_cvtepi32_ps(_mm256_madd_epi16(isum[r], ones));
            // Separate multiplies and adds in candle's order (see `run_scalar`), so
            // both paths and the reference agree bit for bit.
            let scaled = _mm256_mul_ps(_mm256_mul_ps(f, dw), _mm256_set1_ps(a.d));
            let min_term = _mm256_mul_ps(mw, _mm256_set1_ps(a.s));
            acc[r] = _mm256_add_ps(acc[r], _mm256_add_ps(scaled, min_term));
        }
    }
    let mut out = [[0f32; GROUP]; R];
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: stores 8 floats into an 8-float array.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), a) };
    }
    out
}
