//! The weight storage formats a [`QMatrix`](super::QMatrix) accepts, by ggml's
//! names, with the size arithmetic every constructor checks lengths with.

use candle_core::quantized::GgmlDType;

use super::quant::QK;
use super::{BlockType, KernelError, q4_1, q8_0};

/// Storage formats accepted by [`QMatrix::from_ggml_bytes`](super::QMatrix::from_ggml_bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QDtype {
    /// Little-endian f32 values (stored as is).
    F32,
    /// Little-endian f16 values (widened to f32 on load).
    F16,
    /// ggml `block_q4_1`: 20 bytes per 32 values.
    Q4_1,
    /// ggml `block_q8_0`: 34 bytes per 32 values.
    Q8_0,
    /// Little-endian bfloat16 values (widened to f32 on load).
    BF16,
    /// One of ggml's other block formats, kept as stored ([`BlockType`]).
    Blocks(BlockType),
}

/// Every tensor type [`QMatrix`](super::QMatrix) accepts, by ggml's name (for messages).
pub const SUPPORTED_TENSOR_TYPES: &[&str] = &[
    "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
    "Q6_K",
];

impl QDtype {
    /// Bytes of storage for `n` values (`n` a multiple of the block size for quantized
    /// types), or `None` on overflow.
    pub(crate) fn bytes_for(self, n: usize) -> Option<usize> {
        match self {
            QDtype::F32 => n.checked_mul(4),
            QDtype::F16 | QDtype::BF16 => n.checked_mul(2),
            QDtype::Q4_1 => (n / QK).checked_mul(q4_1::BLOCK_BYTES),
            QDtype::Q8_0 => (n / QK).checked_mul(q8_0::BLOCK_BYTES),
            QDtype::Blocks(b) => (n / b.block_values()).checked_mul(b.block_bytes()),
        }
    }

    /// Values per block: 1 for the float types.
    pub fn block_values(self) -> usize {
        match self {
            QDtype::F32 | QDtype::F16 | QDtype::BF16 => 1,
            QDtype::Q4_1 | QDtype::Q8_0 => QK,
            QDtype::Blocks(b) => b.block_values(),
        }
    }

    /// ggml's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            QDtype::F32 => "F32",
            QDtype::F16 => "F16",
            QDtype::BF16 => "BF16",
            QDtype::Q4_1 => "Q4_1",
            QDtype::Q8_0 => "Q8_0",
            QDtype::Blocks(b) => b.name(),
        }
    }
}

impl TryFrom<GgmlDType> for QDtype {
    type Error = KernelError;
    fn try_from(d: GgmlDType) -> Result<Self, KernelError> {
        match d {
            GgmlDType::F32 => Ok(QDtype::F32),
            GgmlDType::F16 => Ok(QDtype::F16),
            GgmlDType::BF16 => Ok(QDtype::BF16),
            GgmlDType::Q4_1 => Ok(QDtype::Q4_1),
            GgmlDType::Q8_0 => Ok(QDtype::Q8_0),
            GgmlDType::Q4_0 => Ok(QDtype::Blocks(BlockType::Q4_0)),
            GgmlDType::Q5_0 => Ok(QDtype::Blocks(BlockType::Q5_0)),
            GgmlDType::Q5_1 => Ok(QDtype::Blocks(BlockType::Q5_1)),
            GgmlDType::Q2K => Ok(QDtype::Blocks(BlockType::Q2K)),
            GgmlDType::Q3K => Ok(QDtype::Blocks(BlockType::Q3K)),
            GgmlDType::Q4K => Ok(QDtype::Blocks(BlockType::Q4K)),
            GgmlDType::Q5K => Ok(QDtype::Blocks(BlockType::Q5K)),
            GgmlDType::Q6K => Ok(QDtype::Blocks(BlockType::Q6K)),
            other => Err(KernelError::UnsupportedDtype(format!(
                "{other:?} (supported: {})",
                SUPPORTED_TENSOR_TYPES.join(", ")
            ))),
        }
    }
}
