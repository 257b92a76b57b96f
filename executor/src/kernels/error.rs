//! What matrix construction and multiplication refuse with: one error enum for
//! the whole kernels module, which never panics on bad input.

use super::{KernelPath, QDtype};

/// Errors of matrix construction and multiplication. Nothing in this module panics on
/// bad input; it returns one of these.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("a matrix needs at least one row and one column, got {rows}×{cols}")]
    EmptyMatrix { rows: usize, cols: usize },
    #[error("{dtype:?} weights need a column count divisible by 32, got {cols}")]
    ColsNotMultipleOf32 { dtype: QDtype, cols: usize },
    #[error("{dtype:?} weights need a column count divisible by {block}, got {cols}")]
    ColsNotMultipleOfBlock {
        dtype: QDtype,
        cols: usize,
        block: usize,
    },
    #[error("size of a {rows}×{cols} matrix overflows usize")]
    SizeOverflow { rows: usize, cols: usize },
    #[error("{dtype:?} data for a {rows}×{cols} matrix needs {expected} bytes, got {actual}")]
    ByteLength {
        dtype: QDtype,
        rows: usize,
        cols: usize,
        expected: usize,
        actual: usize,
    },
    #[error("f32 data for a {rows}×{cols} matrix needs {expected} values, got {actual}")]
    ValueCount {
        rows: usize,
        cols: usize,
        expected: usize,
        actual: usize,
    },
    #[error("activations: expected {expected} values (t × cols), got {actual}")]
    InputLength { expected: usize, actual: usize },
    #[error("output: expected {expected} values (t × rows), got {actual}")]
    OutputLength { expected: usize, actual: usize },
    #[error("row {row} out of range for a matrix of {rows} rows")]
    RowOutOfRange { row: usize, rows: usize },
    #[error("unsupported weight type {0}")]
    UnsupportedDtype(String),
    #[error("expected a 2-D tensor, got shape {0:?}")]
    NotAMatrix(Vec<usize>),
    #[error("cannot concatenate matrices: {0}")]
    ConcatMismatch(String),
    #[error("the {0:?} kernel path is not available on this CPU")]
    PathUnavailable(KernelPath),
    #[error("reading tensor data failed: {0}")]
    Tensor(String),
}
