//! A Hugging Face `config.json` read into the [`ModelConfig`] a GGUF file of
//! the same model would give.
//!
//! Each architecture is mapped the way llama.cpp's `convert_hf_to_gguf.py`
//! maps it (its keys, defaults and derived values), so that a directory and
//! its converted file mean the same model: Mistral is Llama; Gemma's query
//! scale is `query_pre_attn_scalar`; Gemma 3's local layers use
//! `rope_local_base_freq` and its global ones the scaled `rope_theta`;
//! Llama 3's `rope_scaling` becomes the per-pair frequency factors the
//! converter writes as `rope_freqs.weight`. A rope scaling we do not
//! implement is refused by name, as for a GGUF file.

use serde_json::{Map, Value};

use crate::arch::SUPPORTED_HF_ARCHITECTURES;
use crate::error::ModelError;
use crate::model::config::{Arch, Features, ModelConfig, RopeParams};

/// What `config.json` says: the configuration plus what the weights and the
/// tokenizer need from it.
#[derive(Clone, Debug)]
pub struct HfConfig {
    pub config: ModelConfig,
    /// `architectures[0]`, as written.
    pub class: String,
    pub tie_word_embeddings: bool,
    /// Llama 3's rope frequency factors, one per rotated pair.
    pub rope_freqs: Option<Vec<f32>>,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    pub pad_token_id: Option<u32>,
    /// `vocab_size`, checked against the embedding.
    pub vocab_size: Option<usize>,
    /// `torch_dtype` (or `dtype`), for `stoker inspect`.
    pub dtype: Option<String>,
}

/// Typed access to one JSON object's keys, with errors naming the key.
struct Keys<'a> {
    o: &'a Map<String, Value>,
}

fn bad(key: &str, why: impl Into<String>) -> ModelError {
    ModelError::BadMetadata(format!("config.json `{key}`"), why.into())
}

impl Keys<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.o.get(key).filter(|v| !v.is_null())
    }

    fn opt_usize(&self, key: &str) -> Result<Option<usize>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|x| usize::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| bad(key, "expected a non-negative integer")),
        }
    }

    fn usize(&self, key: &str) -> Result<usize, ModelError> {
        self.opt_usize(key)?
            .ok_or_else(|| ModelError::MissingMetadata(format!("config.json `{key}`")))
    }

    fn opt_f32(&self, key: &str) -> Result<Option<f32>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(|x| Some(x as f32))
                .ok_or_else(|| bad(key, "expected a number")),
        }
    }

    fn f32(&self, key: &str, default: f32) -> Result<f32, ModelError> {
        Ok(self.opt_f32(key)?.unwrap_or(default))
    }

    fn opt_str(&self, key: &str) -> Result<Option<&str>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_str()
                .map(Some)
                .ok_or_else(|| bad(key, "expected a string")),
        }
    }

    fn bool(&self, key: &str, default: bool) -> Result<bool, ModelError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| bad(key, "expected true or false")),
        }
    }

    /// An id or a list of ids (`eos_token_id: [1, 2]`).
    fn ids(&self, key: &str) -> Result<Vec<u32>, ModelError> {
        let one = |v: &Value| {
            v.as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| bad(key, "expected a token id or a list of them"))
        };
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a.iter().map(one).collect(),
            Some(v) => Ok(vec![one(v)?]),
        }
    }

    fn object(&self, key: &str) -> Result<Option<Keys<'_>>, ModelError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(o)) => Ok(Some(Keys { o })),
            Some(_) => Err(bad(key, "expected an object")),
        }
    }
}

impl HfConfig {
    /// Parses `config.json`'s text.
    pub fn parse(text: &[u8]) -> Result<Self, ModelError> {
        let v: Value = serde_json::from_slice(text)
            .map_err(|e| ModelError::BadMetadata("config.json".into(), e.to_string()))?;
        let Value::Object(top) = v else {
            return Err(ModelError::BadMetadata(
                "config.json".into(),
                "not a JSON object".into(),
            ));
        };
        let top = Keys { o: &top };
        let class = match top.get("architectures") {
            Some(Value::Array(a)) => a.first().and_then(Value::as_str).map(str::to_owned),
            Some(_) => return Err(bad("architectures", "expected a list of class names")),
            None => None,
        }
        .ok_or_else(|| ModelError::MissingMetadata("config.json `architectures`".into()))?;
        let Some(&(_, arch)) = SUPPORTED_HF_ARCHITECTURES.iter().find(|(c, _)| *c == class) else {
            return Err(ModelError::UnsupportedHfArchitecture(class));
        };
        // A multimodal Gemma 3 keeps the language model's keys in `text_config`.
        let text = match top.object("text_config")? {
            Some(t) if class == "Gemma3ForConditionalGeneration" => t,
            _ => Keys { o: top.o },
        };
        let k = &text;
        let hidden = k.usize("hidden_size")?;
        let n_heads = k.usize("num_attention_heads")?;
        let n_kv_heads = k.opt_usize("num_key_value_heads")?.unwrap_or(n_heads);
        let n_layers = k.usize("num_hidden_layers")?;
        let head_dim = k
            .opt_usize("head_dim")?
            .unwrap_or_else(|| hidden.checked_div(n_heads).unwrap_or(0));
        let partial = k.f32("partial_rotary_factor", 1.0)?;
        let rope_dim = (head_dim as f32 * partial) as usize;
        // transformers 5 nests the rope keys in `rope_parameters`.
        let rope_params = k.object("rope_parameters")?;
        let rope_keys = rope_params.as_ref().unwrap_or(k);
        let rope_base = rope_keys
            .opt_f32("rope_theta")?
            .or(k.opt_f32("rope_theta")?)
            .unwrap_or(10_000.0);
        let scaling = match k.object("rope_scaling")? {
            Some(s) => Some(s),
            None => rope_params,
        };
        let mut rope_freq_scale = 1.0;
        let mut rope_freqs = None;
        if let Some(s) = &scaling {
            let kind = s
                .opt_str("rope_type")?
                .or(s.opt_str("type")?)
                .unwrap_or("default");
            match kind {
                "default" | "none" => {}
                "linear" => {
                    let f = s.f32("factor", 1.0)?;
                    rope_freq_scale = if f == 0.0 { 1.0 } else { 1.0 / f };
                }
                "llama3" => rope_freqs = Some(llama3_factors(s, rope_base, rope_dim)?),
                other => {
                    return Err(bad(
                        "rope_scaling",
                        format!(
                            "rope scaling `{other}` is not implemented (default, linear and llama3 are)"
                        ),
                    ));
                }
            }
        }
        let gemma = arch.is_gemma();
        let attn_scale = match k.opt_f32("query_pre_attn_scalar")? {
            Some(s) if gemma => 1.0 / s.sqrt(),
            _ => 1.0 / (head_dim as f32).sqrt(),
        };
        let (sliding_window, swa_pattern) = match arch {
            Arch::Gemma2 => (Some(k.opt_usize("sliding_window")?.unwrap_or(4096)), 2),
            Arch::Gemma3 => (
                Some(k.usize("sliding_window")?),
                gemma3_pattern(k)?.unwrap_or(6),
            ),
            _ => (None, 0),
        };
        let (attn_softcap, final_softcap) = if arch == Arch::Gemma2 {
            (
                Some(k.f32("attn_logit_softcapping", 50.0)?),
                Some(k.f32("final_logit_softcapping", 30.0)?),
            )
        } else {
            (None, None)
        };
        let rope_local = (arch == Arch::Gemma3).then(|| -> Result<RopeParams, ModelError> {
            Ok(RopeParams {
                base: k.f32("rope_local_base_freq", 10_000.0)?,
                freq_scale: 1.0,
            })
        });
        let name = match arch {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Phi3 => "phi3",
            Arch::Gemma2 => "gemma2",
            Arch::Gemma3 => "gemma3",
        };
        let f = Features::of(arch, hidden);
        let config = ModelConfig {
            architecture: name.to_owned(),
            arch,
            n_layers,
            hidden,
            ffn: k.usize("intermediate_size")?,
            n_heads,
            n_kv_heads,
            head_dim,
            vocab_size: 0,
            context_length: k.usize("max_position_embeddings")?,
            rope_base,
            rope_freq_scale,
            rope_local: rope_local.transpose()?,
            rope_dim,
            rope_style: f.rope_style,
            rms_eps: k.f32("rms_norm_eps", 1e-6)?,
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
        };
        config.validate()?;
        let dtype = match k.opt_str("torch_dtype")? {
            Some(d) => Some(d.to_owned()),
            None => k.opt_str("dtype")?.map(str::to_owned),
        };
        Ok(HfConfig {
            config,
            class,
            // Gemma always ties its output to the embedding.
            tie_word_embeddings: gemma
                || k.bool(
                    "tie_word_embeddings",
                    top.bool("tie_word_embeddings", false)?,
                )?,
            rope_freqs,
            bos_token_id: k.ids("bos_token_id")?.first().copied(),
            eos_token_ids: k.ids("eos_token_id")?,
            pad_token_id: k.ids("pad_token_id")?.first().copied(),
            vocab_size: k.opt_usize("vocab_size")?,
            dtype,
        })
    }
}

/// Gemma 3's sliding pattern: `sliding_window_pattern`, or derived from
/// `layer_types` (transformers 4.53+) as the period of its full layers.
fn gemma3_pattern(k: &Keys<'_>) -> Result<Option<usize>, ModelError> {
    if let Some(p) = k.opt_usize("sliding_window_pattern")? {
        return Ok(Some(p));
    }
    let Some(Value::Array(types)) = k.get("layer_types") else {
        return Ok(None);
    };
    let full: Vec<usize> = types
        .iter()
        .enumerate()
        .filter(|(_, t)| t.as_str() == Some("full_attention"))
        .map(|(i, _)| i)
        .collect();
    let Some(&first) = full.first() else {
        return Ok(None);
    };
    let pattern = first + 1;
    let regular = types.iter().enumerate().all(|(i, t)| {
        let expect = if i % pattern == pattern - 1 {
            "full_attention"
        } else {
            "sliding_attention"
        };
        t.as_str() == Some(expect)
    });
    if !regular {
        return Err(bad(
            "layer_types",
            "sliding and full layers do not alternate with a fixed period",
        ));
    }
    Ok(Some(pattern))
}

/// Llama 3's rope factors per rotated pair, as `convert_hf_to_gguf.py`
/// computes `rope_freqs.weight` (llama.cpp divides each pair's frequency by
/// its factor).
fn llama3_factors(s: &Keys<'_>, base: f32, dim: usize) -> Result<Vec<f32>, ModelError> {
    let factor = f64::from(s.f32("factor", 8.0)?);
    let low = f64::from(s.f32("low_freq_factor", 1.0)?);
    let high = f64::from(s.f32("high_freq_factor", 4.0)?);
    let old = s
        .opt_usize("original_max_position_embeddings")?
        .unwrap_or(8192) as f64;
    if !(factor > 0.0 && low > 0.0 && high > low) {
        return Err(bad(
            "rope_scaling",
            "llama3 scaling needs factor > 0 and high_freq_factor > low_freq_factor > 0",
        ));
    }
    let low_wavelen = old / low;
    let high_wavelen = old / high;
    Ok((0..dim / 2)
        .map(|i| {
            let freq = 1.0 / f64::from(base).powf((2 * i) as f64 / dim as f64);
            let wavelen = 2.0 * std::f64::consts::PI / freq;
            let f = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else {
                let smooth = (old / wavelen - low) / (high - low);
                1.0 / ((1.0 - smooth) / factor + smooth)
            };
            f as f32
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::RopeStyle;

    fn llama(extra: &str) -> String {
        format!(
            r#"{{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "eos_token_id": [2, 7]{extra}}}"#
        )
    }

    #[test]
    fn a_llama_config_maps_to_the_gguf_configuration() {
        let c = HfConfig::parse(llama("").as_bytes()).unwrap();
        assert_eq!(c.config.arch, Arch::Llama);
        assert_eq!(c.config.head_dim, 16);
        assert_eq!(c.config.rope_style, RopeStyle::Normal);
        assert_eq!(c.eos_token_ids, vec![2, 7]);
        assert!(!c.tie_word_embeddings);
    }

    #[test]
    fn llama3_scaling_becomes_frequency_factors() {
        let c = HfConfig::parse(
            llama(
                r#", "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0}, "rope_theta": 500000"#,
            )
            .as_bytes(),
        )
        .unwrap();
        let f = c.rope_freqs.unwrap();
        assert_eq!(f.len(), 8);
        assert_eq!(f[0], 1.0, "the fastest pair is not scaled");
        assert_eq!(f[7], 8.0, "the slowest pair is scaled by the factor");
    }

    #[test]
    fn unknown_and_malformed_configs_are_refused_by_name() {
        for (json, needle) in [
            (
                r#"{"architectures": ["BertModel"]}"#.to_owned(),
                "BertModel",
            ),
            ("[]".to_owned(), "not a JSON object"),
            ("{".to_owned(), "config.json"),
            (
                r#"{"architectures": ["LlamaForCausalLM"]}"#.to_owned(),
                "hidden_size",
            ),
            (
                llama(r#", "rope_scaling": {"rope_type": "yarn", "factor": 4}"#),
                "yarn",
            ),
            (
                llama(r#", "num_key_value_heads": -1"#),
                "num_key_value_heads",
            ),
            (llama(r#", "eos_token_id": "x""#), "eos_token_id"),
        ] {
            let e = HfConfig::parse(json.as_bytes()).unwrap_err().to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
    }

    #[test]
    fn gemma3_pattern_comes_from_layer_types() {
        let o: Value = serde_json::from_str(
            r#"{"layer_types": ["sliding_attention", "sliding_attention", "full_attention",
                "sliding_attention", "sliding_attention", "full_attention"]}"#,
        )
        .unwrap();
        let k = Keys {
            o: o.as_object().unwrap(),
        };
        assert_eq!(gemma3_pattern(&k).unwrap(), Some(3));
    }
}
