//! Building a [`ModelTokenizer`] from a Hugging Face directory's
//! `tokenizer.json` and `tokenizer_config.json`, as published.
//!
//! The `tokenizer.json` is loaded by the `tokenizers` crate as it is (its
//! normalizer, pre-tokenizer, model and decoder are the model's own, so
//! nothing is rebuilt and nothing can drift from the reference); what this
//! module adds is what generation needs beyond ids: which tokens are special
//! (the `added_tokens` marked `special`), the BOS/EOS/padding/unknown tokens
//! (`tokenizer_config.json`, else the ids `config.json` and
//! `generation_config.json` give), and whether BOS/EOS are added to a prompt
//! (`add_bos_token`/`add_eos_token`, else what the post-processor adds to an
//! empty text). Encoding then follows the same rules as for a GGUF file:
//! [`ModelTokenizer::encode_with`] runs the tokenizer without its
//! post-processor and adds BOS and EOS itself.

use std::sync::{Arc, OnceLock};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;
use tokenizers::models::ModelWrapper;

use super::build::piece_bytes;
use super::{ModelTokenizer, Pieces, TokenizerError, TokenizerFamily};

/// Largest `tokenizer_config.json` read (published ones are under 1 MB, most
/// of it the added-tokens table; chat templates are a few KB).
const MAX_CONFIG_BYTES: usize = 16 << 20;

/// Token ids a directory's `config.json` and `generation_config.json` name,
/// used where `tokenizer_config.json` does not name the token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HfSpecialIds {
    pub bos: Option<u32>,
    /// Every end-of-sequence id; the first is the EOS.
    pub eos: Vec<u32>,
    pub pad: Option<u32>,
}

/// What `tokenizer_config.json` says beyond the template.
#[derive(Clone, Debug, Default)]
pub struct HfTokenizerConfig {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub pad_token: Option<String>,
    pub unk_token: Option<String>,
    pub add_bos_token: Option<bool>,
    pub add_eos_token: Option<bool>,
    /// The chat template: a string, or the one named `default` of a list.
    pub chat_template: Option<String>,
}

impl HfTokenizerConfig {
    /// Parses `tokenizer_config.json`. Unknown keys are ignored (the file
    /// carries many for Python classes); a known key of the wrong type is an
    /// error naming it.
    pub fn parse(bytes: &[u8]) -> Result<Self, TokenizerError> {
        let bad = |m: String| TokenizerError::HfFiles(format!("tokenizer_config.json: {m}"));
        if bytes.len() > MAX_CONFIG_BYTES {
            return Err(bad(format!(
                "{} bytes; at most {MAX_CONFIG_BYTES} are read",
                bytes.len()
            )));
        }
        let v: Value = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        let Value::Object(o) = v else {
            return Err(bad("not a JSON object".into()));
        };
        let token = |key: &str| -> Result<Option<String>, TokenizerError> {
            match o.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                // An AddedToken serialized as a dict.
                Some(Value::Object(t)) => match t.get("content") {
                    Some(Value::String(s)) => Ok(Some(s.clone())),
                    _ => Err(bad(format!("`{key}` has no string `content`"))),
                },
                Some(_) => Err(bad(format!("`{key}` must be a string"))),
            }
        };
        let flag = |key: &str| -> Result<Option<bool>, TokenizerError> {
            match o.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Bool(b)) => Ok(Some(*b)),
                Some(_) => Err(bad(format!("`{key}` must be true or false"))),
            }
        };
        let chat_template = match o.get("chat_template") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Array(list)) => {
                let named = |n: &str| {
                    list.iter().find_map(|t| {
                        (t.get("name")?.as_str()? == n)
                            .then(|| t.get("template")?.as_str().map(str::to_owned))
                            .flatten()
                    })
                };
                Some(named("default").ok_or_else(|| {
                    bad("`chat_template` is a list without a template named `default`".into())
                })?)
            }
            Some(_) => return Err(bad("`chat_template` must be a string or a list".into())),
        };
        Ok(HfTokenizerConfig {
            bos_token: token("bos_token")?,
            eos_token: token("eos_token")?,
            pad_token: token("pad_token")?,
            unk_token: token("unk_token")?,
            add_bos_token: flag("add_bos_token")?,
            add_eos_token: flag("add_eos_token")?,
            chat_template,
        })
    }
}

impl ModelTokenizer {
    /// Builds the tokenizer from a `tokenizer.json` and, when the directory has
    /// one, its `tokenizer_config.json`; no ids from `config.json`.
    pub fn from_hf_files(
        tokenizer_json: &[u8],
        tokenizer_config_json: Option<&[u8]>,
    ) -> Result<Self, TokenizerError> {
        let cfg = match tokenizer_config_json {
            Some(b) => HfTokenizerConfig::parse(b)?,
            None => HfTokenizerConfig::default(),
        };
        Self::from_hf_parts(tokenizer_json, &cfg, &HfSpecialIds::default())
    }

    /// Builds the tokenizer from a `tokenizer.json`, the parsed
    /// `tokenizer_config.json` and the ids of the model's configuration.
    pub fn from_hf_parts(
        tokenizer_json: &[u8],
        cfg: &HfTokenizerConfig,
        ids: &HfSpecialIds,
    ) -> Result<Self, TokenizerError> {
        let bad = |m: String| TokenizerError::HfFiles(format!("tokenizer.json: {m}"));
        let inner = Tokenizer::from_bytes(tokenizer_json).map_err(|e| bad(e.to_string()))?;
        let vocab = inner.get_vocab(true);
        let vocab_size = vocab.values().max().map_or(0, |&m| m as usize + 1);
        if vocab_size == 0 {
            return Err(bad("the vocabulary is empty".into()));
        }
        // Ids past the largest the vocabulary uses are refused by `decode`;
        // the table below is dense over 0..vocab_size.
        let mut special = vec![false; vocab_size];
        for (id, t) in inner.get_added_tokens_decoder() {
            if t.special
                && let Some(s) = special.get_mut(id as usize)
            {
                *s = true;
            }
        }
        let lookup = |what: &str, name: &Option<String>| -> Result<Option<u32>, TokenizerError> {
            match name {
                None => Ok(None),
                Some(t) => inner.token_to_id(t).map(Some).ok_or_else(|| {
                    TokenizerError::HfFiles(format!(
                        "tokenizer_config.json names {what} `{t}`, which is not in the vocabulary"
                    ))
                }),
            }
        };
        let in_range = |what: &str, id: u32| -> Result<u32, TokenizerError> {
            if (id as usize) < vocab_size {
                Ok(id)
            } else {
                Err(TokenizerError::HfFiles(format!(
                    "the {what} id {id} is outside the vocabulary of {vocab_size} tokens"
                )))
            }
        };
        let eos = match lookup("the EOS token", &cfg.eos_token)? {
            Some(id) => id,
            None => match ids.eos.first() {
                Some(&id) => in_range("EOS", id)?,
                None => {
                    return Err(TokenizerError::HfFiles(
                        "no end-of-sequence token: tokenizer_config.json has no `eos_token` \
                         and config.json no `eos_token_id`"
                            .into(),
                    ));
                }
            },
        };
        let bos = match lookup("the BOS token", &cfg.bos_token)? {
            Some(id) => Some(id),
            None => ids.bos.map(|id| in_range("BOS", id)).transpose()?,
        };
        let pad = match lookup("the padding token", &cfg.pad_token)? {
            Some(id) => Some(id),
            None => ids.pad.filter(|&id| (id as usize) < vocab_size),
        };
        let unk = lookup("the unknown token", &cfg.unk_token)?;
        let mut extra_stops = Vec::new();
        for &id in &ids.eos {
            extra_stops.push(in_range("EOS", id)?);
        }
        // What the post-processor adds around a text, for files that do not
        // say `add_bos_token` (Llama 3 and Qwen write none).
        let framed = inner
            .encode_fast("", true)
            .map_err(|e| bad(format!("cannot encode: {e}")))?;
        let framed = framed.get_ids();
        let add_bos = cfg
            .add_bos_token
            .unwrap_or_else(|| bos.is_some() && framed.first() == bos.as_ref());
        let add_eos = cfg
            .add_eos_token
            .unwrap_or_else(|| framed.len() > usize::from(add_bos) && framed.last() == Some(&eos));

        let (family, pieces) = match inner.get_model() {
            ModelWrapper::BPE(bpe) if !bpe.byte_fallback => (TokenizerFamily::ByteLevelBpe, None),
            // Byte-fallback BPE and Unigram spell spaces `▁` and bytes `<0xXX>`.
            _ => {
                let bytes = (0..vocab_size as u32)
                    .map(|id| {
                        inner
                            .id_to_token(id)
                            .map_or_else(|| Box::from(&[][..]), |t| piece_bytes(&t))
                    })
                    .collect();
                let pieces = Pieces {
                    bytes,
                    skip: special.clone(),
                    strip_prefix_space: false,
                };
                (TokenizerFamily::SentencePiece, Some(Arc::new(pieces)))
            }
        };
        let json = inner
            .to_string(false)
            .map_err(|e| TokenizerError::Build(format!("cannot serialize: {e}")))?;
        let sha256 = hex::encode(Sha256::digest(json.as_bytes()));
        Ok(ModelTokenizer {
            inner,
            plain: Arc::new(OnceLock::new()),
            grammars: Arc::new(OnceLock::new()),
            pieces,
            family,
            vocab_size,
            special,
            bos,
            eos,
            eot: None,
            pad,
            unk,
            add_bos,
            add_eos,
            pre: "tokenizer.json".to_owned(),
            sha256,
            extra_stops,
            inner_decodes: true,
        })
    }
}

impl ModelTokenizer {
    /// Extends the vocabulary to the `rows` of a padded embedding (Qwen
    /// publishes 151,936 rows for 151,665 tokens), as llama.cpp's converter
    /// pads a GGUF vocabulary: the extra ids are special, decode to nothing,
    /// and are never produced by encoding.
    pub(crate) fn pad_to(&mut self, rows: usize) {
        if rows <= self.vocab_size {
            return;
        }
        self.special.resize(rows, true);
        if let Some(p) = &mut self.pieces {
            let p = Arc::make_mut(p);
            p.bytes.resize(rows, Box::from(&[][..]));
            p.skip.resize(rows, true);
        }
        self.vocab_size = rows;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_tokens_may_be_strings_or_added_token_objects() {
        let c = HfTokenizerConfig::parse(
            br#"{"bos_token": "<s>", "eos_token": {"content": "</s>", "lstrip": false},
                 "add_bos_token": true, "chat_template": [{"name": "tool_use", "template": "T"},
                 {"name": "default", "template": "D"}], "model_max_length": 1e30}"#,
        )
        .unwrap();
        assert_eq!(c.bos_token.as_deref(), Some("<s>"));
        assert_eq!(c.eos_token.as_deref(), Some("</s>"));
        assert_eq!(c.add_bos_token, Some(true));
        assert_eq!(c.chat_template.as_deref(), Some("D"));
    }

    #[test]
    fn malformed_configs_are_typed_errors_naming_the_key() {
        for (json, needle) in [
            (&b"[1]"[..], "object"),
            (b"{", "EOF"),
            (br#"{"add_bos_token": "yes"}"#, "add_bos_token"),
            (br#"{"eos_token": 3}"#, "eos_token"),
            (br#"{"chat_template": [{"name": "x"}]}"#, "default"),
        ] {
            let e = HfTokenizerConfig::parse(json).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }

    #[test]
    fn hostile_tokenizer_json_is_refused_without_panicking() {
        for json in [
            &b""[..],
            b"null",
            b"{}",
            br#"{"model": {"type": "BPE", "vocab": {}, "merges": []}}"#,
        ] {
            assert!(ModelTokenizer::from_hf_files(json, None).is_err());
        }
    }
}
