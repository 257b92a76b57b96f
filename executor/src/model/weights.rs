//! Model weights in the layout our forward pass wants.
//!
//! Weights stay quantized as stored in the GGUF (Q4_1, Q8_0, ...) and are
//! multiplied by our own kernels. At load, q/k/v are fused into one matrix and
//! gate/up into another, which halves the number of kernel launches per layer
//! without changing any row's arithmetic. [`WeightMode::DequantizedF32`]
//! expands everything to f32; it exists for reference-parity tests.

use crate::error::ModelError;
use crate::kernels::QMatrix;
use crate::model::config::LlamaConfig;
use crate::model::loader::GgufArtifact;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WeightMode {
    /// Keep the file's quantization.
    #[default]
    Native,
    /// Dequantize every matrix to f32 (slow; for parity tests).
    DequantizedF32,
}

pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    /// Rows: q (n_heads*head_dim), then k, then v (n_kv_heads*head_dim each).
    pub qkv: QMatrix,
    pub wo: QMatrix,
    pub ffn_norm: Vec<f32>,
    /// Rows: gate (ffn), then up (ffn).
    pub gate_up: QMatrix,
    pub down: QMatrix,
}

pub struct ModelWeights {
    pub embed: QMatrix,
    pub layers: Vec<LayerWeights>,
    pub norm: Vec<f32>,
    /// `None` when the output head is tied to the embedding.
    pub output: Option<QMatrix>,
}

impl std::fmt::Debug for ModelWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelWeights")
            .field("layers", &self.layers.len())
            .field("bytes", &self.byte_size())
            .finish()
    }
}

impl ModelWeights {
    pub fn lm_head(&self) -> &QMatrix {
        self.output.as_ref().unwrap_or(&self.embed)
    }

    /// Bytes read from memory by one decode step (every matrix once).
    pub fn byte_size(&self) -> usize {
        let layers: usize = self
            .layers
            .iter()
            .map(|l| {
                l.qkv.byte_size() + l.wo.byte_size() + l.gate_up.byte_size() + l.down.byte_size()
            })
            .sum();
        layers + self.lm_head().byte_size()
    }

    pub fn load(
        art: &mut GgufArtifact,
        cfg: &LlamaConfig,
        mode: WeightMode,
    ) -> Result<Self, ModelError> {
        let h = cfg.hidden;
        let kv = cfg.kv_width();
        let embed = matrix(art, "token_embd.weight", None, h, mode)?;
        let vocab = embed.rows();
        let output = if art.has_tensor("output.weight") {
            Some(matrix(art, "output.weight", Some(vocab), h, mode)?)
        } else {
            None
        };
        let norm = vector(art, "output_norm.weight", h)?;
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let p = format!("blk.{i}");
            let q = matrix(art, &format!("{p}.attn_q.weight"), Some(h), h, mode)?;
            let k = matrix(art, &format!("{p}.attn_k.weight"), Some(kv), h, mode)?;
            let v = matrix(art, &format!("{p}.attn_v.weight"), Some(kv), h, mode)?;
            let gate = matrix(art, &format!("{p}.ffn_gate.weight"), Some(cfg.ffn), h, mode)?;
            let up = matrix(art, &format!("{p}.ffn_up.weight"), Some(cfg.ffn), h, mode)?;
            layers.push(LayerWeights {
                attn_norm: vector(art, &format!("{p}.attn_norm.weight"), h)?,
                qkv: fuse(&p, &[&q, &k, &v])?,
                wo: matrix(art, &format!("{p}.attn_output.weight"), Some(h), h, mode)?,
                ffn_norm: vector(art, &format!("{p}.ffn_norm.weight"), h)?,
                gate_up: fuse(&p, &[&gate, &up])?,
                down: matrix(art, &format!("{p}.ffn_down.weight"), Some(h), cfg.ffn, mode)?,
            });
        }
        Ok(ModelWeights {
            embed,
            layers,
            norm,
            output,
        })
    }
}

fn fuse(prefix: &str, parts: &[&QMatrix]) -> Result<QMatrix, ModelError> {
    QMatrix::concat_rows(parts)
        .map_err(|e| ModelError::BadTensor(prefix.to_string(), e.to_string()))
}

/// A 2-D weight `[rows, cols]` (GGUF stores `[cols, rows]`, candle reverses it).
fn matrix(
    art: &mut GgufArtifact,
    name: &str,
    rows: Option<usize>,
    cols: usize,
    mode: WeightMode,
) -> Result<QMatrix, ModelError> {
    let t = art.tensor(name)?;
    let dims = t.shape().dims().to_vec();
    let ok = dims.len() == 2 && dims[1] == cols && rows.is_none_or(|r| dims[0] == r);
    if !ok {
        return Err(ModelError::BadTensorShape {
            name: name.to_string(),
            got: dims,
            expected: vec![rows.unwrap_or(0), cols],
        });
    }
    let m = QMatrix::from_qtensor(&t)
        .map_err(|e| ModelError::BadTensor(name.to_string(), e.to_string()))?;
    Ok(match mode {
        WeightMode::Native => m,
        WeightMode::DequantizedF32 => m.dequantize(),
    })
}

fn vector(art: &mut GgufArtifact, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    let t = art.tensor(name)?;
    if t.shape().elem_count() != len {
        return Err(ModelError::BadTensorShape {
            name: name.to_string(),
            got: t.shape().dims().to_vec(),
            expected: vec![len],
        });
    }
    t.dequantize(&candle_core::Device::Cpu)
        .and_then(|x| x.flatten_all())
        .and_then(|x| x.to_vec1::<f32>())
        .map_err(|e| ModelError::BadTensor(name.to_string(), e.to_string()))
}
