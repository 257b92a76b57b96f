//! Q6_K weights: storage in 8-row interleaved tiles and their product with Q8_K
//! activations.
//!
//! Why their own tiles: Q6_K holds the output head and part of the feed-forward of every
//! `Q4_K_M` file, and all of a `Q6_K` one; as for Q4_K (`q4k`), decoding its layout once
//! at load lets the kernel multiply 8 rows per register at every batch size.
//!
//! The format is ggml's `block_q6_K`: per 256 weights 128 bytes of low nibbles, 64 bytes
//! of 2-bit high parts, 16 signed 8-bit scales (one per 16 weights) and an f16 `d`, `w =
//! d·sc·(q − 32)` with `q` in 0..64. A tile, [`Q6Kx8`], holds one super-block of 8 rows
//! with the weights regrouped in chunks of 4 consecutive values × 8 rows: chunk `k`
//! (values `4k..4k+4`) has its low nibbles in byte plane `k % 32` (low half of each byte
//! for `k < 32`, high half after) and its high parts in bits `2(k/16)..2(k/16)+2` of
//! 2-bit plane `k % 16`; the scales are kept in pairs (row `r`'s scales of groups `2p`
//! and `2p + 1` side by side), which gives both the multiplier of a group's products and,
//! with one `vpmaddwd`, the minimum term. 1,680 bytes, exactly the 8 source blocks.
//!
//! Numerics: per super-block the exact integers of the blocked kernel (`isum = Σ sc·Σ
//! q·a`, `msum = Σ 32·sc·bsum`) and its float steps (`acc += dx·(d·isum − d·msum)`), so
//! the outputs keep their bits on both paths, whatever the batch.

use std::ops::Range;

use half::f16;

use super::Sink;
use super::blocks::QK_K;
#[cfg(target_arch = "x86_64")]
use super::driver::TileFormat;
#[cfg(target_arch = "x86_64")]
use super::pair::{join16, join32, split};
use super::q8k::Q8KBlock;

/// Weight rows per tile.
pub(crate) const GROUP: usize = 8;
/// Bytes of one ggml `block_q6_K`.
pub(crate) const BLOCK_BYTES: usize = 210;

/// One super-block (256 columns) of 8 interleaved Q6_K weight rows.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Q6Kx8 {
    d: [f16; GROUP],
    /// Pair `p`: bytes `2r`, `2r + 1` are row `r`'s scales of groups `2p`, `2p + 1`.
    scales: [[i8; 2 * GROUP]; 8],
    /// Low nibbles: plane `k % 32` holds chunk `k`, in the low half for `k < 32`.
    ql: [[u8; 4 * GROUP]; 32],
    /// High parts: plane `k % 16`, bits `2(k/16)..+2`, for chunk `k`.
    qh: [[u8; 4 * GROUP]; 16],
}

impl Q6Kx8 {
    const ZERO: Q6Kx8 = Q6Kx8 {
        d: [f16::ZERO; GROUP],
        scales: [[0; 2 * GROUP]; 8],
        ql: [[0; 4 * GROUP]; 32],
        qh: [[0; 4 * GROUP]; 16],
    };

    /// The 256 unsigned quants (0..64) of a ggml block, in order.
    fn quants(b: &[u8]) -> [u8; QK_K] {
        let (ql, qh) = (&b[0..128], &b[128..192]);
        let mut q = [0u8; QK_K];
        for h in 0..2 {
            for l in 0..32 {
                let (a, c, hb) = (ql[64 * h + l], ql[64 * h + 32 + l], qh[32 * h + l]);
                q[128 * h + l] = (a & 0x0f) | ((hb & 3) << 4);
                q[128 * h + 32 + l] = (c & 0x0f) | (((hb >> 2) & 3) << 4);
                q[128 * h + 64 + l] = (a >> 4) | (((hb >> 4) & 3) << 4);
                q[128 * h + 96 + l] = (c >> 4) | (((hb >> 6) & 3) << 4);
            }
        }
        q
    }

    /// Unsigned quant `v` (0..256) of row `r`.
    #[inline(always)]
    fn q(&self, r: usize, v: usize) -> u8 {
        let (k, e) = (v / 4, v % 4);
        let lo = self.ql[k % 32][4 * r + e];
        let lo = if k < 32 { lo & 0x0f } else { lo >> 4 };
        let hi = (self.qh[k % 16][4 * r + e] >> (2 * (k / 16))) & 3;
        lo | (hi << 4)
    }

    fn scale(&self, r: usize, g: usize) -> i8 {
        self.scales[g / 2][2 * r + g % 2]
    }

    fn set_row(&mut self, r: usize, b: &[u8]) {
        self.d[r] = f16::from_le_bytes([b[208], b[209]]);
        for g in 0..16 {
            self.scales[g / 2][2 * r + g % 2] = b[192 + g] as i8;
        }
        let q = Self::quants(b);
        for (v, &q) in q.iter().enumerate() {
            let (k, e) = (v / 4, v % 4);
            let shift = if k < 32 { 0 } else { 4 };
            self.ql[k % 32][4 * r + e] |= (q & 0x0f) << shift;
            self.qh[k % 16][4 * r + e] |= (q >> 4) << (2 * (k / 16));
        }
    }

    /// Row `r` as its ggml block.
    fn row_block(&self, r: usize, out: &mut Vec<u8>) {
        let q: [u8; QK_K] = std::array::from_fn(|v| self.q(r, v));
        let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
        for h in 0..2 {
            for l in 0..32 {
                let v = |o: usize| q[128 * h + o + l];
                ql[64 * h + l] = (v(0) & 0x0f) | ((v(64) & 0x0f) << 4);
                ql[64 * h + 32 + l] = (v(32) & 0x0f) | ((v(96) & 0x0f) << 4);
                qh[32 * h + l] =
                    (v(0) >> 4) | ((v(32) >> 4) << 2) | ((v(64) >> 4) << 4) | ((v(96) >> 4) << 6);
            }
        }
        out.extend_from_slice(&ql);
        out.extend_from_slice(&qh);
        out.extend((0..16).map(|g| self.scale(r, g) as u8));
        out.extend_from_slice(&self.d[r].to_le_bytes());
    }
}

/// A Q6_K matrix in 8-row tiles (see the module documentation).
#[derive(Clone)]
pub struct PackedQ6K {
    tiles: Vec<Q6Kx8>,
}

impl PackedQ6K {
    /// Regroups `rows` rows of ggml blocks (`bytes.len() == rows · cols/256 · 210`,
    /// checked by the caller) into tiles.
    pub(crate) fn pack(bytes: &[u8], rows: usize, cols: usize) -> Self {
        let nb = cols / QK_K;
        let mut tiles = vec![Q6Kx8::ZERO; rows.div_ceil(GROUP) * nb];
        for (row, src) in bytes.chunks_exact(nb * BLOCK_BYTES).enumerate() {
            let (g, r) = (row / GROUP, row % GROUP);
            for (tile, b) in tiles[g * nb..(g + 1) * nb]
                .iter_mut()
                .zip(src.chunks_exact(BLOCK_BYTES))
            {
                tile.set_row(r, b);
            }
        }
        PackedQ6K { tiles }
    }

    /// The ggml bytes of rows `rows`, the inverse of [`Self::pack`].
    pub(crate) fn ggml_bytes(&self, rows: Range<usize>, cols: usize, out: &mut Vec<u8>) {
        let nb = cols / QK_K;
        for row in rows {
            let (g, r) = (row / GROUP, row % GROUP);
            for tile in &self.tiles[g * nb..(g + 1) * nb] {
                tile.row_block(r, out);
            }
        }
    }

    pub(crate) fn tiles(&self) -> &[Q6Kx8] {
        &self.tiles
    }

    pub(crate) fn byte_size(&self) -> usize {
        std::mem::size_of_val(self.tiles.as_slice())
    }
}

/// Portable kernel: per output, the blocked kernel's integers and float steps.
pub(crate) fn run_scalar(
    tiles: &[Q6Kx8],
    nb: usize,
    acts: &[Q8KBlock],
    groups: Range<usize>,
    rows: Range<usize>,
    sink: &mut Sink<'_>,
) {
    for g in groups {
        let gt = &tiles[g * nb..(g + 1) * nb];
        for i in rows.clone() {
            let xa = &acts[i * nb..(i + 1) * nb];
            let mut acc = [0f32; GROUP];
            for (tile, a) in gt.iter().zip(xa) {
                for (r, acc) in acc.iter_mut().enumerate() {
                    let (mut isum, mut msum) = (0i32, 0i32);
                    for s in 0..16 {
                        let mut p = 0i32;
                        for v in 16 * s..16 * s + 16 {
                            p += tile.q(r, v) as i32 * a.qs[v] as i32;
                        }
                        let sc = tile.scale(r, s) as i32;
                        isum += sc * p;
                        msum += 32 * sc * a.bsums[s] as i32;
                    }
                    let d = tile.d[r].to_f32();
                    *acc += a.d * (d * isum as f32 - d * msum as f32);
                }
            }
            sink(g, i, &acc);
        }
    }
}

/// The 256- and 512-bit bodies for [`super::driver`]: runs of up to four activation rows
/// sharing each unpacked weight chunk (six with VNNI: AVX-512 F, VL, BW and VNNI, where
/// the products use `vpdpbusd`, two tile groups at a time on 512-bit vectors).
#[cfg(target_arch = "x86_64")]
impl TileFormat for Q6Kx8 {
    type Act = Q8KBlock;

    #[inline(always)]
    fn group<const VNNI: bool>(
        gt: &[Self],
        acts: &[Q8KBlock],
        nb: usize,
        g: usize,
        rows: Range<usize>,
        sink: &mut Sink<'_>,
    ) {
        let row = |i: usize| &acts[i * nb..(i + 1) * nb];
        // The tail runs take the AVX2 products even on the VNNI path: for one to three
        // rows the scale multiply (`vpmulld`) costs more than VNNI saves (the integers,
        // so the bits, are the same either way).
        tile_runs!(rows, g, row, sink, |a| {
            6 if VNNI => tile::<6, VNNI>(gt, a),
            4 => tile::<4, VNNI>(gt, a),
            3 => tile::<3, false>(gt, a),
            2 => tile::<2, false>(gt, a),
            1 => tile::<1, false>(gt, a),
        });
    }

    #[inline(always)]
    fn group_pair(
        lo: &[Self],
        hi: &[Self],
        acts: &[Q8KBlock],
        nb: usize,
        g: usize,
        rows: Range<usize>,
        sink: &mut Sink<'_>,
    ) {
        let row = |i: usize| &acts[i * nb..(i + 1) * nb];
        let mut pair_sink = |_: usize, i: usize, out: &[f32; 2 * GROUP]| split(sink, g, i, out);
        tile_runs!(rows, g, row, pair_sink, |a| {
            6 => tile_pair::<6>(lo, hi, a),
            4 => tile_pair::<4>(lo, hi, a),
            3 => tile_pair::<3>(lo, hi, a),
            2 => tile_pair::<2>(lo, hi, a),
            1 => tile_pair::<1>(lo, hi, a),
        });
    }
}

/// [`tile`] with VNNI for two tile groups side by side in 512-bit vectors (`lo` in the
/// low half, `hi` in the high): the same integers and float steps per output lane, so
/// the same bits, with each unpacking and each instruction serving 16 rows.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile_pair<const R: usize>(
    lo_tiles: &[Q6Kx8],
    hi_tiles: &[Q6Kx8],
    acts: [&[Q8KBlock]; R],
) -> [[f32; 2 * GROUP]; R] {
    use std::arch::x86_64::*;
    let acts = acts.map(|a| &a[..lo_tiles.len()]);
    let hi_tiles = &hi_tiles[..lo_tiles.len()];
    // SAFETY (every intrinsic below): only inlined into `driver::run_vnni`, compiled with avx2,
    // fma, f16c and avx512f, vl, bw and vnni; each load reads the 16 bytes of one array
    // of a tile.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); R];
        for (b, (tl, th)) in lo_tiles.iter().zip(hi_tiles).enumerate() {
            let a: [&Q8KBlock; R] = std::array::from_fn(|r| &acts[r][b]);
            let mut isum = [_mm512_setzero_si512(); R];
            quarter_pair::<0, R>(tl, th, a, &mut isum);
            quarter_pair::<1, R>(tl, th, a, &mut isum);
            quarter_pair::<2, R>(tl, th, a, &mut isum);
            quarter_pair::<3, R>(tl, th, a, &mut isum);
            let dw = _mm512_cvtph_ps(join16(tl.d.as_ptr().cast(), th.d.as_ptr().cast()));
            let pairs16: [__m512i; 8] = std::array::from_fn(|p| {
                _mm512_cvtepi8_epi16(join16(
                    tl.scales[p].as_ptr().cast(),
                    th.scales[p].as_ptr().cast(),
                ))
            });
            for r in 0..R {
                let mut msum = _mm512_setzero_si512();
                for (p, pair16) in pairs16.iter().enumerate() {
                    let bs = (a[r].bsums[2 * p] as i32 & 0xffff)
                        | ((a[r].bsums[2 * p + 1] as i32) << 16);
                    msum =
                        _mm512_add_epi32(msum, _mm512_madd_epi16(*pair16, _mm512_set1_epi32(bs)));
                }
                let m = _mm512_slli_epi32::<5>(msum);
                let val = _mm512_mul_ps(
                    _mm512_set1_ps(a[r].d),
                    _mm512_sub_ps(
                        _mm512_mul_ps(dw, _mm512_cvtepi32_ps(isum[r])),
                        _mm512_mul_ps(dw, _mm512_cvtepi32_ps(m)),
                    ),
                );
                acc[r] = _mm512_add_ps(acc[r], val);
            }
        }
        let mut out = [[0f32; 2 * GROUP]; R];
        for (o, a) in out.iter_mut().zip(acc) {
            _mm512_storeu_ps(o.as_mut_ptr(), a);
        }
        out
    }
}

/// [`quarter`] with VNNI for two tiles in 512-bit vectors.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn quarter_pair<const S: usize, const R: usize>(
    tl: &Q6Kx8,
    th: &Q6Kx8,
    a: [&Q8KBlock; R],
    isum: &mut [std::arch::x86_64::__m512i; R],
) {
    use std::arch::x86_64::*;
    let word = |a: &Q8KBlock, k: usize| {
        let q = &a.qs[4 * k..4 * k + 4];
        i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8])
    };
    // SAFETY (every intrinsic below): only inlined into `tile_pair`, see there; each
    // load reads the 16 or 32 bytes of one array of a tile.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0f);
        let m2 = _mm512_set1_epi8(0x30);
        for gq in 0..4 {
            let grp = 4 * S + gq;
            let pair = join16(
                tl.scales[grp / 2].as_ptr().cast(),
                th.scales[grp / 2].as_ptr().cast(),
            );
            // The byte shuffle works within each 128-bit half: one pattern for both.
            let sel = if grp.is_multiple_of(2) {
                _mm256_setr_epi8(
                    0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14, 0, 0, 2, 2, 4, 4, 6, 6,
                    8, 8, 10, 10, 12, 12, 14, 14,
                )
            } else {
                _mm256_setr_epi8(
                    1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13, 13, 15, 15, 1, 1, 3, 3, 5, 5, 7, 7,
                    9, 9, 11, 11, 13, 13, 15, 15,
                )
            };
            let sc = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(pair, sel));
            // The duplicated 16-bit scales as 32-bit lanes, sign-extended.
            let sc32 = _mm512_srai_epi32::<16>(sc);
            let mut s32 = [_mm512_setzero_si512(); R];
            for k in 4 * grp..4 * grp + 4 {
                let l = join32(tl.ql[k % 32].as_ptr(), th.ql[k % 32].as_ptr());
                let h = join32(tl.qh[k % 16].as_ptr(), th.qh[k % 16].as_ptr());
                let lo = if S < 2 {
                    _mm512_and_si512(l, m4)
                } else {
                    _mm512_and_si512(_mm512_srli_epi16::<4>(l), m4)
                };
                let hi = match S {
                    0 => _mm512_slli_epi16::<4>(h),
                    1 => _mm512_slli_epi16::<2>(h),
                    2 => h,
                    _ => _mm512_srli_epi16::<2>(h),
                };
                let q = _mm512_or_si512(lo, _mm512_and_si512(hi, m2));
                for r in 0..R {
                    let x = _mm512_set1_epi32(word(a[r], k));
                    s32[r] = _mm512_dpbusd_epi32(s32[r], q, x);
                }
            }
            for r in 0..R {
                isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(s32[r], sc32));
            }
        }
    }
}

/// The 8 × R outputs of one tile group against R activation rows. A `vpmaddubsw` pair
/// sum is at most 2·63·127 = 16002, so two chunks are summed in 16 bits before
/// `vpmaddwd` widens them with the group's scales. With `VNNI`, `vpdpbusd` sums a
/// group's four chunks in 32 bits and one `vpmulld` applies the scales: the same
/// integers.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile<const R: usize, const VNNI: bool>(
    gt: &[Q6Kx8],
    acts: [&[Q8KBlock]; R],
) -> [[f32; GROUP]; R] {
    use std::arch::x86_64::*;
    let acts = acts.map(|a| &a[..gt.len()]);
    // SAFETY (every intrinsic below): only inlined into callers compiled with avx2, fma
    // and f16c (and avx512vl, avx512vnni when `VNNI`); each load reads the 16 bytes of
    // one array of the tile.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        for (b, tile) in gt.iter().enumerate() {
            let a: [&Q8KBlock; R] = std::array::from_fn(|r| &acts[r][b]);
            let mut isum = [_mm256_setzero_si256(); R];
            quarter::<0, R, VNNI>(tile, a, &mut isum);
            quarter::<1, R, VNNI>(tile, a, &mut isum);
            quarter::<2, R, VNNI>(tile, a, &mut isum);
            quarter::<3, R, VNNI>(tile, a, &mut isum);
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(tile.d.as_ptr().cast()));
            for r in 0..R {
                let mut msum = _mm256_setzero_si256();
                for (p, pair) in tile.scales.iter().enumerate() {
                    let pair16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(pair.as_ptr().cast()));
                    let bs = (a[r].bsums[2 * p] as i32 & 0xffff)
                        | ((a[r].bsums[2 * p + 1] as i32) << 16);
                    msum = _mm256_add_epi32(msum, _mm256_madd_epi16(pair16, _mm256_set1_epi32(bs)));
                }
                let m = _mm256_slli_epi32::<5>(msum);
                let val = _mm256_mul_ps(
                    _mm256_set1_ps(a[r].d),
                    _mm256_sub_ps(
                        _mm256_mul_ps(dw, _mm256_cvtepi32_ps(isum[r])),
                        _mm256_mul_ps(dw, _mm256_cvtepi32_ps(m)),
                    ),
                );
                acc[r] = _mm256_add_ps(acc[r], val);
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

/// Chunks `16S..16S + 16` (groups `4S..4S + 4`) of a tile against R activation blocks,
/// added to `isum`: within a quarter the nibble half and the high-part shift are fixed.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn quarter<const S: usize, const R: usize, const VNNI: bool>(
    tile: &Q6Kx8,
    a: [&Q8KBlock; R],
    isum: &mut [std::arch::x86_64::__m256i; R],
) {
    use std::arch::x86_64::*;
    let word = |a: &Q8KBlock, k: usize| {
        let q = &a.qs[4 * k..4 * k + 4];
        i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8])
    };
    // SAFETY (every intrinsic below): only inlined into `tile`, see there; each load
    // reads the 16 or 32 bytes of one array of the tile.
    unsafe {
        for gq in 0..4 {
            let grp = 4 * S + gq;
            let pair = _mm_loadu_si128(tile.scales[grp / 2].as_ptr().cast());
            let sel = if grp.is_multiple_of(2) {
                _mm_setr_epi8(0, 0, 2, 2, 4, 4, 6, 6, 8, 8, 10, 10, 12, 12, 14, 14)
            } else {
                _mm_setr_epi8(1, 1, 3, 3, 5, 5, 7, 7, 9, 9, 11, 11, 13, 13, 15, 15)
            };
            let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(pair, sel));
            if VNNI {
                // The duplicated 16-bit scales as 32-bit lanes, sign-extended.
                let sc32 = _mm256_srai_epi32::<16>(sc);
                let mut s32 = [_mm256_setzero_si256(); R];
                for k in 4 * grp..4 * grp + 4 {
                    let q = chunk::<S>(tile, k);
                    for r in 0..R {
                        let x = _mm256_set1_epi32(word(a[r], k));
                        s32[r] = _mm256_dpbusd_epi32(s32[r], q, x);
                    }
                }
                for r in 0..R {
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(s32[r], sc32));
                }
                continue;
            }
            for two in 0..2 {
                let mut s16 = [_mm256_setzero_si256(); R];
                for k in 4 * grp + 2 * two..4 * grp + 2 * two + 2 {
                    let q = chunk::<S>(tile, k);
                    for r in 0..R {
                        let x = _mm256_set1_epi32(word(a[r], k));
                        s16[r] = _mm256_add_epi16(s16[r], _mm256_maddubs_epi16(q, x));
                    }
                }
                for r in 0..R {
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(s16[r], sc));
                }
            }
        }
    }
}

/// Chunk `k` (in quarter `S`) of a tile: 4 values of each of 8 rows, unsigned 0..64.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn chunk<const S: usize>(tile: &Q6Kx8, k: usize) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    // SAFETY: only inlined into `quarter` (see `tile`); each load reads the 32 bytes of
    // one plane of the tile.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let m2 = _mm256_set1_epi8(0x30);
        let l = _mm256_loadu_si256(tile.ql[k % 32].as_ptr().cast());
        let h = _mm256_loadu_si256(tile.qh[k % 16].as_ptr().cast());
        let lo = if S < 2 {
            _mm256_and_si256(l, m4)
        } else {
            _mm256_and_si256(_mm256_srli_epi16::<4>(l), m4)
        };
        let hi = match S {
            0 => _mm256_slli_epi16::<4>(h),
            1 => _mm256_slli_epi16::<2>(h),
            2 => h,
            _ => _mm256_srli_epi16::<2>(h),
        };
        _mm256_or_si256(lo, _mm256_and_si256(hi, m2))
    }
}
