//! Q4_K weights: storage in 8-row interleaved tiles and their product with Q8_K
//! activations.
//!
//! Why their own tiles: Q4_K is the bulk of the files people download (`Q4_K_M` of any
//! model whose width is a multiple of 256). The blocked kernel (`blocked` module) reads
//! the file's bytes and decodes every super-block of 8 rows into bytes before multiplying;
//! here the decoding is done once, at load, into a layout the kernel multiplies directly,
//! like the Q4_1 and Q8_0 tiles: 8 weight rows in the 8 lanes of a register, no
//! horizontal sums.
//!
//! The format is ggml's `block_q4_K`: per 256 weights an f16 `d` and `dmin`, 8 six-bit
//! scales and minimums (one per 32 weights, packed in 12 bytes) and 128 bytes of nibbles
//! (bytes `32j..32j+32` hold weights `64j..64j+32` low and `64j+32..64j+64` high), `w =
//! d·sc·q − dmin·m`. A tile, [`Q4Kx8`], holds one super-block of 8 rows: the 16 float
//! scales; per sub-block the 8 rows' scales, each twice (so one widening gives the
//! multiplier of a `vpmaddubsw` result's 16-bit pairs); per pair of sub-blocks the 8
//! rows' two minimums side by side; and 32 chunks of 32 bytes, chunk `8j + c` holding
//! bytes `32j+4c..32j+4c+4` of each row. 1,248 bytes for 8 source blocks of 1,152.
//!
//! Numerics: per super-block the exact integers `isum = Σ sc·Σ q·a` and `msum = Σ
//! m·bsum` of the blocked kernel and its float steps (`acc += dx·(d·isum − dmin·msum)`,
//! unfused), so every output has the blocked kernel's bits, on both paths, whatever the
//! batch.

use std::ops::Range;

use half::f16;

use super::Sink;
use super::blocks::{QK_K, scale_min_k4};
#[cfg(target_arch = "x86_64")]
use super::driver::TileFormat;
#[cfg(target_arch = "x86_64")]
use super::pair::{join16, join32, split};
use super::q8k::Q8KBlock;

/// Weight rows per tile.
pub(crate) const GROUP: usize = 8;
/// Bytes of one ggml `block_q4_K`.
pub(crate) const BLOCK_BYTES: usize = 144;

/// One super-block (256 columns) of 8 interleaved Q4_K weight rows.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Q4Kx8 {
    d: [f16; GROUP],
    dmin: [f16; GROUP],
    /// Per sub-block `s`: byte `2r` and `2r + 1` are row `r`'s scale.
    scales: [[u8; 2 * GROUP]; 8],
    /// Per pair `p` of sub-blocks: bytes `2r`, `2r + 1` are row `r`'s minimums of
    /// sub-blocks `2p` and `2p + 1`.
    mins: [[u8; 2 * GROUP]; 4],
    /// Chunk `8j + c`: bytes `32j + 4c .. +4` of each row's nibbles, row after row.
    qs: [[u8; 4 * GROUP]; 32],
}

impl Q4Kx8 {
    const ZERO: Q4Kx8 = Q4Kx8 {
        d: [f16::ZERO; GROUP],
        dmin: [f16::ZERO; GROUP],
        scales: [[0; 2 * GROUP]; 8],
        mins: [[0; 2 * GROUP]; 4],
        qs: [[0; 4 * GROUP]; 32],
    };

    fn set_row(&mut self, r: usize, b: &[u8]) {
        self.d[r] = f16::from_le_bytes([b[0], b[1]]);
        self.dmin[r] = f16::from_le_bytes([b[2], b[3]]);
        for s in 0..8 {
            let (sc, m) = scale_min_k4(s, &b[4..16]);
            self.scales[s][2 * r] = sc;
            self.scales[s][2 * r + 1] = sc;
            self.mins[s / 2][2 * r + s % 2] = m;
        }
        for (k, chunk) in self.qs.iter_mut().enumerate() {
            chunk[4 * r..4 * r + 4].copy_from_slice(&b[16 + 4 * k..20 + 4 * k]);
        }
    }

    /// Row `r` as its ggml block.
    fn row_block(&self, r: usize, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.d[r].to_le_bytes());
        out.extend_from_slice(&self.dmin[r].to_le_bytes());
        let sc: [u8; 8] = std::array::from_fn(|s| self.scales[s][2 * r]);
        let m: [u8; 8] = std::array::from_fn(|s| self.mins[s / 2][2 * r + s % 2]);
        let mut packed = [0u8; 12];
        for j in 0..4 {
            packed[j] = sc[j] & 63;
            packed[j + 4] = m[j] & 63;
        }
        for j in 4..8 {
            packed[j + 4] = (sc[j] & 0x0f) | ((m[j] & 0x0f) << 4);
            packed[j - 4] |= (sc[j] >> 4) << 6;
            packed[j] |= (m[j] >> 4) << 6;
        }
        out.extend_from_slice(&packed);
        for chunk in &self.qs {
            out.extend_from_slice(&chunk[4 * r..4 * r + 4]);
        }
    }
}

/// A Q4_K matrix in 8-row tiles (see the module documentation).
#[derive(Clone)]
pub struct PackedQ4K {
    tiles: Vec<Q4Kx8>,
}

impl PackedQ4K {
    /// Regroups `rows` rows of ggml blocks (`bytes.len() == rows · cols/256 · 144`,
    /// checked by the caller) into tiles.
    pub(crate) fn pack(bytes: &[u8], rows: usize, cols: usize) -> Self {
        let nb = cols / QK_K;
        let mut tiles = vec![Q4Kx8::ZERO; rows.div_ceil(GROUP) * nb];
        for (row, src) in bytes.chunks_exact(nb * BLOCK_BYTES).enumerate() {
            let (g, r) = (row / GROUP, row % GROUP);
            for (tile, b) in tiles[g * nb..(g + 1) * nb]
                .iter_mut()
                .zip(src.chunks_exact(BLOCK_BYTES))
            {
                tile.set_row(r, b);
            }
        }
        PackedQ4K { tiles }
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

    pub(crate) fn tiles(&self) -> &[Q4Kx8] {
        &self.tiles
    }

    pub(crate) fn byte_size(&self) -> usize {
        std::mem::size_of_val(self.tiles.as_slice())
    }
}

/// Portable kernel: per output, the blocked kernel's integers and float steps.
pub(crate) fn run_scalar(
    tiles: &[Q4Kx8],
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
                    for s in 0..8 {
                        let (j, half) = (s / 2, s % 2);
                        let mut p = 0i32;
                        for c in 0..8 {
                            for e in 0..4 {
                                let byte = tile.qs[8 * j + c][4 * r + e];
                                let q = if half == 0 { byte & 0x0f } else { byte >> 4 };
                                let a = a.qs[64 * j + 32 * half + 4 * c + e];
                                p += q as i32 * a as i32;
                            }
                        }
                        isum += tile.scales[s][2 * r] as i32 * p;
                        let bsum = a.bsums[2 * s] as i32 + a.bsums[2 * s + 1] as i32;
                        msum += tile.mins[j][2 * r + half] as i32 * bsum;
                    }
                    let (d, dmin) = (tile.d[r].to_f32(), tile.dmin[r].to_f32());
                    *acc += a.d * (d * isum as f32 - dmin * msum as f32);
                }
            }
            sink(g, i, &acc);
        }
    }
}

/// The 256- and 512-bit bodies for [`super::driver`]: runs of up to three activation rows
/// sharing each unpacked weight chunk (six with VNNI: AVX-512 F, VL, BW and VNNI, where
/// the products use `vpdpbusd`, two tile groups at a time on 512-bit vectors).
#[cfg(target_arch = "x86_64")]
impl TileFormat for Q4Kx8 {
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
        // The tail runs take the AVX2 products even on the VNNI path: for one or two
        // rows the scale multiply (`vpmulld`) costs more than VNNI saves (the integers,
        // so the bits, are the same either way).
        tile_runs!(rows, g, row, sink, |a| {
            6 if VNNI => tile::<6, VNNI>(gt, a),
            3 => tile::<3, VNNI>(gt, a),
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
            3 => tile_pair::<3>(lo, hi, a),
            2 => tile_pair::<2>(lo, hi, a),
            1 => tile_pair::<1>(lo, hi, a),
        });
    }
}

/// [`tile`] with VNNI for two tile groups side by side in 512-bit vectors (`lo` in the
/// low half, `hi` in the high): the same integers and the same float steps per output
/// lane, so the same bits, with each unpacking and each instruction serving 16 rows.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile_pair<const R: usize>(
    lo_tiles: &[Q4Kx8],
    hi_tiles: &[Q4Kx8],
    acts: [&[Q8KBlock]; R],
) -> [[f32; 2 * GROUP]; R] {
    use std::arch::x86_64::*;
    let acts = acts.map(|a| &a[..lo_tiles.len()]);
    let hi_tiles = &hi_tiles[..lo_tiles.len()];
    let word = |a: &Q8KBlock, k: usize| {
        let q = &a.qs[4 * k..4 * k + 4];
        i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8])
    };
    // SAFETY (every intrinsic below): this function is only inlined into `driver::run_vnni`,
    // compiled with avx2, fma, f16c and avx512f, vl, bw and vnni; each load reads the 16
    // or 32 bytes of one array of a tile.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0f);
        let low16 = _mm512_set1_epi32(0xffff);
        let mut acc = [_mm512_setzero_ps(); R];
        for (b, (tl, th)) in lo_tiles.iter().zip(hi_tiles).enumerate() {
            let mut isum = [_mm512_setzero_si512(); R];
            for j in 0..4 {
                let mut plo = [_mm512_setzero_si512(); R];
                let mut phi = [_mm512_setzero_si512(); R];
                for c in 0..8 {
                    let w = join32(tl.qs[8 * j + c].as_ptr(), th.qs[8 * j + c].as_ptr());
                    let lo = _mm512_and_si512(w, m4);
                    let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(w), m4);
                    for r in 0..R {
                        let a = &acts[r][b];
                        let alo = _mm512_set1_epi32(word(a, 16 * j + c));
                        let ahi = _mm512_set1_epi32(word(a, 16 * j + 8 + c));
                        plo[r] = _mm512_dpbusd_epi32(plo[r], lo, alo);
                        phi[r] = _mm512_dpbusd_epi32(phi[r], hi, ahi);
                    }
                }
                let slo = _mm512_cvtepu8_epi16(join16(
                    tl.scales[2 * j].as_ptr(),
                    th.scales[2 * j].as_ptr(),
                ));
                let shi = _mm512_cvtepu8_epi16(join16(
                    tl.scales[2 * j + 1].as_ptr(),
                    th.scales[2 * j + 1].as_ptr(),
                ));
                for r in 0..R {
                    // The duplicated 16-bit scales, read as 32-bit lanes, masked.
                    let p = _mm512_add_epi32(
                        _mm512_mullo_epi32(plo[r], _mm512_and_si512(slo, low16)),
                        _mm512_mullo_epi32(phi[r], _mm512_and_si512(shi, low16)),
                    );
                    isum[r] = _mm512_add_epi32(isum[r], p);
                }
            }
            let dw = _mm512_cvtph_ps(join16(tl.d.as_ptr().cast(), th.d.as_ptr().cast()));
            let dmw = _mm512_cvtph_ps(join16(tl.dmin.as_ptr().cast(), th.dmin.as_ptr().cast()));
            let mins: [__m512i; 4] = std::array::from_fn(|p| {
                _mm512_cvtepu8_epi16(join16(tl.mins[p].as_ptr(), th.mins[p].as_ptr()))
            });
            for r in 0..R {
                let a = &acts[r][b];
                let mut msum = _mm512_setzero_si512();
                for (p, mv) in mins.iter().enumerate() {
                    let s = 4 * p;
                    let b0 = a.bsums[s] as i32 + a.bsums[s + 1] as i32;
                    let b1 = a.bsums[s + 2] as i32 + a.bsums[s + 3] as i32;
                    let pair = _mm512_set1_epi32((b0 & 0xffff) | (b1 << 16));
                    msum = _mm512_add_epi32(msum, _mm512_madd_epi16(*mv, pair));
                }
                let val = _mm512_mul_ps(
                    _mm512_set1_ps(a.d),
                    _mm512_sub_ps(
                        _mm512_mul_ps(dw, _mm512_cvtepi32_ps(isum[r])),
                        _mm512_mul_ps(dmw, _mm512_cvtepi32_ps(msum)),
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

/// The 8 × R outputs of one tile group against R activation rows. A `vpmaddubsw` pair
/// sum is at most 2·15·127, eight of them 30480, so each sub-block's products are
/// summed in 16 bits and widened by `vpmaddwd` with the rows' scales. With `VNNI`,
/// `vpdpbusd` sums a sub-block's products in 32 bits and one `vpmulld` applies the
/// scales: the same integers.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn tile<const R: usize, const VNNI: bool>(
    gt: &[Q4Kx8],
    acts: [&[Q8KBlock]; R],
) -> [[f32; GROUP]; R] {
    use std::arch::x86_64::*;
    let acts = acts.map(|a| &a[..gt.len()]);
    let word = |a: &Q8KBlock, k: usize| {
        let q = &a.qs[4 * k..4 * k + 4];
        i32::from_le_bytes([q[0] as u8, q[1] as u8, q[2] as u8, q[3] as u8])
    };
    // SAFETY (every intrinsic below): this function is only inlined into callers compiled
    // with avx2, fma and f16c, and, when `VNNI`, avx512vl and avx512vnni (`driver::run_avx2`,
    // `driver::run_vnni`); each load reads the 16 or 32 bytes of one array of the tile.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let low16 = _mm256_set1_epi32(0xffff);
        let mut acc = [_mm256_setzero_ps(); R];
        for (b, tile) in gt.iter().enumerate() {
            let mut isum = [_mm256_setzero_si256(); R];
            for j in 0..4 {
                let mut plo = [_mm256_setzero_si256(); R];
                let mut phi = [_mm256_setzero_si256(); R];
                for c in 0..8 {
                    let w = _mm256_loadu_si256(tile.qs[8 * j + c].as_ptr().cast());
                    let lo = _mm256_and_si256(w, m4);
                    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(w), m4);
                    for r in 0..R {
                        let a = &acts[r][b];
                        let alo = _mm256_set1_epi32(word(a, 16 * j + c));
                        let ahi = _mm256_set1_epi32(word(a, 16 * j + 8 + c));
                        if VNNI {
                            plo[r] = _mm256_dpbusd_epi32(plo[r], lo, alo);
                            phi[r] = _mm256_dpbusd_epi32(phi[r], hi, ahi);
                        } else {
                            plo[r] = _mm256_add_epi16(plo[r], _mm256_maddubs_epi16(lo, alo));
                            phi[r] = _mm256_add_epi16(phi[r], _mm256_maddubs_epi16(hi, ahi));
                        }
                    }
                }
                let slo = _mm256_cvtepu8_epi16(_mm_loadu_si128(tile.scales[2 * j].as_ptr().cast()));
                let shi =
                    _mm256_cvtepu8_epi16(_mm_loadu_si128(tile.scales[2 * j + 1].as_ptr().cast()));
                for r in 0..R {
                    let p = if VNNI {
                        // The duplicated 16-bit scales, read as 32-bit lanes, masked.
                        _mm256_add_epi32(
                            _mm256_mullo_epi32(plo[r], _mm256_and_si256(slo, low16)),
                            _mm256_mullo_epi32(phi[r], _mm256_and_si256(shi, low16)),
                        )
                    } else {
                        _mm256_add_epi32(
                            _mm256_madd_epi16(plo[r], slo),
                            _mm256_madd_epi16(phi[r], shi),
                        )
                    };
                    isum[r] = _mm256_add_epi32(isum[r], p);
                }
            }
            let dw = _mm256_cvtph_ps(_mm_loadu_si128(tile.d.as_ptr().cast()));
            let dmw = _mm256_cvtph_ps(_mm_loadu_si128(tile.dmin.as_ptr().cast()));
            for r in 0..R {
                let a = &acts[r][b];
                let mut msum = _mm256_setzero_si256();
                for (p, mins) in tile.mins.iter().enumerate() {
                    let s = 4 * p;
                    let b0 = a.bsums[s] as i32 + a.bsums[s + 1] as i32;
                    let b1 = a.bsums[s + 2] as i32 + a.bsums[s + 3] as i32;
                    let pair = _mm256_set1_epi32((b0 & 0xffff) | (b1 << 16));
                    let mv = _mm256_cvtepu8_epi16(_mm_loadu_si128(mins.as_ptr().cast()));
                    msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mv, pair));
                }
                let val = _mm256_mul_ps(
                    _mm256_set1_ps(a.d),
                    _mm256_sub_ps(
                        _mm256_mul_ps(dw, _mm256_cvtepi32_ps(isum[r])),
                        _mm256_mul_ps(dmw, _mm256_cvtepi32_ps(msum)),
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
