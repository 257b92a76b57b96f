//! Model weights in the layout our forward pass wants.
//!
//! Weights stay quantized as stored in the GGUF (Q4_1, Q8_0, ...) and are
//! multiplied by our own kernels. The formats multiplied as stored read the
//! memory-mapped file; the tiled ones are rebuilt from it ([`QMatrix`]). At
//! load, q/k/v are fused into one matrix and gate/up into another when the
//! parts share a tiled storage type, which halves the number of kernel
//! launches per layer without changing any row's arithmetic (parts read from
//! the map stay apart rather than being copied out of it).
//! Quantized files may store the parts in different types (say q and k in
//! Q4_K, v in Q6_K); those stay separate matrices ([`Proj::Split`]) whose
//! products land in the same output columns, so nothing is requantized.
//! [`WeightMode::DequantizedF32`] expands everything to f32; it exists for
//! reference-parity tests.

use crate::error::ModelError;
use crate::kernels::{self, KernelError, QDtype, QMatrix};
use crate::model::config::ModelConfig;
use crate::model::source::TensorSource;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WeightMode {
    /// Keep the file's quantization.
    #[default]
    Native,
    /// Dequantize every matrix to f32 (slow; for parity tests).
    DequantizedF32,
    /// Quantize every matrix stored as F32, F16 or BF16 to this type while
    /// loading (`--quantize`), with ggml's reference quantizer, so a
    /// Hugging Face directory in BF16 is served by the same kernels as a
    /// quantized GGUF file. Matrices already quantized are kept; a matrix
    /// whose rows are not whole blocks of the type falls back to Q8_0 (32
    /// values per block), as `llama-quantize` falls back.
    Quantize(QDtype),
}

/// A projection whose output is several matrices' outputs side by side
/// (q|k|v, gate|up).
pub enum Proj {
    /// One matrix holding every part's rows.
    Fused(QMatrix),
    /// Parts of different storage types, multiplied one by one; part `i`
    /// writes its columns after those of parts `0..i`.
    Split(Vec<QMatrix>),
}

impl Proj {
    /// Fuses `parts` when they share a type and own their storage, else keeps
    /// them apart (fusing parts read from the mapped file would copy them).
    pub fn new(prefix: &str, parts: Vec<QMatrix>) -> Result<Proj, ModelError> {
        let same = parts.windows(2).all(|w| w[0].dtype() == w[1].dtype());
        if !same || parts.iter().any(QMatrix::is_mapped) {
            return Ok(Proj::Split(parts));
        }
        let refs: Vec<&QMatrix> = parts.iter().collect();
        QMatrix::concat_rows(&refs)
            .map(Proj::Fused)
            .map_err(|e| ModelError::BadTensor(prefix.to_string(), e.to_string()))
    }

    /// Output width.
    pub fn rows(&self) -> usize {
        match self {
            Proj::Fused(m) => m.rows(),
            Proj::Split(parts) => parts.iter().map(QMatrix::rows).sum(),
        }
    }

    /// The storage type of the first part.
    pub fn dtype(&self) -> QDtype {
        match self {
            Proj::Fused(m) => m.dtype(),
            Proj::Split(parts) => parts[0].dtype(),
        }
    }

    pub fn byte_size(&self) -> usize {
        match self {
            Proj::Fused(m) => m.byte_size(),
            Proj::Split(parts) => parts.iter().map(QMatrix::byte_size).sum(),
        }
    }

    /// `out = x · Wᵀ` for `t` rows, `out` being `t × self.rows()`; `tmp` is
    /// scratch for split parts.
    pub fn matmul(
        &self,
        x: &[f32],
        t: usize,
        out: &mut [f32],
        tmp: &mut Vec<f32>,
    ) -> Result<(), KernelError> {
        match self {
            Proj::Fused(m) => kernels::matmul(m, x, t, out),
            Proj::Split(parts) => {
                let width = self.rows();
                let mut at = 0;
                for p in parts {
                    let n = p.rows();
                    tmp.clear();
                    tmp.resize(t * n, 0.0);
                    kernels::matmul(p, x, t, tmp)?;
                    for (row, part) in out.chunks_mut(width).zip(tmp.chunks(n)) {
                        row[at..at + n].copy_from_slice(part);
                    }
                    at += n;
                }
                Ok(())
            }
        }
    }
}

pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    /// Columns: q (n_heads*head_dim), then k, then v (n_kv_heads*head_dim each).
    pub qkv: Proj,
    /// q|k|v biases in the same layout (Qwen 2).
    pub qkv_bias: Option<Vec<f32>>,
    /// Per-head RMSNorm weights of q and k (`head_dim` each).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wo: QMatrix,
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    /// Columns: gate (ffn), then up (ffn).
    pub gate_up: Proj,
    pub down: QMatrix,
    pub post_ffn_norm: Option<Vec<f32>>,
}

pub struct ModelWeights {
    pub embed: QMatrix,
    pub layers: Vec<LayerWeights>,
    pub norm: Vec<f32>,
    /// `None` when the output head is tied to the embedding.
    pub output: Option<QMatrix>,
    /// Llama 3's per-pair rope frequency factors (`rope_freqs.weight`).
    pub rope_freqs: Option<Vec<f32>>,
}

impl std::fmt::Debug for ModelWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelWeights")
            .field("layers", &self.layers.len())
            .field("bytes", &self.byte_size())
            .finish()
    }
}

/// Tensors that change the model's arithmetic in ways we do not implement:
/// refused by name rather than ignored.
const UNSUPPORTED_TENSORS: &[(&str, &str)] = &[
    ("rope_factors_long.weight", "LongRoPE long-context factors"),
    (
        "rope_factors_short.weight",
        "LongRoPE short-context factors",
    ),
];

impl ModelWeights {
    /// Every matrix, in load order: the embedding, then per layer q|k|v (or
    /// its parts), gate|up (or its parts), the attention output and down.
    pub fn matrices(&self) -> Vec<&QMatrix> {
        let mut out = vec![&self.embed];
        for l in &self.layers {
            for p in [&l.qkv, &l.gate_up] {
                match p {
                    Proj::Fused(m) => out.push(m),
                    Proj::Split(parts) => out.extend(parts),
                }
            }
            out.push(&l.wo);
            out.push(&l.down);
        }
        out.extend(&self.output);
        out
    }

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
        art: &dyn TensorSource,
        cfg: &ModelConfig,
        mode: WeightMode,
    ) -> Result<Self, ModelError> {
        for (name, what) in UNSUPPORTED_TENSORS {
            if art.has_tensor(name) {
                return Err(ModelError::BadTensor(
                    name.to_string(),
                    format!("{what} are not implemented"),
                ));
            }
        }
        let h = cfg.hidden;
        let (qw, kv, d) = (cfg.q_width(), cfg.kv_width(), cfg.head_dim);
        let embed = matrix(art, "token_embd.weight", None, h, mode)?;
        let vocab = embed.rows();
        let output = if art.has_tensor("output.weight") {
            Some(matrix(art, "output.weight", Some(vocab), h, mode)?)
        } else {
            None
        };
        let rope_freqs = if art.has_tensor("rope_freqs.weight") {
            Some(vector(art, "rope_freqs.weight", cfg.rope_dim / 2)?)
        } else {
            None
        };
        let norm = vector(art, "output_norm.weight", h)?;
        // Not `with_capacity(n_layers)`: the count is the file's claim, and a
        // hostile `block_count` would size an allocation that aborts the
        // process before the first missing `blk.N` tensor is found.
        let mut layers = Vec::new();
        for i in 0..cfg.n_layers {
            let p = format!("blk.{i}");
            let name = |t: &str| format!("{p}.{t}");
            let fused_qkv = name("attn_qkv.weight");
            let qkv = if art.has_tensor(&fused_qkv) {
                Proj::Fused(matrix(art, &fused_qkv, Some(cfg.qkv_width()), h, mode)?)
            } else {
                let q = matrix(art, &name("attn_q.weight"), Some(qw), h, mode)?;
                let k = matrix(art, &name("attn_k.weight"), Some(kv), h, mode)?;
                let v = matrix(art, &name("attn_v.weight"), Some(kv), h, mode)?;
                Proj::new(&p, vec![q, k, v])?
            };
            let qkv_bias = if cfg.qkv_bias {
                let mut b = vector(art, &name("attn_q.bias"), qw)?;
                b.extend(vector(art, &name("attn_k.bias"), kv)?);
                b.extend(vector(art, &name("attn_v.bias"), kv)?);
                Some(b)
            } else {
                None
            };
            let (q_norm, k_norm) = if cfg.qk_norm {
                (
                    Some(vector(art, &name("attn_q_norm.weight"), d)?),
                    Some(vector(art, &name("attn_k_norm.weight"), d)?),
                )
            } else {
                (None, None)
            };
            let gate = name("ffn_gate.weight");
            let gate_up = if art.has_tensor(&gate) {
                let gate = matrix(art, &gate, Some(cfg.ffn), h, mode)?;
                let up = matrix(art, &name("ffn_up.weight"), Some(cfg.ffn), h, mode)?;
                Proj::new(&p, vec![gate, up])?
            } else {
                // Phi-3 stores gate and up stacked in ffn_up, gate first.
                Proj::Fused(matrix(
                    art,
                    &name("ffn_up.weight"),
                    Some(2 * cfg.ffn),
                    h,
                    mode,
                )?)
            };
            let post = |art: &dyn TensorSource, t: &str| -> Result<Option<Vec<f32>>, ModelError> {
                if cfg.post_norms {
                    vector(art, &format!("{p}.{t}"), h).map(Some)
                } else {
                    Ok(None)
                }
            };
            layers.push(LayerWeights {
                attn_norm: vector(art, &name("attn_norm.weight"), h)?,
                qkv,
                qkv_bias,
                q_norm,
                k_norm,
                wo: matrix(art, &name("attn_output.weight"), Some(h), qw, mode)?,
                post_attn_norm: post(art, "post_attention_norm.weight")?,
                ffn_norm: vector(art, &name("ffn_norm.weight"), h)?,
                gate_up,
                down: matrix(art, &name("ffn_down.weight"), Some(h), cfg.ffn, mode)?,
                post_ffn_norm: post(art, "post_ffw_norm.weight")?,
            });
        }
        Ok(ModelWeights {
            embed,
            layers,
            norm,
            output,
            rope_freqs,
        })
    }
}

/// A 2-D weight `[rows, cols]` in the layout `mode` asks for.
fn matrix(
    art: &dyn TensorSource,
    name: &str,
    rows: Option<usize>,
    cols: usize,
    mode: WeightMode,
) -> Result<QMatrix, ModelError> {
    let m = art.matrix(name, rows, cols)?;
    match mode {
        WeightMode::Native => Ok(m),
        WeightMode::DequantizedF32 => Ok(m.dequantize()),
        WeightMode::Quantize(ty) => {
            let float = matches!(m.dtype(), QDtype::F32 | QDtype::F16 | QDtype::BF16);
            let ty = if cols.is_multiple_of(ty.block_values()) {
                ty
            } else {
                QDtype::Q8_0
            };
            if !float || !cols.is_multiple_of(ty.block_values()) {
                return Ok(m);
            }
            crate::quantize::quantize_matrix(&m, ty)
                .map_err(|e| ModelError::BadTensor(name.to_string(), e.to_string()))
        }
    }
}

/// A 1-D weight (norms, biases, rope factors) as f32 values.
fn vector(art: &dyn TensorSource, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
    art.vector(name, len)
}
