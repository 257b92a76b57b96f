//! Hyper-parameters of a Llama-family model, read from GGUF metadata.
//!
//! Only the keys the forward pass needs are read; everything is validated here
//! so the hot loop can index without checks (head sizes divide evenly, the
//! rotary dimension equals the head dimension, and so on).

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;

use crate::error::ModelError;

/// Architectures whose GGUF layout our forward pass implements.
pub const SUPPORTED_ARCHITECTURES: &[&str] = &["llama"];

#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    pub architecture: String,
    pub n_layers: usize,
    pub hidden: usize,
    pub ffn: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub vocab_size: usize,
    pub context_length: usize,
    pub rope_base: f32,
    pub rms_eps: f32,
}

impl LlamaConfig {
    pub fn from_metadata(md: &HashMap<String, Value>) -> Result<Self, ModelError> {
        let arch = md
            .get("general.architecture")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .ok_or_else(|| ModelError::MissingMetadata("general.architecture".into()))?;
        if !SUPPORTED_ARCHITECTURES.contains(&arch.as_str()) {
            return Err(ModelError::UnsupportedArchitecture(arch));
        }
        let get_u = |key: &str| -> Result<usize, ModelError> {
            let full = format!("{arch}.{key}");
            let v = md
                .get(&full)
                .ok_or_else(|| ModelError::MissingMetadata(full.clone()))?;
            v.to_u32()
                .map(|x| x as usize)
                .or_else(|_| v.to_u64().map(|x| x as usize))
                .map_err(|_| ModelError::BadMetadata(full.clone(), "expected an integer".into()))
        };
        let get_f = |key: &str, default: f32| -> Result<f32, ModelError> {
            let full = format!("{arch}.{key}");
            match md.get(&full) {
                None => Ok(default),
                Some(v) => v
                    .to_f32()
                    .map_err(|_| ModelError::BadMetadata(full, "expected a float".into())),
            }
        };
        let hidden = get_u("embedding_length")?;
        let n_heads = get_u("attention.head_count")?;
        let n_kv_heads = get_u("attention.head_count_kv").unwrap_or(n_heads);
        let cfg = LlamaConfig {
            n_layers: get_u("block_count")?,
            ffn: get_u("feed_forward_length")?,
            context_length: get_u("context_length")?,
            vocab_size: 0,
            rope_base: get_f("rope.freq_base", 10_000.0)?,
            rms_eps: get_f("attention.layer_norm_rms_epsilon", 1e-5)?,
            head_dim: hidden.checked_div(n_heads).unwrap_or(0),
            architecture: arch,
            hidden,
            n_heads,
            n_kv_heads,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), ModelError> {
        let bad = |m: &str| Err(ModelError::BadMetadata(self.architecture.clone(), m.into()));
        if self.n_layers == 0 || self.hidden == 0 || self.ffn == 0 {
            return bad("layer count, embedding length and feed-forward length must be positive");
        }
        if self.n_heads == 0 || self.n_kv_heads == 0 || !self.hidden.is_multiple_of(self.n_heads) {
            return bad("head count must divide the embedding length");
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
        if self.context_length == 0 {
            return bad("context length must be positive");
        }
        if self.rms_eps.is_nan()
            || self.rms_eps <= 0.0
            || self.rope_base.is_nan()
            || self.rope_base <= 0.0
        {
            return bad("rms epsilon and rope base must be positive");
        }
        Ok(())
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
