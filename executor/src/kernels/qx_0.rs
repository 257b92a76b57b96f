//! Q4_0 and Q5_0 weights: storage in 8-row interleaved tiles and their dot-product
//! kernels against Q8_0 activations.
//!
//! The formats are ggml's `block_q4_0` (an f16 scale `d` and 16 bytes of nibbles, `w =
//! d·(q − 8)`) and `block_q5_0` (the same with a 32-bit word `qh` holding each weight's
//! fifth bit, `w = d·(q − 16)`). Against a Q8_0 activation block one block contributes
//! `d·dx·Σ (q − offset)·a`, exactly ggml's `ggml_vec_dot_q4_0_q8_0` / `_q5_0_q8_0`.
//!
//! Why their own tiles: the `_M` files of models whose width is not a multiple of 256
//! (SmolLM2: 576) fall back to Q5_0 for most matrices. They used to be held as Q8_0 tiles
//! of the same values (34 bytes per 32 weights); kept in their own bits they take 22
//! (Q5_0) or 18 (Q4_0), and a one-row decode step reads that much less.
//!
//! Storage mirrors [`super::q4_1`]: tiles of 8 weight rows × one block, [`Qx0x8`]: the 8
//! scales, four 32-byte chunks where chunk `j` holds bytes `4j..4j+4` of each row's nibbles
//! (weights `4j..4j+4` low, `16+4j..16+4j+4` high), then, for Q5_0, 32 bytes of fifth bits
//! rearranged so that row `r`'s lane, byte `e`, bit `c` is the fifth bit of weight `4c+e`
//! (`c < 4`) or `16+4(c−4)+e` (`c ≥ 4`). One shift and one mask then put the fifth bits of a
//! chunk's weights in place for all 8 rows at once. A tile is 176 (Q5_0) or 144 (Q4_0)
//! bytes, the size of its 8 source blocks.
//!
//! Numerics: the integer sums are exact and equal to those of the same values held as
//! Q8_0 (`q − offset` in −16..15), and the float operations per output are the Q8_0
//! kernel's (`acc += f32(sumi) · (d·dx)`, fused on AVX2), so the results are bit for bit
//! those of [`super::q8_0`] on the same values, on either path, and batch invariant.
//!
//! Cost: per tile and activation row, 8 broadcasts, 8 `vpmaddubsw` of the unsigned
//! quants and 8 16-bit adds, one or two `vpmaddwd`, the offset correction (`offset·Σa`,
//! from the activation block's exact sum), one convert and one FMA for 8 × 32
//! multiply-adds; the unpacking (two masks and a shift, for Q5_0 two more shifts, two
//! masks and two ors per chunk) is shared by up to six activation rows (four for Q5_0 on
//! the AVX2 path, which has 16 vector registers). Multiplying unsigned quants and correcting once per block, instead of the sign
//! fix `|w|·(a·sign w)` per chunk, cut this kernel's time in a 128-token prefill 1.3x
//! (perf samples).

use std::ops::Range;

use half::f16;

use super::Sink;
use super::blocks::{BlockType, Unpacked32, unpack32};
#[cfg(target_arch = "x86_64")]
use super::driver::TileFormat;
#[cfg(target_arch = "x86_64")]
use super::pair::{join16, join32, split};
use super::quant::{Q8Block, QK};

/// Weight rows per tile.
pub(crate) const GROUP: usize = 8;

/// One block (32 columns) of 8 interleaved Q4_0 (`QH == 0`) or Q5_0 (`QH == 32`) rows.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Qx0x8<const QH: usize> {
    d: [f16; GROUP],
    qs: [u8; 4 * 4 * GROUP],
    qh: [u8; QH],
}

/// Q4_0 tiles.
pub(crate) type Q4_0x8 = Qx0x8<0>;
/// Q5_0 tiles.
pub(crate) type Q5_0x8 = Qx0x8<32>;

impl<const QH: usize> Qx0x8<QH> {
    const ZERO: Self = Qx0x8 {
        d: [f16::ZERO; GROUP],
        qs: [0; 4 * 4 * GROUP],
        qh: [0; QH],
    };

    /// The format: Q5_0 when the tile carries fifth bits.
    const TYPE: BlockType = if QH == 0 {
        BlockType::Q4_0
    } else {
        BlockType::Q5_0
    };

    /// Subtracted from every unsigned quant.
    const OFFSET: i32 = if QH == 0 { 8 } else { 16 };

    /// Unsigned quant `k` (0..32) of row `r`.
    #[inline(always)]
    fn q(&self, r: usize, k: usize) -> u8 {
        let (half, k16) = (k / 16, k % 16);
        let b = self.qs[32 * (k16 / 4) + 4 * r + k16 % 4];
        let nibble = if half == 0 { b & 0x0f } else { b >> 4 };
        if QH == 0 {
            return nibble;
        }
        let bit = 4 * half + k16 / 4;
        let h = (self.qh[4 * r + k16 % 4] >> bit) & 1;
        nibble | (h << 4)
    }

    /// Sets row `r` from its unsigned quants and scale bits.
    fn set_row(&mut self, r: usize, d: u16, q: &[u8; QK]) {
        self.d[r] = f16::from_bits(d);
        for k16 in 0..16 {
            let (j, e) = (k16 / 4, k16 % 4);
            self.qs[32 * j + 4 * r + e] = (q[k16] & 0x0f) | ((q[k16 + 16] & 0x0f) << 4);
            if QH > 0 {
                let h = ((q[k16] >> 4) << j) | ((q[k16 + 16] >> 4) << (4 + j));
                self.qh[4 * r + e] |= h;
            }
        }
    }
}

/// A Q4_0 or Q5_0 matrix in 8-row tiles (see the module documentation).
#[derive(Clone)]
pub struct PackedQx0<const QH: usize> {
    tiles: Vec<Qx0x8<QH>>,
}

/// A Q4_0 matrix.
pub type PackedQ4_0 = PackedQx0<0>;
/// A Q5_0 matrix.
pub type PackedQ5_0 = PackedQx0<32>;

impl<const QH: usize> PackedQx0<QH> {
    /// Regroups `rows` rows of ggml blocks (`bytes.len() == rows · cols/32 · block bytes`,
    /// checked by the caller) into tiles.
    pub(crate) fn pack(bytes: &[u8], rows: usize, cols: usize) -> Self {
        let ty = Qx0x8::<QH>::TYPE;
        let nb = cols / QK;
        let groups = rows.div_ceil(GROUP);
        let mut tiles = vec![Qx0x8::<QH>::ZERO; groups * nb];
        let mut u = Unpacked32::default();
        for (row, src_row) in bytes.chunks_exact(nb * ty.block_bytes()).enumerate() {
            let (g, r) = (row / GROUP, row % GROUP);
            for (tile, src) in tiles[g * nb..(g + 1) * nb]
                .iter_mut()
                .zip(src_row.chunks_exact(ty.block_bytes()))
            {
                unpack32(ty, src, &mut u);
                tile.set_row(r, u16::from_le_bytes([src[0], src[1]]), &u.q);
            }
        }
        PackedQx0 { tiles }
    }

    /// The ggml bytes of rows `rows`, the inverse of [`Self::pack`].
    pub(crate) fn ggml_bytes(&self, rows: Range<usize>, cols: usize, out: &mut Vec<u8>) {
        let nb = cols / QK;
        for row in rows {
            let (g, r) = (row / GROUP, row % GROUP);
            for tile in &self.tiles[g * nb..(g + 1) * nb] {
                out.extend_from_slice(&tile.d[r].to_bits().to_le_bytes());
                let q: [u8; QK] = std::array::from_fn(|k| tile.q(r, k));
                if QH > 0 {
                    let qh = q
                        .iter()
                        .enumerate()
                        .fold(0u32, |acc, (k, &v)| acc | (u32::from(v >> 4) << k));
                    out.extend_from_slice(&qh.to_le_bytes());
                }
                out.extend((0..16).map(|k| (q[k] & 0x0f) | ((q[k + 16] & 0x0f) << 4)));
            }
        }
    }

    /// Dequantizes row `row` into `out` (`cols` values), as ggml's `dequantize_row_q4_0` /
    /// `dequantize_row_q5_0`.
    pub(crate) fn dequantize_row(&self, row: usize, cols: usize, out: &mut [f32]) {
        let nb = cols / QK;
        let (g, r) = (row / GROUP, row % GROUP);
        for (tile, ys) in self.tiles[g * nb..(g + 1) * nb]
            .iter()
            .zip(out.chunks_exact_mut(QK))
        {
            let d = tile.d[r].to_f32();
            for (k, y) in ys.iter_mut().enumerate() {
                *y = (tile.q(r, k) as i32 - Qx0x8::<QH>::OFFSET) as f32 * d;
            }
        }
    }

    pub(crate) fn tiles(&self) -> &[Qx0x8<QH>] {
        &self.tiles
    }

    pub(crate) fn byte_size(&self) -> usize {
        std::mem::size_of_val(self.tiles.as_slice())
    }
}

/// Portable kernel: the 8 dot products of each tile group and activation row in ggml's
/// reference order (`sumf += d·dx·sumi` per block), the Q8_0 scalar kernel's operations.
pub(crate) fn run_scalar<const QH: usize>(
    tiles: &[Qx0x8<QH>],
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
                        sumi += (tile.q(r, k) as i32 - Qx0x8::<QH>::OFFSET) * aq as i32;
                    }
                    *s += tile.d[r].to_f32() * a.d * sumi as f32;
                }
            }
            sink(g, i, &sumf);
        }
    }
}

/// The 256- and 512-bit bodies for [`super::driver`], which runs them in runs of up to
/// six activation rows sharing each unpacked weight chunk; with VNNI (AVX-512 F, VL, BW
/// and VNNI) the products use `vpdpbusd`, two tile groups at a time on 512-bit vectors.
#[cfg(target_arch = "x86_64")]
impl<const QH: usize> TileFormat for Qx0x8<QH> {
    type Act = Q8Block;

    #[inline(always)]
    fn group<const VNNI: bool>(
        gt: &[Self],
        acts: &[Q8Block],
        nb: usize,
        g: usize,
        rows: Range<usize>,
        sink: &mut Sink<'_>,
    ) {
        let row = |i: usize| &acts[i * nb..(i + 1) * nb];
        // Registers per activation row: three for Q5_0 on AVX2 (a 16-bit and a 32-bit
        // sum, the accumulator), two for Q4_0 on AVX2, three with VNNI (two 32-bit
        // sums, the accumulator) out of 32: runs of 6 except for Q5_0 on AVX2 (4).
        tile_runs!(rows, g, row, sink, |a| {
            6 if QH == 0 || VNNI => tile::<QH, 6, VNNI>(gt, a),
            4 => tile::<QH, 4, VNNI>(gt, a),
            3 => tile::<QH, 3, VNNI>(gt, a),
            2 => tile::<QH, 2, VNNI>(gt, a),
            1 => tile::<QH, 1, VNNI>(gt, a),
        });
    }

    #[inline(always)]
    fn group_pair(
        lo: &[Self],
        hi: &[Self],
        acts: &[Q8Block],
        nb: usize,
        g: usize,
        rows: Range<usize>,
        sink: &mut Sink<'_>,
    ) {
        let row = |i: usize| &acts[i * nb..(i + 1) * nb];
        // Registers per activation row: two 32-bit sums and the accumulator, for
        // 16 weight rows each.
        let mut pair_sink = |_: usize, i: usize, out: &[f32; 2 * GROUP]| split(sink, g, i, out);
        tile_runs!(rows, g, row, pair_sink, |a| {
            6 => tile_pair::<QH, 6>(lo, hi, a),
            4 => tile_pair::<QH, 4>(lo, hi, a),
            3 => tile_pair::<QH, 3>(lo, hi, a),
            2 => tile_pair::<QH, 2>(lo, hi, a),
            1 => tile_pair::<QH, 1>(lo, hi, a),
        });
    }
}

/// [`tile`] with VNNI for two tile groups side by side in 512-bit vectors (`lo` in the
/// low half, `hi` in the high): the same instructions per output lane, so the same
/// bits, with each unpacking and each `vpdpbusd` serving 16 weight rows.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile_pair<const QH: usize, const R: usize>(
    lo_tiles: &[Qx0x8<QH>],
    hi_tiles: &[Qx0x8<QH>],
    acts: [&[Q8Block]; R],
) -> [[f32; 2 * GROUP]; R] {
    use std::arch::x86_64::*;
    let acts = acts.map(|a| &a[..lo_tiles.len()]);
    let hi_tiles = &hi_tiles[..lo_tiles.len()];
    // SAFETY (every intrinsic below): this function is only inlined into `driver::run_vnni`,
    // compiled with avx2, fma, f16c and avx512f, vl, bw and vnni; the loads read whole
    // arrays of the tiles (32 bytes of `qs` or `qh`, 16 bytes of `d`).
    unsafe {
        let m4 = _mm512_set1_epi8(0x0f);
        let bit4 = _mm512_set1_epi8(0x10);
        let mut acc = [_mm512_setzero_ps(); R];
        for (b, (tl, th)) in lo_tiles.iter().zip(hi_tiles).enumerate() {
            let qh = if QH > 0 {
                join32(tl.qh.as_ptr(), th.qh.as_ptr())
            } else {
                _mm512_setzero_si512()
            };
            let mut s_lo = [_mm512_setzero_si512(); R];
            let mut s_hi = [_mm512_setzero_si512(); R];
            for j in 0..4 {
                let w = join32(tl.qs.as_ptr().add(32 * j), th.qs.as_ptr().add(32 * j));
                let mut lo = _mm512_and_si512(w, m4);
                let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(w), m4);
                if QH > 0 {
                    let up = _mm512_sll_epi16(qh, _mm_cvtsi32_si128(4 - j as i32));
                    let down = _mm512_srl_epi16(qh, _mm_cvtsi32_si128(j as i32));
                    lo = _mm512_or_si512(lo, _mm512_and_si512(up, bit4));
                    hi = _mm512_or_si512(hi, _mm512_and_si512(down, bit4));
                }
                for r in 0..R {
                    let a = &acts[r][b];
                    s_lo[r] = _mm512_dpbusd_epi32(s_lo[r], lo, _mm512_set1_epi32(a.word(j)));
                    s_hi[r] = _mm512_dpbusd_epi32(s_hi[r], hi, _mm512_set1_epi32(a.word(4 + j)));
                }
            }
            let dw = _mm512_cvtph_ps(join16(tl.d.as_ptr().cast(), th.d.as_ptr().cast()));
            for r in 0..R {
                let a = &acts[r][b];
                let sum = _mm512_add_epi32(s_lo[r], s_hi[r]);
                let off = _mm512_set1_epi32(Qx0x8::<QH>::OFFSET * a.sum);
                let f = _mm512_cvtepi32_ps(_mm512_sub_epi32(sum, off));
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(a.d));
                acc[r] = _mm512_fmadd_ps(f, scale, acc[r]);
            }
        }
        let mut out = [[0f32; 2 * GROUP]; R];
        for (o, a) in out.iter_mut().zip(acc) {
            _mm512_storeu_ps(o.as_mut_ptr(), a);
        }
        out
    }
}

/// The 8 × R outputs of one tile group against R activation rows. Every output lane sees
/// the same instruction sequence whatever R is.
///
/// The weights are multiplied unsigned (`q` in 0..32), so `vpmaddubsw` needs no sign fix,
/// and the offset is taken off the exact sum afterwards: `Σ q·a − offset·Σ a`, the
/// integer `Σ (q − offset)·a` of the Q8_0 form. A pair sum is at most 2·31·127 = 7874 in
/// magnitude, so four are summed in 16 bits before widening (Q4_0: eight, 2·15·127·8 =
/// 30480). With `VNNI`, `vpdpbusd` sums four products straight into 32 bits: the same
/// integers.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile<const QH: usize, const R: usize, const VNNI: bool>(
    gt: &[Qx0x8<QH>],
    acts: [&[Q8Block]; R],
) -> [[f32; GROUP]; R] {
    use std::arch::x86_64::*;
    let acts = acts.map(|a| &a[..gt.len()]);
    // SAFETY (every intrinsic below): this function is only inlined into callers compiled
    // with avx2, fma and f16c, and, when `VNNI`, avx512vl and avx512vnni (`driver::run_avx2`,
    // `driver::run_vnni`).
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let bit4 = _mm256_set1_epi8(0x10);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); R];
        for (b, tile) in gt.iter().enumerate() {
            let qh = if QH > 0 {
                // `QH == 32`: reads the 32 bytes of the `qh` array.
                _mm256_loadu_si256(tile.qh.as_ptr().cast())
            } else {
                _mm256_setzero_si256()
            };
            let mut s16 = [_mm256_setzero_si256(); R];
            let mut s32 = [_mm256_setzero_si256(); R];
            for j in 0..4 {
                // Reads bytes 32j..32j+32 of the 128-byte `qs` array (j < 4).
                let w = _mm256_loadu_si256(tile.qs.as_ptr().add(32 * j).cast());
                let mut lo = _mm256_and_si256(w, m4);
                let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(w), m4);
                if QH > 0 {
                    // Bit j of each byte to bit 4 (low nibbles), bit 4 + j to bit 4 (high).
                    let up = _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - j as i32));
                    let down = _mm256_srl_epi16(qh, _mm_cvtsi32_si128(j as i32));
                    lo = _mm256_or_si256(lo, _mm256_and_si256(up, bit4));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(down, bit4));
                }
                for r in 0..R {
                    let a = &acts[r][b];
                    let alo = _mm256_set1_epi32(a.word(j));
                    let ahi = _mm256_set1_epi32(a.word(4 + j));
                    if VNNI {
                        // Two chains (low and high nibbles) halve the dependent latency.
                        s32[r] = _mm256_dpbusd_epi32(s32[r], lo, alo);
                        s16[r] = _mm256_dpbusd_epi32(s16[r], hi, ahi);
                        continue;
                    }
                    let plo = _mm256_maddubs_epi16(lo, alo);
                    let phi = _mm256_maddubs_epi16(hi, ahi);
                    s16[r] = _mm256_add_epi16(s16[r], _mm256_add_epi16(plo, phi));
                    if QH > 0 && j % 2 == 1 {
                        s32[r] = _mm256_add_epi32(s32[r], _mm256_madd_epi16(s16[r], ones));
                        s16[r] = _mm256_setzero_si256();
                    }
                }
            }
            // Reads the 16 bytes of an 8-element f16 array.
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(tile.d.as_ptr().cast()));
            for r in 0..R {
                let a = &acts[r][b];
                let sum = if VNNI {
                    _mm256_add_epi32(s32[r], s16[r])
                } else if QH > 0 {
                    s32[r]
                } else {
                    _mm256_madd_epi16(s16[r], ones)
                };
                let off = _mm256_set1_epi32(Qx0x8::<QH>::OFFSET * a.sum);
                let f = _mm256_cvtepi32_ps(_mm256_sub_epi32(sum, off));
                let scale = _mm256_mul_ps(dw, _mm256_set1_ps(a.d));
                acc[r] = _mm256_fmadd_ps(f, scale, acc[r]);
            }
        }
        let mut out = [[0f32; GROUP]; R];
        for (o, a) in out.iter_mut().zip(acc) {
            // Stores 8 floats into an 8-float array.
            _mm256_storeu_ps(o.as_mut_ptr(), a);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Q5_0 block with every quant distinct in its low and high bits.
    fn block(seed: u32) -> Vec<u8> {
        let mut b = vec![0u8; BlockType::Q5_0.block_bytes()];
        b[..2].copy_from_slice(&f16::from_f32(0.5 + seed as f32).to_bits().to_le_bytes());
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        for v in &mut b[2..] {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *v = x as u8;
        }
        b
    }

    #[test]
    fn q5_0_tiles_round_trip_and_decode_as_the_blocks_do() {
        let (rows, cols) = (11, 64);
        let bytes: Vec<u8> = (0..rows * cols / QK)
            .flat_map(|s| block(s as u32))
            .collect();
        let p = PackedQ5_0::pack(&bytes, rows, cols);
        let mut back = Vec::new();
        p.ggml_bytes(0..rows, cols, &mut back);
        assert_eq!(back, bytes);
        let mut u = Unpacked32::default();
        let mut row = vec![0f32; cols];
        for r in 0..rows {
            p.dequantize_row(r, cols, &mut row);
            for (b, src) in bytes[r * 44..(r + 1) * 44].chunks_exact(22).enumerate() {
                unpack32(BlockType::Q5_0, src, &mut u);
                for k in 0..QK {
                    assert_eq!(row[b * QK + k], (u.q[k] as i32 - 16) as f32 * u.d);
                }
            }
        }
    }

    #[test]
    fn q4_0_tiles_round_trip() {
        let (rows, cols) = (9, 96);
        let bytes: Vec<u8> = (0..rows * cols / QK)
            .flat_map(|s| {
                let b = block(s as u32);
                [&b[..2], &b[6..]].concat()
            })
            .collect();
        let p = PackedQ4_0::pack(&bytes, rows, cols);
        let mut back = Vec::new();
        p.ggml_bytes(0..rows, cols, &mut back);
        assert_eq!(back, bytes);
        assert_eq!(std::mem::size_of::<Q4_0x8>(), 8 * 18);
        assert_eq!(std::mem::size_of::<Q5_0x8>(), 8 * 22);
    }
}
