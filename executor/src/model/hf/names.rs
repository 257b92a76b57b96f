//! llama.cpp's tensor names in a Hugging Face checkpoint, and what its
//! converter (`convert_hf_to_gguf.py`) does to each tensor on the way.
//!
//! - Llama (and Mistral) q/k projections: Hugging Face rotates the two
//!   halves of each head (`rotate_half`); llama.cpp's "normal" rope rotates
//!   adjacent pairs, so the converter permutes each head's rows from
//!   `[x0..x(d/2), y0..y(d/2)]` to `[x0, y0, x1, y1, ..]`. We permute the same
//!   way at load and keep one rope for both artifacts: a directory and its
//!   converted file then compute with identical matrices, in identical order.
//! - Gemma's RMSNorm multiplies by `1 + w`; the converter stores `w + 1`, and
//!   so do we (every `*norm.weight`, q/k norms included).
//! - A multimodal Gemma 3 keeps the language model under another prefix.

use crate::error::ModelError;
use crate::model::config::Arch;

use super::config::HfConfig;

/// Prefixes of the decoder's tensors, tried in order.
const PREFIXES: &[&str] = &["model.", "model.language_model.", "language_model.model."];

#[derive(Clone, Debug)]
pub struct Names {
    prefix: &'static str,
    lm_head: String,
    arch: Arch,
    n_heads: usize,
    n_kv_heads: usize,
}

impl Names {
    /// Finds the checkpoint's prefix from where its embedding is.
    pub fn new(hf: &HfConfig, has: impl Fn(&str) -> bool) -> Result<Self, ModelError> {
        let prefix = PREFIXES
            .iter()
            .copied()
            .find(|p| has(&format!("{p}embed_tokens.weight")))
            .ok_or_else(|| {
                ModelError::MissingTensor(
                    "model.embed_tokens.weight (the token embedding, under any known prefix)"
                        .into(),
                )
            })?;
        let lm_head = if prefix == "language_model.model." {
            "language_model.lm_head.weight"
        } else {
            "lm_head.weight"
        };
        Ok(Names {
            prefix,
            lm_head: lm_head.into(),
            arch: hf.config.arch,
            n_heads: hf.config.n_heads,
            n_kv_heads: hf.config.n_kv_heads,
        })
    }

    /// The checkpoint's name for llama.cpp's `gguf` name (a name with no
    /// counterpart maps to itself, and is then missing).
    pub fn hf(&self, gguf: &str) -> String {
        let p = self.prefix;
        match gguf {
            "token_embd.weight" => return format!("{p}embed_tokens.weight"),
            "output_norm.weight" => return format!("{p}norm.weight"),
            "output.weight" => return self.lm_head.clone(),
            _ => {}
        }
        let Some(rest) = gguf.strip_prefix("blk.") else {
            return gguf.to_owned();
        };
        let Some((layer, t)) = rest.split_once('.') else {
            return gguf.to_owned();
        };
        let gemma = self.arch.is_gemma();
        let local = match t {
            "attn_norm.weight" => "input_layernorm.weight",
            "attn_q.weight" => "self_attn.q_proj.weight",
            "attn_k.weight" => "self_attn.k_proj.weight",
            "attn_v.weight" => "self_attn.v_proj.weight",
            "attn_q.bias" => "self_attn.q_proj.bias",
            "attn_k.bias" => "self_attn.k_proj.bias",
            "attn_v.bias" => "self_attn.v_proj.bias",
            "attn_qkv.weight" => "self_attn.qkv_proj.weight",
            "attn_output.weight" => "self_attn.o_proj.weight",
            "attn_q_norm.weight" => "self_attn.q_norm.weight",
            "attn_k_norm.weight" => "self_attn.k_norm.weight",
            "ffn_norm.weight" if gemma => "pre_feedforward_layernorm.weight",
            "ffn_norm.weight" => "post_attention_layernorm.weight",
            "post_attention_norm.weight" => "post_attention_layernorm.weight",
            "post_ffw_norm.weight" => "post_feedforward_layernorm.weight",
            "ffn_gate.weight" => "mlp.gate_proj.weight",
            // Phi-3 keeps gate and up in one matrix, gate first, as GGUF does.
            "ffn_up.weight" if self.arch == Arch::Phi3 => "mlp.gate_up_proj.weight",
            "ffn_up.weight" => "mlp.up_proj.weight",
            "ffn_down.weight" => "mlp.down_proj.weight",
            _ => return gguf.to_owned(),
        };
        format!("{p}layers.{layer}.{local}")
    }

    /// The head count whose rows the converter permutes for tensor `gguf`
    /// (Llama's q and k weights), else `None`.
    pub fn rope_heads(&self, gguf: &str) -> Option<usize> {
        if self.arch != Arch::Llama {
            return None;
        }
        if gguf.ends_with(".attn_q.weight") {
            Some(self.n_heads)
        } else if gguf.ends_with(".attn_k.weight") {
            Some(self.n_kv_heads)
        } else {
            None
        }
    }

    /// Whether the converter adds 1 to tensor `gguf` (Gemma's norms).
    pub fn adds_one(&self, gguf: &str) -> bool {
        self.arch.is_gemma() && gguf.ends_with("norm.weight")
    }
}

/// The rows of a `[rows, cols]` matrix (`bytes` row-major) reordered as
/// llama.cpp's `permute(w, n_head)`: within each head of `d = rows / heads`
/// rows, row `2i + s` of the result is row `s * d/2 + i` of the input.
pub fn permute_rows(bytes: &[u8], rows: usize, heads: usize) -> Result<Vec<u8>, String> {
    if heads == 0 || rows == 0 || !rows.is_multiple_of(heads) || !(rows / heads).is_multiple_of(2) {
        return Err(format!(
            "{rows} rows do not split into {heads} heads of an even size"
        ));
    }
    if !bytes.len().is_multiple_of(rows) {
        return Err(format!("{} bytes are not {rows} equal rows", bytes.len()));
    }
    let row = bytes.len() / rows;
    let d = rows / heads;
    let mut out = Vec::with_capacity(bytes.len());
    for h in 0..heads {
        for i in 0..d / 2 {
            for s in 0..2 {
                let src = h * d + s * (d / 2) + i;
                out.extend_from_slice(&bytes[src * row..(src + 1) * row]);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutation_interleaves_each_heads_halves() {
        // 2 heads of 4 rows, one byte per row.
        let w: Vec<u8> = (0..8).collect();
        assert_eq!(
            permute_rows(&w, 8, 2).unwrap(),
            vec![0, 2, 1, 3, 4, 6, 5, 7]
        );
        assert!(permute_rows(&w, 8, 3).is_err());
        assert!(permute_rows(&w[..7], 8, 2).is_err());
    }
}
