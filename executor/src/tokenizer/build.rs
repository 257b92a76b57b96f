//! Building a [`ModelTokenizer`] from GGUF metadata: the vocabulary and merges
//! (parsed, or derived from SentencePiece scores), the normalizer,
//! pre-tokenizer and decoder of each family, the special tokens, and the
//! decoding table of `▁`-escaped vocabularies.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use candle_core::quantized::gguf_file;
use sha2::{Digest, Sha256};
use tokenizers::decoders::DecoderWrapper;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::normalizers::{NormalizerWrapper, Prepend, Replace, Sequence as NormSequence};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

use super::keys::{
    KEY_ADD_BOS, KEY_ADD_EOS, KEY_ADD_SPACE_PREFIX, KEY_BOS, KEY_EOS, KEY_EOT, KEY_MERGES,
    KEY_MODEL, KEY_PAD, KEY_PRE, KEY_TOKEN_TYPE, KEY_TOKENS, KEY_UNK, SPM_SPACE,
    TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNKNOWN, TOKEN_TYPE_USER_DEFINED,
};
use super::metadata::{
    as_integer, get_array, get_bool, get_scores, get_string, get_string_array, get_token_id,
    read_gguf_metadata, type_name,
};
use super::pre_tokenizers::pre_tokenizer_rule;
use super::{ModelTokenizer, Pieces, TokenizerError, TokenizerFamily};

/// The bytes a `▁`-escaped token stands for.
pub(super) fn piece_bytes(token: &str) -> Box<[u8]> {
    if let Some(hex) = token.strip_prefix("<0x").and_then(|t| t.strip_suffix('>'))
        && hex.len() == 2
        && let Ok(b) = u8::from_str_radix(hex, 16)
    {
        return Box::new([b]);
    }
    token
        .replace(SPM_SPACE, " ")
        .into_bytes()
        .into_boxed_slice()
}

/// Splits a GGUF merge `"left right"` the way llama.cpp does: at the first space
/// after the first byte (so a left side may itself start with a space).
fn parse_merge(index: usize, m: &str) -> Result<(String, String), TokenizerError> {
    let malformed = || TokenizerError::MalformedMerge {
        index,
        merge: m.to_owned(),
    };
    let first_len = m.chars().next().ok_or_else(malformed)?.len_utf8();
    let pos = m[first_len..].find(' ').ok_or_else(malformed)? + first_len;
    let (a, b) = (&m[..pos], &m[pos + 1..]);
    if b.is_empty() {
        return Err(malformed());
    }
    Ok((a.to_owned(), b.to_owned()))
}

/// SentencePiece merges derived from scores, as Hugging Face's converter does and
/// as llama.cpp's `llm_tokenizer_spm` behaves: every split of a token into two
/// tokens is a merge, and merges producing a higher-scored token come first.
/// Ties keep vocabulary order.
fn merges_from_scores(tokens: &[&str], vocab: &Vocab, scores: &[f64]) -> Merges {
    let mut ranked: Vec<(f64, usize, String, String)> = Vec::new();
    for (id, tok) in tokens.iter().enumerate() {
        let mut local: Vec<(u32, u32, String, String)> = Vec::new();
        for (k, _) in tok.char_indices().skip(1) {
            let (a, b) = tok.split_at(k);
            if let (Some(&ia), Some(&ib)) = (vocab.get(a), vocab.get(b)) {
                local.push((ia, ib, a.to_owned(), b.to_owned()));
            }
        }
        local.sort_by_key(|&(ia, ib, _, _)| (ia, ib));
        ranked.extend(local.into_iter().map(|(_, _, a, b)| (scores[id], id, a, b)));
    }
    // Stable: within one score, vocabulary order (then the split order above).
    ranked.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    ranked.into_iter().map(|(_, _, a, b)| (a, b)).collect()
}

/// A sequence of isolating regex splits, optionally followed by the byte-level map.
fn regex_pre_tokenizer(
    regexes: &[&str],
    byte_level: bool,
) -> Result<PreTokenizerWrapper, TokenizerError> {
    let mut steps: Vec<PreTokenizerWrapper> = regexes
        .iter()
        .map(|re| {
            Split::new(
                SplitPattern::Regex((*re).to_owned()),
                SplitDelimiterBehavior::Isolated,
                false,
            )
            .map(PreTokenizerWrapper::from)
            .map_err(|e| TokenizerError::Build(format!("pre-tokenizer regex {re:?}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    if byte_level {
        steps.push(ByteLevel::new(false, true, false).into());
    }
    Ok(Sequence::new(steps).into())
}

/// The decoder of `▁`-escaped, byte-fallback vocabularies.
fn spm_decoder(strip_prefix_space: bool) -> Result<DecoderWrapper, TokenizerError> {
    let replace = Replace::new(SPM_SPACE, " ").map_err(|e| TokenizerError::Build(e.to_string()))?;
    let mut steps: Vec<DecoderWrapper> = vec![
        replace.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if strip_prefix_space {
        steps.push(Strip::new(' ', 1, 0).into());
    }
    Ok(DecoderSequence::new(steps).into())
}

impl ModelTokenizer {
    /// Builds the tokenizer from a GGUF file's metadata map.
    ///
    /// Required keys: `tokenizer.ggml.model` (one of
    /// [`SUPPORTED_MODELS`](super::SUPPORTED_MODELS)), `tokenizer.ggml.tokens`,
    /// `tokenizer.ggml.eos_token_id`; for `gpt2` also `tokenizer.ggml.pre` (one of
    /// [`supported_pre_tokenizers`](super::supported_pre_tokenizers)) and
    /// `tokenizer.ggml.merges`; for `llama` `tokenizer.ggml.scores`; for `gemma4`
    /// the merges. Optional: `tokenizer.ggml.token_type` (tokens of type 2, 3 or 4
    /// become special tokens, matched verbatim in text), the BOS, EOT, padding and
    /// unknown token ids, `add_bos_token`, `add_eos_token` and (SentencePiece)
    /// `add_space_prefix`, with llama.cpp's defaults.
    pub fn from_gguf_metadata(
        md: &HashMap<String, gguf_file::Value>,
    ) -> Result<Self, TokenizerError> {
        let model = get_string(md, KEY_MODEL)?.ok_or(TokenizerError::MissingKey(KEY_MODEL))?;
        let family = match model {
            "gpt2" => TokenizerFamily::ByteLevelBpe,
            "llama" => TokenizerFamily::SentencePiece,
            "gemma4" => TokenizerFamily::Gemma4,
            other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
        };
        let pre_key = get_string(md, KEY_PRE)?;
        let (pre, rule) = match family {
            TokenizerFamily::ByteLevelBpe => {
                // llama.cpp falls back to a generic regex (and warns that quality
                // degrades) when the key is absent; a missing key is refused here.
                let pre = pre_key.ok_or(TokenizerError::MissingKey(KEY_PRE))?;
                let rule = pre_tokenizer_rule(pre)
                    .ok_or_else(|| TokenizerError::UnsupportedPreTokenizer(pre.to_owned()))?;
                (pre.to_owned(), Some(rule))
            }
            // SentencePiece has no pre-tokenizer; llama.cpp ignores the key.
            TokenizerFamily::SentencePiece => (pre_key.unwrap_or("default").to_owned(), None),
            TokenizerFamily::Gemma4 => ("gemma4".to_owned(), None),
        };

        let tokens =
            get_string_array(md, KEY_TOKENS)?.ok_or(TokenizerError::MissingKey(KEY_TOKENS))?;
        let vocab_size = tokens.len();

        let types: Vec<i64> = match get_array(md, KEY_TOKEN_TYPE)? {
            None => vec![1; vocab_size],
            Some(types) => {
                if types.len() != vocab_size {
                    return Err(TokenizerError::LengthMismatch {
                        key: KEY_TOKEN_TYPE,
                        expected: vocab_size,
                        found: types.len(),
                    });
                }
                types
                    .iter()
                    .map(|v| {
                        as_integer(v).ok_or_else(|| TokenizerError::WrongType {
                            key: KEY_TOKEN_TYPE,
                            expected: "an array of integers",
                            found: format!("an array holding {}", type_name(v)),
                        })
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        let special: Vec<bool> = types
            .iter()
            .map(|&t| {
                t == TOKEN_TYPE_UNKNOWN || t == TOKEN_TYPE_CONTROL || t == TOKEN_TYPE_USER_DEFINED
            })
            .collect();

        let eos =
            get_token_id(md, KEY_EOS, vocab_size)?.ok_or(TokenizerError::MissingKey(KEY_EOS))?;
        let bos = get_token_id(md, KEY_BOS, vocab_size)?;
        let eot = get_token_id(md, KEY_EOT, vocab_size)?;
        let pad = get_token_id(md, KEY_PAD, vocab_size)?;
        let unk = get_token_id(md, KEY_UNK, vocab_size)?;
        // llama.cpp's defaults: SentencePiece and the Llama 3 / Tekken pre-tokenizers
        // add BOS; Gemma 4 always does.
        let default_add_bos = match family {
            TokenizerFamily::SentencePiece | TokenizerFamily::Gemma4 => true,
            TokenizerFamily::ByteLevelBpe => rule.is_some_and(|r| r.ignore_merges),
        };
        let add_bos = family == TokenizerFamily::Gemma4
            || get_bool(md, KEY_ADD_BOS)?.unwrap_or(default_add_bos);
        let add_eos = get_bool(md, KEY_ADD_EOS)?.unwrap_or(false);
        let add_space_prefix = get_bool(md, KEY_ADD_SPACE_PREFIX)?.unwrap_or(true);

        let mut vocab = Vocab::default();
        vocab.reserve(vocab_size);
        for (id, tok) in tokens.iter().enumerate() {
            let id = u32::try_from(id)
                .map_err(|_| TokenizerError::Build("vocabulary too large".into()))?;
            if let Some(first) = vocab.insert((*tok).to_owned(), id) {
                return Err(TokenizerError::DuplicateToken {
                    token: (*tok).to_owned(),
                    first,
                    second: id,
                });
            }
        }
        let merges: Merges = match family {
            TokenizerFamily::SentencePiece => {
                let scores = get_scores(md, vocab_size)?;
                merges_from_scores(&tokens, &vocab, &scores)
            }
            TokenizerFamily::ByteLevelBpe | TokenizerFamily::Gemma4 => {
                get_string_array(md, KEY_MERGES)?
                    .ok_or(TokenizerError::MissingKey(KEY_MERGES))?
                    .iter()
                    .enumerate()
                    .map(|(index, m)| parse_merge(index, m))
                    .collect::<Result<_, _>>()?
            }
        };

        let mut builder = BPE::builder().vocab_and_merges(vocab, merges);
        match family {
            TokenizerFamily::ByteLevelBpe => {
                builder = builder.ignore_merges(rule.is_some_and(|r| r.ignore_merges));
            }
            TokenizerFamily::SentencePiece | TokenizerFamily::Gemma4 => {
                builder = builder.byte_fallback(true).fuse_unk(true);
                if let Some(unk) = unk {
                    builder = builder.unk_token(tokens[unk as usize].to_owned());
                }
            }
        }
        let bpe = builder
            .build()
            .map_err(|e| TokenizerError::Build(e.to_string()))?;
        let mut inner = Tokenizer::new(bpe);
        let build = |e: tokenizers::Error| TokenizerError::Build(e.to_string());
        match family {
            TokenizerFamily::ByteLevelBpe => {
                let rule = rule.expect("byte-level BPE has a rule");
                inner.with_pre_tokenizer(Some(regex_pre_tokenizer(rule.regexes, true)?));
                inner.with_decoder(Some(ByteLevelDecoder::new(false, true, true)));
            }
            TokenizerFamily::SentencePiece => {
                // llama.cpp prefixes a space to every text fragment that starts the
                // text or follows a special token; the normalizer runs per fragment.
                let replace: NormalizerWrapper =
                    Replace::new(" ", SPM_SPACE).map_err(build)?.into();
                let normalizer: NormalizerWrapper = if add_space_prefix {
                    NormSequence::new(vec![Prepend::new(SPM_SPACE.to_owned()).into(), replace])
                        .into()
                } else {
                    replace
                };
                inner.with_normalizer(Some(normalizer));
                inner.with_decoder(Some(spm_decoder(add_space_prefix)?));
            }
            TokenizerFamily::Gemma4 => {
                inner.with_normalizer(Some(Replace::new(" ", SPM_SPACE).map_err(build)?));
                inner.with_pre_tokenizer(Some(regex_pre_tokenizer(&[r"[^\n]+|[\n]+"], false)?));
                inner.with_decoder(Some(spm_decoder(false)?));
            }
        }
        // Control and unknown tokens are special (skipped by `parse_special = false`
        // and by decoding with `skip_special`); user-defined tokens are always matched
        // and always rendered, as in llama.cpp.
        let added = |kind: i64, special: bool| -> Vec<AddedToken> {
            tokens
                .iter()
                .zip(&types)
                .filter(|&(_, &t)| t == kind || (special && t == TOKEN_TYPE_UNKNOWN))
                .map(|(t, _)| AddedToken::from((*t).to_owned(), special).normalized(false))
                .collect()
        };
        inner.add_special_tokens(&added(TOKEN_TYPE_CONTROL, true));
        inner.add_tokens(&added(TOKEN_TYPE_USER_DEFINED, false));

        let json = inner
            .to_string(false)
            .map_err(|e| TokenizerError::Build(format!("cannot serialize: {e}")))?;
        let sha256 = hex::encode(Sha256::digest(json.as_bytes()));

        let pieces = (family != TokenizerFamily::ByteLevelBpe).then(|| {
            Arc::new(Pieces {
                bytes: tokens.iter().map(|t| piece_bytes(t)).collect(),
                skip: types
                    .iter()
                    .map(|&t| t == TOKEN_TYPE_CONTROL || t == TOKEN_TYPE_UNKNOWN)
                    .collect(),
                strip_prefix_space: family == TokenizerFamily::SentencePiece && add_space_prefix,
            })
        });

        Ok(Self {
            inner,
            plain: Arc::new(OnceLock::new()),
            grammars: Arc::new(OnceLock::new()),
            pieces,
            family,
            vocab_size,
            special,
            bos,
            eos,
            eot,
            pad,
            unk,
            add_bos,
            add_eos,
            pre,
            sha256,
            extra_stops: Vec::new(),
            inner_decodes: false,
        })
    }

    /// Reads a GGUF file's metadata (not its tensors) and builds the tokenizer.
    pub fn from_gguf_file(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let md = read_gguf_metadata(path.as_ref())?;
        Self::from_gguf_metadata(&md)
    }
}
