//! The weight matrix, [`QMatrix`]: built from ggml bytes (copied, or borrowed
//! from a memory-mapped file where a format is multiplied as stored), read back
//! as ggml bytes or dequantized rows, and stacked for fused projections. The
//! product itself is in `matmul`.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use candle_core::quantized::QTensor;

use super::quant::QK;
use super::{
    BF16Bits, BlockType, F16Bits, KernelError, PackedBlocks, PackedQ4_0, PackedQ4_1, PackedQ4K,
    PackedQ5_0, PackedQ6K, PackedQ8_0, QDtype, SharedBytes, Stored, blocks, dense,
};

/// The weights of a [`QMatrix`].
#[derive(Clone)]
pub enum QData {
    /// Q4_1 blocks in 8-row tiles.
    Q4_1(PackedQ4_1),
    /// Q8_0 blocks in 8-row tiles.
    Q8_0(PackedQ8_0),
    /// Q4_0 blocks in 8-row tiles.
    Q4_0(PackedQ4_0),
    /// Q5_0 blocks in 8-row tiles.
    Q5_0(PackedQ5_0),
    /// Q4_K super-blocks in 8-row tiles.
    Q4K(PackedQ4K),
    /// Q6_K super-blocks in 8-row tiles.
    Q6K(PackedQ6K),
    /// Other ggml blocks, row-major as stored.
    Blocks(PackedBlocks),
    /// Row-major f32, `rows × cols`.
    F32(Stored<f32>),
    /// Row-major f16 bits as stored in the file, widened on load by the kernel.
    F16(Stored<F16Bits>),
    /// Row-major bf16 bits as stored in the file, widened on load by the kernel.
    BF16(Stored<BF16Bits>),
}

/// A weight matrix of `rows` output features × `cols` input features, as stored in GGUF
/// (`[out, in]`, each row one output feature). Immutable once built.
#[derive(Clone)]
pub struct QMatrix {
    rows: usize,
    cols: usize,
    data: QData,
}

impl fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QMatrix")
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("dtype", &self.dtype())
            .field("bytes", &self.byte_size())
            .finish()
    }
}

impl QMatrix {
    /// Builds a matrix from ggml tensor bytes (`rows` rows of `cols` values, row-major,
    /// blocks of 32 for quantized types). Checks the byte length exactly and, for
    /// quantized types, that `cols` is a multiple of 32.
    pub fn from_ggml_bytes(
        dtype: QDtype,
        bytes: &[u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        check_ggml_len(dtype, bytes.len(), rows, cols)?;
        let data = match dtype {
            QDtype::F32 => QData::F32(collect(bytes, decode_f32)),
            QDtype::F16 => QData::F16(collect(bytes, decode_f16)),
            QDtype::BF16 => QData::BF16(collect(bytes, decode_bf16)),
            QDtype::Q4_1 => QData::Q4_1(PackedQ4_1::pack(bytes, rows, cols)),
            QDtype::Q8_0 => QData::Q8_0(PackedQ8_0::pack(bytes, rows, cols)),
            QDtype::Blocks(BlockType::Q4_0) => QData::Q4_0(PackedQ4_0::pack(bytes, rows, cols)),
            QDtype::Blocks(BlockType::Q5_0) => QData::Q5_0(PackedQ5_0::pack(bytes, rows, cols)),
            QDtype::Blocks(BlockType::Q4K) => QData::Q4K(PackedQ4K::pack(bytes, rows, cols)),
            QDtype::Blocks(BlockType::Q6K) => QData::Q6K(PackedQ6K::pack(bytes, rows, cols)),
            QDtype::Blocks(b) => QData::Blocks(PackedBlocks::pack(b, bytes.to_vec().into(), cols)),
        };
        Ok(QMatrix { rows, cols, data })
    }

    /// Builds a matrix from the ggml bytes `shared[range]` as [`Self::from_ggml_bytes`]
    /// does, but where a format is multiplied as stored (F32, F16, BF16 and the block
    /// formats without tiles) the matrix borrows the bytes instead of copying them: it
    /// then reads the memory-mapped file itself. The tiled formats are rebuilt from the
    /// bytes and own their tiles.
    pub fn from_ggml_shared(
        dtype: QDtype,
        shared: &Arc<SharedBytes>,
        range: Range<usize>,
        rows: usize,
        cols: usize,
    ) -> Result<Self, KernelError> {
        let all = (**shared).as_ref();
        let Some(bytes) = all.get(range.clone()) else {
            return Err(KernelError::ByteLength {
                dtype,
                rows,
                cols,
                expected: range.len(),
                actual: all.len().saturating_sub(range.start),
            });
        };
        check_ggml_len(dtype, bytes.len(), rows, cols)?;
        let data = match dtype {
            QDtype::F32 => QData::F32(Stored::from_shared(shared, range, decode_f32)),
            QDtype::F16 => QData::F16(Stored::from_shared(shared, range, decode_f16)),
            QDtype::BF16 => QData::BF16(Stored::from_shared(shared, range, decode_bf16)),
            QDtype::Blocks(
                b @ (BlockType::Q5_1 | BlockType::Q2K | BlockType::Q3K | BlockType::Q5K),
            ) => QData::Blocks(PackedBlocks::pack(
                b,
                Stored::from_shared(shared, range, |x| x[0]),
                cols,
            )),
            // The tiled formats.
            _ => return Self::from_ggml_bytes(dtype, bytes, rows, cols),
        };
        Ok(QMatrix { rows, cols, data })
    }

    /// Whether any of the weights are read from a memory-mapped file.
    pub fn is_mapped(&self) -> bool {
        match &self.data {
            QData::F32(v) => v.is_mapped(),
            QData::F16(v) => v.is_mapped(),
            QData::BF16(v) => v.is_mapped(),
            QData::Blocks(p) => p.is_mapped(),
            _ => false,
        }
    }

    /// Builds a matrix from a 2-D candle tensor read from GGUF (shape `[rows, cols]`).
    /// Supports every type in [`SUPPORTED_TENSOR_TYPES`](super::SUPPORTED_TENSOR_TYPES);
    /// others (the IQ and ternary types) give [`KernelError::UnsupportedDtype`].
    pub fn from_qtensor(t: &QTensor) -> Result<Self, KernelError> {
        let dims = t.shape().dims();
        let &[rows, cols] = dims else {
            return Err(KernelError::NotAMatrix(dims.to_vec()));
        };
        let dtype = QDtype::try_from(t.dtype())?;
        let bytes = t.data().map_err(|e| KernelError::Tensor(e.to_string()))?;
        Self::from_ggml_bytes(dtype, &bytes, rows, cols)
    }

    /// Builds an f32 matrix from row-major values (`values.len() == rows · cols`; any
    /// `cols` is accepted).
    pub fn from_f32(rows: usize, cols: usize, values: Vec<f32>) -> Result<Self, KernelError> {
        if rows == 0 || cols == 0 {
            return Err(KernelError::EmptyMatrix { rows, cols });
        }
        let expected = rows
            .checked_mul(cols)
            .ok_or(KernelError::SizeOverflow { rows, cols })?;
        if values.len() != expected {
            return Err(KernelError::ValueCount {
                rows,
                cols,
                expected,
                actual: values.len(),
            });
        }
        Ok(QMatrix {
            rows,
            cols,
            data: QData::F32(values.into()),
        })
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The file's format.
    pub fn dtype(&self) -> QDtype {
        match &self.data {
            QData::Q4_1(_) => QDtype::Q4_1,
            QData::Q8_0(_) => QDtype::Q8_0,
            QData::Q4_0(_) => QDtype::Blocks(BlockType::Q4_0),
            QData::Q5_0(_) => QDtype::Blocks(BlockType::Q5_0),
            QData::Q4K(_) => QDtype::Blocks(BlockType::Q4K),
            QData::Q6K(_) => QDtype::Blocks(BlockType::Q6K),
            QData::Blocks(b) => QDtype::Blocks(b.block_type()),
            QData::F32(_) => QDtype::F32,
            QData::F16(_) => QDtype::F16,
            QData::BF16(_) => QDtype::BF16,
        }
    }

    /// The weights.
    pub fn data(&self) -> &QData {
        &self.data
    }

    /// Bytes of weight storage held (including the zero padding of a partial last tile).
    pub fn byte_size(&self) -> usize {
        match &self.data {
            QData::Q4_1(p) => p.byte_size(),
            QData::Q8_0(p) => p.byte_size(),
            QData::Q4_0(p) => p.byte_size(),
            QData::Q5_0(p) => p.byte_size(),
            QData::Q4K(p) => p.byte_size(),
            QData::Q6K(p) => p.byte_size(),
            QData::Blocks(p) => p.byte_size(),
            QData::F32(v) => std::mem::size_of_val(&**v),
            QData::F16(v) => std::mem::size_of_val(&**v),
            QData::BF16(v) => std::mem::size_of_val(&**v),
        }
    }

    /// The weights as ggml bytes in the file's layout (the inverse of
    /// [`QMatrix::from_ggml_bytes`] with [`QMatrix::dtype`]).
    pub fn to_ggml_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match &self.data {
            QData::Q4_1(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Q8_0(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Q4_0(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Q5_0(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Q4K(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Q6K(p) => p.ggml_bytes(0..self.rows, self.cols, &mut out),
            QData::Blocks(p) => p.ggml_bytes(0..self.rows, &mut out),
            QData::F32(v) => out.extend(v.iter().flat_map(|x| x.to_le_bytes())),
            QData::F16(v) => out.extend(v.iter().flat_map(|x| x.0.to_le_bytes())),
            QData::BF16(v) => out.extend(v.iter().flat_map(|x| x.0.to_le_bytes())),
        }
        out
    }

    /// Writes row `row`, dequantized as ggml does, into `out` (`cols` values). Used for
    /// embedding lookups, where `row` is a token id and may come from outside.
    pub fn row_f32_into(&self, row: usize, out: &mut [f32]) -> Result<(), KernelError> {
        if row >= self.rows {
            return Err(KernelError::RowOutOfRange {
                row,
                rows: self.rows,
            });
        }
        if out.len() != self.cols {
            return Err(KernelError::OutputLength {
                expected: self.cols,
                actual: out.len(),
            });
        }
        match &self.data {
            QData::Q4_1(p) => p.dequantize_row(row, self.cols, out),
            QData::Q8_0(p) => p.dequantize_row(row, self.cols, out),
            QData::Q4_0(p) => p.dequantize_row(row, self.cols, out),
            QData::Q5_0(p) => p.dequantize_row(row, self.cols, out),
            QData::Q4K(p) => {
                let mut bytes = Vec::new();
                p.ggml_bytes(row..row + 1, self.cols, &mut bytes);
                blocks::dequantize_row(BlockType::Q4K, &bytes, out);
            }
            QData::Q6K(p) => {
                let mut bytes = Vec::new();
                p.ggml_bytes(row..row + 1, self.cols, &mut bytes);
                blocks::dequantize_row(BlockType::Q6K, &bytes, out);
            }
            QData::Blocks(p) => p.dequantize_row(row, out),
            QData::F32(v) => out.copy_from_slice(&v[row * self.cols..(row + 1) * self.cols]),
            QData::F16(v) => widen_row(&v[row * self.cols..(row + 1) * self.cols], out),
            QData::BF16(v) => widen_row(&v[row * self.cols..(row + 1) * self.cols], out),
        }
        Ok(())
    }

    /// Row `row` dequantized (see [`QMatrix::row_f32_into`]).
    pub fn row_f32(&self, row: usize) -> Result<Vec<f32>, KernelError> {
        let mut out = vec![0f32; self.cols];
        self.row_f32_into(row, &mut out)?;
        Ok(out)
    }

    /// The same matrix with every weight dequantized to f32.
    pub fn dequantize(&self) -> QMatrix {
        let mut values = vec![0f32; self.rows * self.cols];
        for (row, out) in values.chunks_exact_mut(self.cols).enumerate() {
            // Cannot fail: `row < rows` and `out.len() == cols`.
            let _ = self.row_f32_into(row, out);
        }
        QMatrix {
            rows: self.rows,
            cols: self.cols,
            data: QData::F32(values.into()),
        }
    }

    /// Stacks matrices of one format and column count on top of each other (rows of
    /// `parts[0]` first), e.g. to fuse the q, k and v projections into one product.
    /// Quantized blocks are copied, never requantized.
    pub fn concat_rows(parts: &[&QMatrix]) -> Result<QMatrix, KernelError> {
        let Some(first) = parts.first() else {
            return Err(KernelError::EmptyMatrix { rows: 0, cols: 0 });
        };
        let (cols, dtype) = (first.cols, first.dtype());
        for p in parts {
            if p.cols != cols || p.dtype() != dtype {
                return Err(KernelError::ConcatMismatch(format!(
                    "{:?} with {} columns after {:?} with {} columns",
                    p.dtype(),
                    p.cols,
                    dtype,
                    cols
                )));
            }
        }
        let rows = parts
            .iter()
            .try_fold(0usize, |acc, p| acc.checked_add(p.rows))
            .ok_or(KernelError::SizeOverflow {
                rows: usize::MAX,
                cols,
            })?;
        if let QData::F32(_) = first.data {
            let mut values = Vec::with_capacity(rows * cols);
            for p in parts {
                if let QData::F32(v) = &p.data {
                    values.extend_from_slice(v);
                }
            }
            return QMatrix::from_f32(rows, cols, values);
        }
        let mut bytes = Vec::new();
        for p in parts {
            bytes.extend(p.to_ggml_bytes());
        }
        QMatrix::from_ggml_bytes(dtype, &bytes, rows, cols)
    }
}

/// Checks that `len` bytes hold `rows × cols` values of `dtype` and that `cols` is a
/// whole number of blocks.
fn check_ggml_len(dtype: QDtype, len: usize, rows: usize, cols: usize) -> Result<(), KernelError> {
    if rows == 0 || cols == 0 {
        return Err(KernelError::EmptyMatrix { rows, cols });
    }
    let block = dtype.block_values();
    if block == QK && !cols.is_multiple_of(QK) {
        return Err(KernelError::ColsNotMultipleOf32 { dtype, cols });
    }
    if !cols.is_multiple_of(block) {
        return Err(KernelError::ColsNotMultipleOfBlock { dtype, cols, block });
    }
    let expected = rows
        .checked_mul(cols)
        .and_then(|n| dtype.bytes_for(n))
        .ok_or(KernelError::SizeOverflow { rows, cols })?;
    if len != expected {
        return Err(KernelError::ByteLength {
            dtype,
            rows,
            cols,
            expected,
            actual: len,
        });
    }
    Ok(())
}

fn collect<T>(bytes: &[u8], decode: fn(&[u8]) -> T) -> Stored<T> {
    Stored::Owned(
        bytes
            .chunks_exact(std::mem::size_of::<T>())
            .map(decode)
            .collect(),
    )
}

fn decode_f32(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn decode_f16(b: &[u8]) -> F16Bits {
    F16Bits(u16::from_le_bytes([b[0], b[1]]))
}

fn decode_bf16(b: &[u8]) -> BF16Bits {
    BF16Bits(u16::from_le_bytes([b[0], b[1]]))
}

fn widen_row<E: dense::Elem>(src: &[E], out: &mut [f32]) {
    for (o, v) in out.iter_mut().zip(src) {
        *o = v.widen();
    }
}
