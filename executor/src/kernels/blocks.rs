//! ggml's block formats beyond Q4_1 and Q8_0: Q4_0, Q5_0, Q5_1 (blocks of 32) and the
//! K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (super-blocks of 256), decoded into one shape.
//!
//! Why one shape: the eight formats differ only in how they pack small unsigned integers
//! and their scales. Each block is decoded into [`Unpacked32`] or [`UnpackedK`]: one
//! unsigned byte per weight (at most 63), integer scales and offsets per sub-block, and
//! the block's float scales. A single integer dot-product kernel then serves every format
//! (see the `blocked` module), and the value of a weight is always
//! `d·scale·q − dmin·min` with integers `q`, `scale`, `min`:
//!
//! | format | weight value as ggml dequantizes it | decoded as |
//! |---|---|---|
//! | Q4_0 | `d·(q − 8)`, q in 0..16 | `q`, offset 8 |
//! | Q5_0 | `d·(q − 16)`, q in 0..32 | `q`, offset 16 |
//! | Q5_1 | `d·q + m` | `q`, min `m` |
//! | Q2_K | `d·(sc & 15)·q − dmin·(sc >> 4)` per 16 | scale, min per 16 |
//! | Q3_K | `d·(sc − 32)·(q − 4)` per 16 | scale, min `4·scale`, `dmin = d` |
//! | Q4_K | `d·sc·q − dmin·m` per 32 (6-bit sc, m) | scale, min per 16 (pairs equal) |
//! | Q5_K | as Q4_K with a fifth bit | as Q4_K |
//! | Q6_K | `d·sc·(q − 32)` per 16 (signed 8-bit sc) | scale, min `32·scale`, `dmin = d` |
//!
//! The decoding follows the layouts of ggml's `block_*` structs (ggml-common.h) and is
//! checked against the `gguf` Python package's independent numpy dequantizers (fixtures
//! in `executor/tests/fixtures/`). Every byte pattern decodes to something: there is no
//! invalid block, only non-finite f16 scales, which propagate as NaN like any weight.

use half::f16;

/// Values per K-quant super-block.
pub(crate) const QK_K: usize = 256;
/// Values per legacy block.
pub(crate) const QK32: usize = 32;

/// A block format handled by this module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockType {
    Q4_0,
    Q5_0,
    Q5_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
}

impl BlockType {
    /// Values per block.
    pub const fn block_values(self) -> usize {
        match self {
            BlockType::Q4_0 | BlockType::Q5_0 | BlockType::Q5_1 => QK32,
            _ => QK_K,
        }
    }

    /// Bytes per block (ggml's `sizeof(block_*)`).
    pub const fn block_bytes(self) -> usize {
        match self {
            BlockType::Q4_0 => 18,
            BlockType::Q5_0 => 22,
            BlockType::Q5_1 => 24,
            BlockType::Q2K => 84,
            BlockType::Q3K => 110,
            BlockType::Q4K => 144,
            BlockType::Q5K => 176,
            BlockType::Q6K => 210,
        }
    }

    /// Whether the format is a K-quant (super-blocks of 256, Q8_K activations).
    pub const fn is_k(self) -> bool {
        self.block_values() == QK_K
    }

    /// ggml's name of the type.
    pub const fn name(self) -> &'static str {
        match self {
            BlockType::Q4_0 => "Q4_0",
            BlockType::Q5_0 => "Q5_0",
            BlockType::Q5_1 => "Q5_1",
            BlockType::Q2K => "Q2_K",
            BlockType::Q3K => "Q3_K",
            BlockType::Q4K => "Q4_K",
            BlockType::Q5K => "Q5_K",
            BlockType::Q6K => "Q6_K",
        }
    }
}

/// A decoded block of 32 weights: `w = d·(q − offset)` or, with `m`, `w = d·q + m`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unpacked32 {
    pub q: [u8; QK32],
    pub d: f32,
    /// Integer offset subtracted from every `q` (8 for Q4_0, 16 for Q5_0, else 0).
    pub offset: i32,
    /// Additive minimum (Q5_1), else 0.
    pub m: f32,
}

impl Default for Unpacked32 {
    fn default() -> Self {
        Unpacked32 {
            q: [0; QK32],
            d: 0.0,
            offset: 0,
            m: 0.0,
        }
    }
}

/// A decoded super-block: `w[j] = d·scales[j/16]·q[j] − dmin·mins[j/16]`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UnpackedK {
    pub q: [u8; QK_K],
    pub scales: [i16; 16],
    pub mins: [i16; 16],
    pub d: f32,
    pub dmin: f32,
}

impl Default for UnpackedK {
    fn default() -> Self {
        UnpackedK {
            q: [0; QK_K],
            scales: [0; 16],
            mins: [0; 16],
            d: 0.0,
            dmin: 0.0,
        }
    }
}

#[inline(always)]
fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Sets the scale, offset and minimum of a legacy block (everything but the quants).
pub(crate) fn unpack32_header(ty: BlockType, b: &[u8], out: &mut Unpacked32) {
    out.d = f16_at(b, 0);
    (out.offset, out.m) = match ty {
        BlockType::Q4_0 => (8, 0.0),
        BlockType::Q5_0 => (16, 0.0),
        BlockType::Q5_1 => (0, f16_at(b, 2)),
        _ => unreachable!("unpack32 takes legacy formats only"),
    };
}

/// Decodes one legacy block (`b.len() == ty.block_bytes()`).
pub(crate) fn unpack32(ty: BlockType, b: &[u8], out: &mut Unpacked32) {
    unpack32_header(ty, b, out);
    match ty {
        BlockType::Q4_0 => {
            let qs = &b[2..18];
            for (j, &q) in qs.iter().enumerate() {
                out.q[j] = q & 0x0f;
                out.q[j + 16] = q >> 4;
            }
        }
        _ => {
            let hdr = if ty == BlockType::Q5_0 { 2 } else { 4 };
            let qh = u32::from_le_bytes([b[hdr], b[hdr + 1], b[hdr + 2], b[hdr + 3]]);
            let qs = &b[hdr + 4..hdr + 20];
            for (j, &q) in qs.iter().enumerate() {
                let h0 = ((qh >> j) & 1) as u8;
                let h1 = ((qh >> (j + 16)) & 1) as u8;
                out.q[j] = (q & 0x0f) | (h0 << 4);
                out.q[j + 16] = (q >> 4) | (h1 << 4);
            }
        }
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K/Q5_K block (ggml's
/// `get_scale_min_k4`).
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Sets the float scales and the per-16 integer scales and minimums of a K-quant
/// super-block (everything but the quants).
pub(crate) fn unpack_k_scales(ty: BlockType, b: &[u8], out: &mut UnpackedK) {
    match ty {
        BlockType::Q2K => {
            out.d = f16_at(b, 80);
            out.dmin = f16_at(b, 82);
            for (s, &sc) in b[..16].iter().enumerate() {
                out.scales[s] = (sc & 0x0f) as i16;
                out.mins[s] = (sc >> 4) as i16;
            }
        }
        BlockType::Q3K => {
            let sc = &b[96..108];
            out.d = f16_at(b, 108);
            out.dmin = out.d;
            for k in 0..4 {
                let lo = [sc[k] & 0x0f, sc[4 + k] & 0x0f, sc[k] >> 4, sc[4 + k] >> 4];
                for (g, &lo) in lo.iter().enumerate() {
                    let hi = (sc[8 + k] >> (2 * g)) & 3;
                    let v = (lo | (hi << 4)) as i16 - 32;
                    out.scales[4 * g + k] = v;
                    // ggml: low − (high ? 0 : 4); decoded as (low + 4·high) − 4.
                    out.mins[4 * g + k] = 4 * v;
                }
            }
        }
        BlockType::Q4K | BlockType::Q5K => {
            out.d = f16_at(b, 0);
            out.dmin = f16_at(b, 2);
            let sc = &b[4..16];
            for j in 0..8 {
                let (s, m) = scale_min_k4(j, sc);
                for h in 0..2 {
                    out.scales[2 * j + h] = s as i16;
                    out.mins[2 * j + h] = m as i16;
                }
            }
        }
        BlockType::Q6K => {
            out.d = f16_at(b, 208);
            out.dmin = out.d;
            for s in 0..16 {
                let v = b[192 + s] as i8 as i16;
                out.scales[s] = v;
                out.mins[s] = 32 * v;
            }
        }
        _ => unreachable!("unpack_k takes K-quant formats only"),
    }
}

/// Decodes one K-quant super-block (`b.len() == ty.block_bytes()`).
pub(crate) fn unpack_k(ty: BlockType, b: &[u8], out: &mut UnpackedK) {
    unpack_k_scales(ty, b, out);
    match ty {
        BlockType::Q2K => {
            // scales[16], qs[64], d, dmin
            let qs = &b[16..80];
            for half in 0..2 {
                let q = &qs[32 * half..32 * half + 32];
                for j in 0..4 {
                    let base = 128 * half + 32 * j;
                    for (o, &q) in out.q[base..base + 32].iter_mut().zip(q) {
                        *o = (q >> (2 * j)) & 3;
                    }
                }
            }
        }
        BlockType::Q3K => {
            // hmask[32], qs[64], scales[12], d
            let (hmask, qs) = (&b[0..32], &b[32..96]);
            for half in 0..2 {
                let q = &qs[32 * half..32 * half + 32];
                for j in 0..4 {
                    let base = 128 * half + 32 * j;
                    let bit = 4 * half + j;
                    for l in 0..32 {
                        let low = (q[l] >> (2 * j)) & 3;
                        let high = (hmask[l] >> bit) & 1;
                        out.q[base + l] = low + 4 * high;
                    }
                }
            }
        }
        BlockType::Q4K | BlockType::Q5K => {
            // d, dmin, scales[12], (qh[32] for Q5_K), qs[128]
            let (qh, qs) = if ty == BlockType::Q5K {
                (Some(&b[16..48]), &b[48..176])
            } else {
                (None, &b[16..144])
            };
            for chunk in 0..4 {
                let q = &qs[32 * chunk..32 * chunk + 32];
                let base = 64 * chunk;
                for l in 0..32 {
                    let (mut lo, mut hi) = (q[l] & 0x0f, q[l] >> 4);
                    if let Some(qh) = qh {
                        lo |= ((qh[l] >> (2 * chunk)) & 1) << 4;
                        hi |= ((qh[l] >> (2 * chunk + 1)) & 1) << 4;
                    }
                    out.q[base + l] = lo;
                    out.q[base + 32 + l] = hi;
                }
            }
        }
        BlockType::Q6K => {
            // ql[128], qh[64], scales[16] (i8), d
            let (ql, qh) = (&b[0..128], &b[128..192]);
            for half in 0..2 {
                let (ql, qh) = (
                    &ql[64 * half..64 * half + 64],
                    &qh[32 * half..32 * half + 32],
                );
                let base = 128 * half;
                for l in 0..32 {
                    out.q[base + l] = (ql[l] & 0x0f) | ((qh[l] & 3) << 4);
                    out.q[base + 32 + l] = (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4);
                    out.q[base + 64 + l] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    out.q[base + 96 + l] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
        }
        _ => unreachable!("unpack_k takes K-quant formats only"),
    }
}

/// Dequantizes a row of `ty` blocks into `out` (`out.len()` values) as ggml does.
pub(crate) fn dequantize_row(ty: BlockType, bytes: &[u8], out: &mut [f32]) {
    let (bv, bb) = (ty.block_values(), ty.block_bytes());
    if ty.is_k() {
        let mut u = UnpackedK::default();
        for (b, o) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(bv)) {
            unpack_k(ty, b, &mut u);
            for (j, o) in o.iter_mut().enumerate() {
                let s = j / 16;
                *o = u.d * u.scales[s] as f32 * u.q[j] as f32 - u.dmin * u.mins[s] as f32;
            }
        }
    } else {
        let mut u = Unpacked32::default();
        for (b, o) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(bv)) {
            unpack32(ty, b, &mut u);
            for (j, o) in o.iter_mut().enumerate() {
                *o = (u.q[j] as i32 - u.offset) as f32 * u.d + u.m;
            }
        }
    }
}
