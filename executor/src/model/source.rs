//! Where the weights come from: a GGUF file or a Hugging Face directory,
//! behind one interface that speaks llama.cpp's tensor names.
//!
//! [`ModelWeights::load`](super::weights::ModelWeights::load) asks for
//! `blk.3.attn_q.weight` whatever the artifact; a GGUF file answers from its
//! own table, a directory maps the name to its checkpoint's
//! (`model.layers.3.self_attn.q_proj.weight`) and applies what llama.cpp's
//! converter would have (the rope row order of Llama's q/k, Gemma's `1 + w`
//! norms). So there is one weight loader, and a directory loads into exactly
//! the matrices its converted GGUF file would.

use crate::error::ModelError;
use crate::kernels::{KernelError, QDtype, QMatrix};
use crate::model::loader::GgufArtifact;

/// The tensors of a model artifact, by llama.cpp's names.
pub trait TensorSource {
    fn has_tensor(&self, name: &str) -> bool;

    /// The 2-D weight `name` as `[rows, cols]` (`rows` unchecked when `None`),
    /// in its stored type.
    fn matrix(&self, name: &str, rows: Option<usize>, cols: usize) -> Result<QMatrix, ModelError>;

    /// The 1-D weight `name` (norms, biases, rope factors) of `len` values.
    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError>;
}

impl TensorSource for GgufArtifact {
    fn has_tensor(&self, name: &str) -> bool {
        GgufArtifact::has_tensor(self, name)
    }

    /// GGUF stores `[cols, rows]`; candle's reader reverses it.
    fn matrix(&self, name: &str, rows: Option<usize>, cols: usize) -> Result<QMatrix, ModelError> {
        let t = self.tensor_view(name)?;
        let ok = t.dims.len() == 2 && t.dims[1] == cols && rows.is_none_or(|r| t.dims[0] == r);
        if !ok {
            return Err(ModelError::BadTensorShape {
                name: name.to_string(),
                got: t.dims,
                expected: vec![rows.unwrap_or(0), cols],
            });
        }
        let bad = |e: KernelError| ModelError::BadTensor(name.to_string(), e.to_string());
        let dtype = QDtype::try_from(t.dtype).map_err(bad)?;
        QMatrix::from_ggml_shared(dtype, &self.bytes(), t.range, t.dims[0], cols).map_err(bad)
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        let t = self.tensor_view(name)?;
        if t.dims.iter().product::<usize>() != len || len == 0 {
            return Err(ModelError::BadTensorShape {
                name: name.to_string(),
                got: t.dims,
                expected: vec![len],
            });
        }
        let bad = |e: KernelError| ModelError::BadTensor(name.to_string(), e.to_string());
        let dtype = QDtype::try_from(t.dtype).map_err(bad)?;
        QMatrix::from_ggml_shared(dtype, &self.bytes(), t.range, 1, len)
            .and_then(|m| m.row_f32(0))
            .map_err(bad)
    }
}
