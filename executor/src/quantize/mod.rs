//! Writing ggml's block formats: f32 values in, the exact bytes ggml's reference
//! quantizers produce out.
//!
//! Why: the kernels read every ggml format; this module writes them, so that stoker can
//! requantize a model itself and produce files byte-identical to `llama-quantize`
//! without an importance matrix. `llama-quantize` (`llama_model_quantize` →
//! `ggml_quantize_chunk` → `quantize_q4_K` …) calls the `quantize_row_*_ref` functions of
//! ggml-quants.c whenever no importance matrix is given, and converts to F16/BF16 with
//! `ggml_fp32_to_fp16_row` / `ggml_fp32_to_bf16_row_ref`; those are what is reproduced
//! here, in our own Rust, with ggml's float operations in ggml's order so the bytes are
//! identical (see `float` for the rounding and casting details, `legacy` for the
//! 32-value formats, `kquants` for the K-quants).
//!
//! Every block is quantized independently, so a row may hold any number of blocks, and
//! quantizing a matrix row by row or all at once gives the same bytes (as in ggml).
//!
//! Non-finite input is accepted and gives the bytes ggml writes for it on x86-64 (ggml
//! does not check either); nothing here panics on any input. The exact behaviour per
//! format is described in the submodules.

mod float;
mod kquants;
mod legacy;

use crate::kernels::{BlockType, QDtype, QMatrix};

/// Errors of [`quantize_row`] and [`parse_type`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantizeError {
    #[error("{ty} takes whole blocks of {block} values, got {len}")]
    Length {
        ty: &'static str,
        len: usize,
        block: usize,
    },
    #[error("cannot quantize to {0} (supported: {list})", list = SUPPORTED_TYPES.join(", "))]
    UnsupportedType(String),
    #[error("the quantized matrix: {0}")]
    Matrix(String),
}

/// Every type [`quantize_row`] writes, by ggml's name.
pub const SUPPORTED_TYPES: &[&str] = &[
    "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
    "Q6_K",
];

/// The type with ggml's name `name` (as in GGUF files and `llama-quantize` output):
/// one of [`SUPPORTED_TYPES`], else [`QuantizeError::UnsupportedType`].
pub fn parse_type(name: &str) -> Result<QDtype, QuantizeError> {
    Ok(match name {
        "F32" => QDtype::F32,
        "F16" => QDtype::F16,
        "BF16" => QDtype::BF16,
        "Q8_0" => QDtype::Q8_0,
        "Q4_1" => QDtype::Q4_1,
        "Q4_0" => QDtype::Blocks(BlockType::Q4_0),
        "Q5_0" => QDtype::Blocks(BlockType::Q5_0),
        "Q5_1" => QDtype::Blocks(BlockType::Q5_1),
        "Q2_K" => QDtype::Blocks(BlockType::Q2K),
        "Q3_K" => QDtype::Blocks(BlockType::Q3K),
        "Q4_K" => QDtype::Blocks(BlockType::Q4K),
        "Q5_K" => QDtype::Blocks(BlockType::Q5K),
        "Q6_K" => QDtype::Blocks(BlockType::Q6K),
        other => return Err(QuantizeError::UnsupportedType(other.to_string())),
    })
}

/// Bytes `n` values of `ty` take, after checking `n` is a whole number of blocks.
pub fn quantized_len(ty: QDtype, n: usize) -> Result<usize, QuantizeError> {
    let block = ty.block_values();
    let bad_len = QuantizeError::Length {
        ty: ty.name(),
        len: n,
        block,
    };
    if !n.is_multiple_of(block) {
        return Err(bad_len);
    }
    ty.bytes_for(n).ok_or(bad_len)
}

/// Quantizes `x` (a whole number of `ty` blocks) into ggml's bytes for `ty`, exactly as
/// ggml's reference quantizer does (F32: the little-endian values).
pub fn quantize_row(ty: QDtype, x: &[f32]) -> Result<Vec<u8>, QuantizeError> {
    let mut out = Vec::with_capacity(quantized_len(ty, x.len())?);
    write(ty, x, &mut out);
    Ok(out)
}

/// `m` quantized row by row to `ty` (rows in parallel): the matrix
/// `llama-quantize` would write for these values, ready for the kernels.
pub fn quantize_matrix(m: &QMatrix, ty: QDtype) -> Result<QMatrix, QuantizeError> {
    use rayon::prelude::*;
    let cols = m.cols();
    let row_bytes = quantized_len(ty, cols)?;
    let mut bytes = vec![0u8; row_bytes * m.rows()];
    bytes
        .par_chunks_mut(row_bytes)
        .enumerate()
        .try_for_each_init(
            || (vec![0f32; cols], Vec::with_capacity(row_bytes)),
            |(row, enc), (i, out)| {
                m.row_f32_into(i, row)?;
                enc.clear();
                write(ty, row, enc);
                out.copy_from_slice(enc);
                Ok::<(), crate::kernels::KernelError>(())
            },
        )
        .map_err(|e| QuantizeError::Matrix(e.to_string()))?;
    QMatrix::from_ggml_bytes(ty, &bytes, m.rows(), cols)
        .map_err(|e| QuantizeError::Matrix(e.to_string()))
}

/// Appends the encoding of `x` (length already checked).
fn write(ty: QDtype, x: &[f32], out: &mut Vec<u8>) {
    match ty {
        QDtype::F32 => out.extend(x.iter().flat_map(|v| v.to_le_bytes())),
        QDtype::F16 => out.extend(x.iter().flat_map(|&v| float::fp32_to_fp16(v).to_le_bytes())),
        QDtype::BF16 => out.extend(x.iter().flat_map(|&v| float::fp32_to_bf16(v).to_le_bytes())),
        QDtype::Q4_1 => legacy::q4_1(x, out),
        QDtype::Q8_0 => legacy::q8_0(x, out),
        QDtype::Blocks(b) => match b {
            BlockType::Q4_0 => legacy::q4_0(x, out),
            BlockType::Q5_0 => legacy::q5_0(x, out),
            BlockType::Q5_1 => legacy::q5_1(x, out),
            BlockType::Q2K => kquants::q2_k(x, out),
            BlockType::Q3K => kquants::q3_k(x, out),
            BlockType::Q4K => kquants::q4_k(x, out),
            BlockType::Q5K => kquants::q5_k(x, out),
            BlockType::Q6K => kquants::q6_k(x, out),
        },
    }
}
