//! Hyper-parameters of a decoder-only transformer, read from GGUF metadata
//! under llama.cpp's names (`{arch}.embedding_length` and so on).
//!
//! One [`ModelConfig`] describes every architecture we run: the core sizes
//! plus the features that distinguish one family from another (rope style,
//! q/k/v biases, per-head q/k norms, post-norms, GeGLU, soft-capping, sliding
//! windows). The defaults and derivations follow llama.cpp's
//! `llama_model::load_hparams`, so a GGUF file means here what it means there.
//! Everything is validated here so the hot loop can index without checks.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use crate::error::ModelError;

pub use crate::arch::{Arch, SUPPORTED_ARCHITECTURES};

/// How rope pairs the dimensions of a head (llama.cpp's `LLAMA_ROPE_TYPE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// GGML "normal": pairs `(2i, 2i+1)` (Llama; its q/k rows are permuted
    /// by the GGUF converter to match).
    Normal,
    /// GGML "neox": pairs `(i, i + n_rot/2)` (Qwen, Phi-3, Gemma).
    Neox,
}

/// The gate activation of the gated feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU: `silu(gate) * up`.
    Silu,
    /// GeGLU with the tanh approximation of GELU: `gelu_tanh(gate) * up`.
    GeluTanh,
}

/// Rotary embedding parameters of one kind of layer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub base: f32,
    /// Linear position scaling: angles are multiplied by this (`1 / rope.scaling.factor`).
    pub freq_scale: f32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// `general.architecture` as written in the file.
    pub architecture: String,
    pub arch: Arch,
    pub n_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    /// Dimensions per head of q, k and v (`attention.key_length`, which must
    /// equal `attention.value_length`; `hidden / n_heads` when absent).
    pub head_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    /// Rope of full-attention layers.
    pub rope_base: f32,
    pub rope_freq_scale: f32,
    /// Rope of sliding-window layers when it differs (Gemma 3: base 10000, no scaling).
    pub rope_local: Option<RopeParams>,
    /// Leading dimensions of each head that rope rotates (`rope.dimension_count`).
    pub rope_dim: usize,
    pub rope_style: RopeStyle,
    pub rms_eps: f32,
    /// Multiplies `q·k` before the softmax.
    pub attn_scale: f32,
    /// `cap * tanh(score / cap)` on attention scores (Gemma 2).
    pub attn_softcap: Option<f32>,
    /// `cap * tanh(logit / cap)` on the output logits (Gemma 2).
    pub final_softcap: Option<f32>,
    /// Sliding-window layers attend to the last `window` positions, their own
    /// included.
    pub sliding_window: Option<usize>,
    /// Layer `il` slides when `il % pattern < pattern - 1` (llama.cpp's
    /// `set_swa_pattern`): 2 for Gemma 2, 6 for Gemma 3.
    pub swa_pattern: usize,
    pub activation: Activation,
    /// Multiplies the token embeddings (Gemma: `sqrt(hidden)`).
    pub embed_scale: Option<f32>,
    /// `attn_q.bias`, `attn_k.bias`, `attn_v.bias` (Qwen 2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm of q and k before rope (Qwen 3, Gemma 3).
    pub qk_norm: bool,
    /// RMSNorm of the attention and feed-forward outputs before the residual
    /// add (Gemma).
    pub post_norms: bool,
}

impl ModelConfig {
    /// A plain Llama configuration (no metadata file): for tests and benches
    /// that need a KV layout.
    pub fn llama(
        n_layers: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
        ffn: usize,
        context_length: usize,
    ) -> Self {
        ModelConfig {
            architecture: "llama".into(),
            arch: Arch::Llama,
            n_layers,
            hidden: n_heads * head_dim,
            ffn,
            n_heads,
            n_kv_heads,
            head_dim,
            vocab_size: 0,
            context_length,
            rope_base: 10_000.0,
            rope_freq_scale: 1.0,
            rope_local: None,
            rope_dim: head_dim,
            rope_style: RopeStyle::Normal,
            rms_eps: 1e-5,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            attn_softcap: None,
            final_softcap: None,
            sliding_window: None,
            swa_pattern: 0,
            activation: Activation::Silu,
            embed_scale: None,
            qkv_bias: false,
            qk_norm: false,
            post_norms: false,
        }
    }

    pub fn from_metadata(md: &HashMap<String, Value>) -> Result<Self, ModelError> {
        let name = md
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .ok_or_else(|| ModelError::MissingMetadata("general.architecture".into()))?;
        let Some(arch) = Arch::parse(&name) else {
            return Err(ModelError::UnsupportedArchitecture(name));
        };
        let md = Md { md, arch: &name };
        let hidden = md.usize("embedding_length")?;
        let n_heads = md.usize("attention.head_count")?;
        let n_kv_heads = md.opt_usize("attention.head_count_kv")?.unwrap_or(n_heads);
        let n_layers = md.usize("block_count")?;
        let head_dim = md
            .opt_usize("attention.key_length")?
            .unwrap_or_else(|| hidden.checked_div(n_heads).unwrap_or(0));
        let value_dim = md.opt_usize("attention.value_length")?.unwrap_or(head_dim);
        if value_dim != head_dim {
            return Err(ModelError::BadMetadata(
                format!("{name}.attention.value_length"),
                format!(
                    "value length {value_dim} differs from key length {head_dim}; not implemented"
                ),
            ));
        }
        let rope_dim = md.opt_usize("rope.dimension_count")?.unwrap_or(head_dim);

        // Linear rope scaling (llama.cpp reads `rope.scaling.factor` for every
        // architecture); other scaling types change the formula and are refused.
        if let Some(kind) = md.opt_string("rope.scaling.type")?
            && !matches!(kind.as_str(), "none" | "linear")
        {
            return Err(ModelError::BadMetadata(
                format!("{name}.rope.scaling.type"),
                format!("rope scaling `{kind}` is not implemented (none and linear are)"),
            ));
        }
        let factor = md.f32("rope.scaling.factor", 0.0)?;
        let rope_freq_scale = if factor == 0.0 { 1.0 } else { 1.0 / factor };

        let f = Features::of(arch, hidden);
        // Gemma's query scale, as llama.cpp derives it (the file carries no
        // key for it): 1/sqrt(head_dim), except for the 27B models (46 layers
        // in Gemma 2, 62 in Gemma 3), whose query_pre_attn_scalar is
        // hidden / n_heads.
        let is_27b = matches!((arch, n_layers), (Arch::Gemma2, 46) | (Arch::Gemma3, 62));
        let attn_scale = if is_27b {
            1.0 / ((hidden / n_heads.max(1)) as f32).sqrt()
        } else {
            1.0 / (head_dim as f32).sqrt()
        };
        let (sliding_window, swa_pattern) = match arch {
            // llama.cpp's default window for Gemma 2 is 4096.
            Arch::Gemma2 => (
                Some(md.opt_usize("attention.sliding_window")?.unwrap_or(4096)),
                2,
            ),
            Arch::Gemma3 => (Some(md.usize("attention.sliding_window")?), 6),
            // Phi-3's `attention.sliding_window` is ignored, as llama.cpp
            // does (its converters do not describe the pattern reliably).
            _ => (None, 0),
        };
        let (attn_softcap, final_softcap) = if arch == Arch::Gemma2 {
            (
                Some(md.f32("attn_logit_softcapping", 50.0)?),
                Some(md.f32("final_logit_softcapping", 30.0)?),
            )
        } else {
            (None, None)
        };
        let cfg = ModelConfig {
            n_layers,
            ffn: md.usize("feed_forward_length")?,
            context_length: md.usize("context_length")?,
            vocab_size: 0,
            rope_base: md.f32("rope.freq_base", 10_000.0)?,
            rope_freq_scale,
            rope_local: (arch == Arch::Gemma3).then_some(RopeParams {
                base: 10_000.0,
                freq_scale: 1.0,
            }),
            rope_dim,
            rope_style: f.rope_style,
            rms_eps: md.f32("attention.layer_norm_rms_epsilon", 1e-5)?,
            attn_scale,
            attn_softcap,
            final_softcap,
            sliding_window,
            swa_pattern,
            activation: f.activation,
            embed_scale: f.embed_scale,
            qkv_bias: f.qkv_bias,
            qk_norm: f.qk_norm,
            post_norms: f.post_norms,
            head_dim,
            architecture: name.clone(),
            arch,
            hidden,
            n_heads,
            n_kv_heads,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub(crate) fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: &str| Err(ModelError::BadMetadata(self.architecture.clone(), m.into()));
        if self.n_layers == 0 || self.hidden == 0 || self.ffn == 0 {
            return bad("layer count, embedding length and feed-forward length must be positive");
        }
        if self.n_heads == 0 || self.n_kv_heads == 0 || self.head_dim == 0 {
            return bad("head counts and the head dimension must be positive");
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad("kv head count must divide the head count");
        }
        if !self.head_dim.is_multiple_of(2)
            || !self.hidden.is_multiple_of(32)
            || !self.ffn.is_multiple_of(32)
        {
            return bad("dimensions must be multiples of the quantization block");
        }
        if self.head_dim > crate::limits::MAX_HEAD_DIM {
            return bad("head dimension is larger than supported");
        }
        if self.rope_dim == 0 || !self.rope_dim.is_multiple_of(2) || self.rope_dim > self.head_dim {
            return bad(
                "rope dimension count must be even, positive and at most the head dimension",
            );
        }
        if self.context_length == 0 {
            return bad("context length must be positive");
        }
        if self.sliding_window == Some(0) {
            return bad("sliding window must be positive");
        }
        let positive = |x: f32| x.is_finite() && x > 0.0;
        if !positive(self.rms_eps) || !positive(self.rope_base) || !positive(self.rope_freq_scale) {
            return bad("rms epsilon, rope base and rope scaling must be positive");
        }
        if !self.attn_softcap.is_none_or(positive) || !self.final_softcap.is_none_or(positive) {
            return bad("soft-capping values must be positive");
        }
        Ok(())
    }

    /// Whether layer `layer` attends through a sliding window.
    pub fn is_sliding(&self, layer: usize) -> bool {
        self.sliding_window.is_some()
            && self.swa_pattern > 0
            && layer % self.swa_pattern < self.swa_pattern - 1
    }

    /// Width of the q projection output (and of the attention output).
    pub fn q_width(&self) -> usize {
        self.n_heads * self.head_dim
    }

    /// Width of the fused q|k|v projection output.
    pub fn qkv_width(&self) -> usize {
        (self.n_heads + 2 * self.n_kv_heads) * self.head_dim
    }

    pub fn kv_width(&self) -> usize {
        self.n_kv_heads * self.head_dim
    }

    /// Bytes of KV cache one token occupies across all layers (K and V, f32).
    pub fn kv_bytes_per_token(&self) -> usize {
        2 * self.n_layers * self.kv_width() * std::mem::size_of::<f32>()
    }
}

/// What each family does differently, derived from the family alone (neither
/// a GGUF file nor a `config.json` states these): shared by both readers.
pub(crate) struct Features {
    pub rope_style: RopeStyle,
    pub activation: Activation,
    pub embed_scale: Option<f32>,
    pub qkv_bias: bool,
    pub qk_norm: bool,
    pub post_norms: bool,
}

impl Features {
    pub(crate) fn of(arch: Arch, hidden: usize) -> Features {
        let gemma = arch.is_gemma();
        Features {
            // llama.cpp's converter permutes Llama's q/k rows for the
            // interleaved ("normal") rope; the other families rotate halves.
            rope_style: if arch == Arch::Llama {
                RopeStyle::Normal
            } else {
                RopeStyle::Neox
            },
            activation: if gemma {
                Activation::GeluTanh
            } else {
                Activation::Silu
            },
            embed_scale: gemma.then(|| (hidden as f32).sqrt()),
            qkv_bias: arch == Arch::Qwen2,
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Gemma3),
            post_norms: gemma,
        }
    }
}

/// Typed access to `{arch}.{key}` metadata.
struct Md<'a> {
    md: &'a HashMap<String, Value>,
    arch: &'a str,
}

impl Md<'_> {
    fn opt_usize(&self, key: &str) -> Result<Option<usize>, ModelError> {
        let full = format!("{}.{key}", self.arch);
        let Some(v) = self.md.get(&full) else {
            return Ok(None);
        };
        v.to_u32()
            .map(|x| x as usize)
            .or_else(|_| v.to_u64().map(|x| x as usize))
            .or_else(|_| v.to_i32().map(|x| x.max(0) as usize))
            .map(Some)
            .map_err(|_| ModelError::BadMetadata(full, "expected an integer".into()))
    }

    fn usize(&self, key: &str) -> Result<usize, ModelError> {
        self.opt_usize(key)?
            .ok_or_else(|| ModelError::MissingMetadata(format!("{}.{key}", self.arch)))
    }

    fn f32(&self, key: &str, default: f32) -> Result<f32, ModelError> {
        let full = format!("{}.{key}", self.arch);
        match self.md.get(&full) {
            None => Ok(default),
            Some(v) => v
                .to_f32()
                .or_else(|_| v.to_f64().map(|x| x as f32))
                .map_err(|_| ModelError::BadMetadata(full, "expected a float".into())),
        }
    }

    fn opt_string(&self, key: &str) -> Result<Option<String>, ModelError> {
        let full = format!("{}.{key}", self.arch);
        match self.md.get(&full) {
            None => Ok(None),
            Some(v) => v
                .to_string()
                .map(|s| Some(s.clone()))
                .map_err(|_| ModelError::BadMetadata(full, "expected a string".into())),
        }
    }
}
