//! The model's tokenizer, rebuilt from the GGUF file's own metadata.
//!
//! This module owns the mapping between text and token ids for the served model.
//! It reads the `tokenizer.ggml.*` keys of a GGUF file and assembles a
//! [`tokenizers::Tokenizer`] that behaves like the reference (llama.cpp and the
//! original Hugging Face `tokenizer.json`), instead of relying on a generic GGUF
//! converter: candle's `TokenizerFromGguf`, for instance, adds a prefix space,
//! inserts spaces after special tokens and reads the wrong unknown-token key for
//! SmolLM2. Three families are accepted, the ones llama.cpp's own vocabulary tests
//! cover for the models people download:
//!
//! - byte-level BPE (`tokenizer.ggml.model = "gpt2"`: GPT-2, Llama 3, Qwen,
//!   DeepSeek, StarCoder, SmolLM, ...), with the pre-tokenizer regexes llama.cpp
//!   defines for each `tokenizer.ggml.pre` (a table, [`supported_pre_tokenizers`]);
//! - SentencePiece BPE (`"llama"`: Llama 2, Mistral, Phi-3, ...), whose merges are
//!   derived from `tokenizer.ggml.scores`, with `▁` for spaces, the optional space
//!   prefix and `<0xXX>` byte fallback;
//! - Gemma 4's BPE over `▁`-escaped text with byte fallback (`"gemma4"`).
//!
//! Control, unknown and user-defined tokens are matched verbatim in text before
//! pre-tokenization, as llama.cpp's `parse_special` does. Anything else is a typed
//! [`TokenizerError`] that names what is unsupported and lists what is, so a model
//! we cannot tokenize faithfully is refused at load time rather than served with
//! subtly wrong ids.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::BufReader;
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

/// GGUF key naming the tokenizer family.
pub const KEY_MODEL: &str = "tokenizer.ggml.model";
/// GGUF key naming the pre-tokenizer (llama.cpp's `pre` type).
pub const KEY_PRE: &str = "tokenizer.ggml.pre";
/// GGUF key holding the token strings, indexed by id.
pub const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
/// GGUF key holding the BPE merges, as `"left right"` strings in rank order.
pub const KEY_MERGES: &str = "tokenizer.ggml.merges";
/// GGUF key holding each token's type (1 normal, 2 unknown, 3 control, 4 user-defined,
/// 5 unused, 6 byte).
pub const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
/// GGUF key of the beginning-of-sequence token id.
pub const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
/// GGUF key of the end-of-sequence token id.
pub const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
/// GGUF key of the end-of-turn token id (llama.cpp's `EOT`), rarely present.
pub const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
/// GGUF key of the padding token id.
pub const KEY_PAD: &str = "tokenizer.ggml.padding_token_id";
/// GGUF key of the unknown token id.
pub const KEY_UNK: &str = "tokenizer.ggml.unknown_token_id";
/// GGUF key holding each token's SentencePiece score (higher merges first).
pub const KEY_SCORES: &str = "tokenizer.ggml.scores";
/// GGUF key: whether SentencePiece text gets a leading space (default true).
pub const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
/// GGUF key: whether a prompt starts with BOS when special tokens are added.
pub const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
/// GGUF key: whether a prompt ends with EOS when special tokens are added.
pub const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";

/// SentencePiece's visible space, which stands for `' '` in SPM and Gemma tokens.
const SPM_SPACE: &str = "\u{2581}";

/// Token type of the unknown token (`<unk>`), matched in text like a control token.
const TOKEN_TYPE_UNKNOWN: i64 = 2;
/// Token type of a control token (`<|im_start|>`, `<|endoftext|>`, ...).
const TOKEN_TYPE_CONTROL: i64 = 3;
/// Token type of a user-defined token, matched verbatim in text like a control token.
const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Conventional end-of-turn markers. When one of them is a special token of the
/// vocabulary it is a stop token besides EOS (see [`ModelTokenizer::stop_token_ids`]).
pub const END_OF_TURN_MARKERS: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
];

/// Why a tokenizer could not be built from metadata, or could not encode or decode.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A required metadata key is absent.
    #[error("GGUF metadata lacks the key `{0}`")]
    MissingKey(&'static str),
    /// A metadata key holds a value of the wrong type.
    #[error("GGUF metadata key `{key}` should be {expected}, found {found}")]
    WrongType {
        /// The offending key.
        key: &'static str,
        /// What the key should hold.
        expected: &'static str,
        /// What it holds, as a GGUF value type.
        found: String,
    },
    /// Two per-token arrays disagree in length.
    #[error("`{key}` has {found} entries but the vocabulary has {expected} tokens")]
    LengthMismatch {
        /// The array that disagrees with `tokenizer.ggml.tokens`.
        key: &'static str,
        /// The vocabulary size.
        expected: usize,
        /// The array's length.
        found: usize,
    },
    /// The tokenizer family is not one built here.
    #[error(
        "unsupported tokenizer model `{0}` (supported: {models})",
        models = quoted_list(SUPPORTED_MODELS)
    )]
    UnsupportedModel(String),
    /// The pre-tokenizer is one whose rules are not implemented here.
    #[error(
        "unsupported pre-tokenizer `{0}` for byte-level BPE (supported: {pres})",
        pres = quoted_list(&supported_pre_tokenizers())
    )]
    UnsupportedPreTokenizer(String),
    /// A SentencePiece score is not a finite number.
    #[error("score of token {id} is {value}, not a finite number")]
    BadScore {
        /// The token id.
        id: usize,
        /// The score as read.
        value: f64,
    },
    /// A merge entry is not two tokens separated by one space.
    #[error("merge #{index} `{merge}` is not of the form `left right`")]
    MalformedMerge {
        /// Rank of the merge.
        index: usize,
        /// The merge text.
        merge: String,
    },
    /// The same token string appears twice in the vocabulary.
    #[error("token {token:?} appears twice in the vocabulary (ids {first} and {second})")]
    DuplicateToken {
        /// The token string.
        token: String,
        /// Its first id.
        first: u32,
        /// Its second id.
        second: u32,
    },
    /// A token id (from metadata or from a caller) is outside the vocabulary.
    #[error("token id {id} is out of range for a vocabulary of {vocab_size} tokens")]
    IdOutOfRange {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// The `tokenizers` crate refused the assembled model (e.g. a merge names an
    /// unknown token).
    #[error("cannot build the tokenizer: {0}")]
    Build(String),
    /// Encoding failed.
    #[error("encode failed: {0}")]
    Encode(String),
    /// Decoding failed.
    #[error("decode failed: {0}")]
    Decode(String),
    /// Reading the GGUF file failed.
    #[error("cannot read GGUF file: {0}")]
    Io(String),
}

/// Which tokenizer family the GGUF file names, and how text becomes model input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerFamily {
    /// Byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with a regex pre-tokenizer.
    ByteLevelBpe,
    /// SentencePiece BPE over scores (`"llama"`), with `▁` and byte fallback.
    SentencePiece,
    /// Gemma 4's BPE over `▁`-escaped UTF-8 with byte fallback (`"gemma4"`).
    Gemma4,
}

/// How [`ModelTokenizer::encode_with`] treats special tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Add BOS (and EOS) as the model's metadata asks (`add_bos_token`,
    /// `add_eos_token`); llama.cpp's `add_special`.
    pub add_special: bool,
    /// Match control and unknown tokens (`<|im_start|>`, `<s>`) spelled in the text;
    /// llama.cpp's `parse_special`. User-defined tokens are matched either way.
    pub parse_special: bool,
}

/// What each token of a `▁`-escaped vocabulary (SentencePiece, Gemma 4) decodes to.
#[derive(Clone)]
struct Pieces {
    /// The token's bytes: `▁` as a space, `<0xXX>` as the byte.
    bytes: Vec<Box<[u8]>>,
    /// Left out when decoding with `skip_special` (control and unknown tokens).
    skip: Vec<bool>,
    /// Whether a leading space (the encoder's prefix) is removed.
    strip_prefix_space: bool,
}

/// The bytes a `▁`-escaped token stands for.
fn piece_bytes(token: &str) -> Box<[u8]> {
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

/// The served model's tokenizer: a [`Tokenizer`] assembled from GGUF metadata plus
/// the facts about special tokens that generation needs.
#[derive(Clone)]
pub struct ModelTokenizer {
    inner: Tokenizer,
    /// `inner` with control tokens left as text, built on first use.
    plain: Arc<OnceLock<Tokenizer>>,
    /// Decoding table of `▁`-escaped vocabularies; byte-level BPE uses `inner`.
    pieces: Option<Arc<Pieces>>,
    family: TokenizerFamily,
    vocab_size: usize,
    special: Vec<bool>,
    bos: Option<u32>,
    eos: u32,
    eot: Option<u32>,
    pad: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    pre: String,
    sha256: String,
}

impl fmt::Debug for ModelTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelTokenizer")
            .field("family", &self.family)
            .field("vocab_size", &self.vocab_size)
            .field("pre", &self.pre)
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

type Metadata = HashMap<String, gguf_file::Value>;

fn type_name(v: &gguf_file::Value) -> String {
    format!("{:?}", v.value_type())
}

fn get_string<'a>(md: &'a Metadata, key: &'static str) -> Result<Option<&'a str>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(gguf_file::Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(TokenizerError::WrongType {
            key,
            expected: "a string",
            found: type_name(v),
        }),
    }
}

fn get_array<'a>(
    md: &'a Metadata,
    key: &'static str,
) -> Result<Option<&'a [gguf_file::Value]>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(gguf_file::Value::Array(a)) => Ok(Some(a)),
        Some(v) => Err(TokenizerError::WrongType {
            key,
            expected: "an array",
            found: type_name(v),
        }),
    }
}

fn get_string_array<'a>(
    md: &'a Metadata,
    key: &'static str,
) -> Result<Option<Vec<&'a str>>, TokenizerError> {
    let Some(items) = get_array(md, key)? else {
        return Ok(None);
    };
    items
        .iter()
        .map(|v| match v {
            gguf_file::Value::String(s) => Ok(s.as_str()),
            other => Err(TokenizerError::WrongType {
                key,
                expected: "an array of strings",
                found: format!("an array holding {}", type_name(other)),
            }),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Any GGUF integer as `i64`; `None` for non-integers.
fn as_integer(v: &gguf_file::Value) -> Option<i64> {
    use gguf_file::Value as V;
    Some(match v {
        V::U8(x) => i64::from(*x),
        V::I8(x) => i64::from(*x),
        V::U16(x) => i64::from(*x),
        V::I16(x) => i64::from(*x),
        V::U32(x) => i64::from(*x),
        V::I32(x) => i64::from(*x),
        V::U64(x) => i64::try_from(*x).unwrap_or(i64::MAX),
        V::I64(x) => *x,
        _ => return None,
    })
}

fn get_token_id(
    md: &Metadata,
    key: &'static str,
    vocab_size: usize,
) -> Result<Option<u32>, TokenizerError> {
    let Some(v) = md.get(key) else {
        return Ok(None);
    };
    let n = as_integer(v).ok_or_else(|| TokenizerError::WrongType {
        key,
        expected: "an integer token id",
        found: type_name(v),
    })?;
    match u32::try_from(n) {
        Ok(id) if (id as usize) < vocab_size => Ok(Some(id)),
        _ => Err(TokenizerError::IdOutOfRange {
            id: u32::try_from(n).unwrap_or(u32::MAX),
            vocab_size,
        }),
    }
}

fn get_bool(md: &Metadata, key: &'static str) -> Result<Option<bool>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(gguf_file::Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(TokenizerError::WrongType {
            key,
            expected: "a boolean",
            found: type_name(v),
        }),
    }
}

/// `["a", "b"]` as "`a`, `b`", for error messages.
fn quoted_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The per-token SentencePiece scores, as `f64` (GGUF stores `f32`, or `i32`).
fn get_scores(md: &Metadata, vocab_size: usize) -> Result<Vec<f64>, TokenizerError> {
    let items = get_array(md, KEY_SCORES)?.ok_or(TokenizerError::MissingKey(KEY_SCORES))?;
    if items.len() != vocab_size {
        return Err(TokenizerError::LengthMismatch {
            key: KEY_SCORES,
            expected: vocab_size,
            found: items.len(),
        });
    }
    items
        .iter()
        .enumerate()
        .map(|(id, v)| {
            let value = match v {
                gguf_file::Value::F32(x) => f64::from(*x),
                gguf_file::Value::F64(x) => *x,
                other => as_integer(other).map(|x| x as f64).ok_or_else(|| {
                    TokenizerError::WrongType {
                        key: KEY_SCORES,
                        expected: "an array of numbers",
                        found: format!("an array holding {}", type_name(other)),
                    }
                })?,
            };
            if value.is_finite() {
                Ok(value)
            } else {
                Err(TokenizerError::BadScore { id, value })
            }
        })
        .collect()
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
    /// Required keys: `tokenizer.ggml.model` (one of [`SUPPORTED_MODELS`]),
    /// `tokenizer.ggml.tokens`, `tokenizer.ggml.eos_token_id`; for `gpt2` also
    /// `tokenizer.ggml.pre` (one of [`supported_pre_tokenizers`]) and
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
        })
    }

    /// Reads a GGUF file's metadata (not its tensors) and builds the tokenizer.
    pub fn from_gguf_file(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let md = read_gguf_metadata(path.as_ref())?;
        Self::from_gguf_metadata(&md)
    }

    /// Token ids of `text`. Special-token strings in the text (`<|im_start|>`) become
    /// their single ids; no BOS is added (chat templates spell it out).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.encode_with(
            text,
            EncodeOptions {
                add_special: false,
                parse_special: true,
            },
        )
    }

    /// Token ids of a rendered chat prompt, as llama-server makes them: when the
    /// model adds BOS (EOS) itself, a BOS (EOS) the template spelled out at the
    /// start (end) is removed first, then the text is encoded with special tokens
    /// added and parsed. One BOS either way: a template that writes
    /// `{{ bos_token }}` (Llama 3, Gemma) does not get two, and one that does not
    /// (Phi-3) still gets the BOS its model was trained with.
    pub fn encode_chat(&self, rendered: &str) -> Result<Vec<u32>, TokenizerError> {
        let mut text = rendered;
        if self.add_bos
            && let Some(bos) = self.bos.and_then(|id| self.id_to_token(id))
            && !bos.is_empty()
        {
            text = text.strip_prefix(bos.as_str()).unwrap_or(text);
        }
        if self.add_eos
            && let Some(eos) = self.id_to_token(self.eos)
            && !eos.is_empty()
        {
            text = text.strip_suffix(eos.as_str()).unwrap_or(text);
        }
        self.encode_with(
            text,
            EncodeOptions {
                add_special: true,
                parse_special: true,
            },
        )
    }

    /// Token ids of `text` under llama.cpp's `add_special` / `parse_special` rules.
    pub fn encode_with(&self, text: &str, opts: EncodeOptions) -> Result<Vec<u32>, TokenizerError> {
        let tok = if opts.parse_special {
            &self.inner
        } else {
            self.plain.get_or_init(|| {
                let mut plain = self.inner.clone();
                plain.set_encode_special_tokens(true);
                plain
            })
        };
        let enc = tok
            .encode_fast(text, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        let mut ids = Vec::with_capacity(enc.len() + 2);
        if opts.add_special && self.add_bos {
            ids.extend(self.bos);
        }
        ids.extend_from_slice(enc.get_ids());
        if opts.add_special && self.add_eos {
            ids.push(self.eos);
        }
        Ok(ids)
    }

    /// Text of `ids`; special tokens are left out when `skip_special` is set. Byte
    /// sequences that are not valid UTF-8 decode to U+FFFD. Every id must be below
    /// [`Self::vocab_size`].
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.vocab_size) {
            return Err(TokenizerError::IdOutOfRange {
                id,
                vocab_size: self.vocab_size,
            });
        }
        let Some(pieces) = &self.pieces else {
            return self
                .inner
                .decode(ids, skip_special)
                .map_err(|e| TokenizerError::Decode(e.to_string()));
        };
        // `▁`-escaped vocabularies: concatenate the pieces' bytes and decode them
        // lossily as a whole, as byte-level BPE does (and llama.cpp): a character
        // split over `<0xXX>` tokens is whole, and a broken one is one U+FFFD. The
        // `ByteFallback` decoder instead turns every byte of a run that is not valid
        // UTF-8 as a whole into U+FFFD, losing the valid characters before it.
        let mut bytes = Vec::new();
        for &id in ids {
            if skip_special && pieces.skip[id as usize] {
                continue;
            }
            bytes.extend_from_slice(&pieces.bytes[id as usize]);
        }
        let text = String::from_utf8_lossy(&bytes);
        let text = match text.strip_prefix(' ') {
            Some(rest) if pieces.strip_prefix_space => rest,
            _ => &text,
        };
        Ok(text.to_owned())
    }

    /// The end-of-sequence token id (`tokenizer.ggml.eos_token_id`).
    pub fn eos_token_id(&self) -> u32 {
        self.eos
    }

    /// The beginning-of-sequence token id, if the metadata names one. It is never
    /// added by [`Self::encode`]; chat templates spell it out when they want it.
    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos
    }

    /// The padding token id, if the metadata names one.
    pub fn pad_token_id(&self) -> Option<u32> {
        self.pad
    }

    /// The unknown token id, if the metadata names one (unused by byte-level BPE).
    pub fn unknown_token_id(&self) -> Option<u32> {
        self.unk
    }

    /// Whether llama.cpp adds BOS to a prompt when special tokens are added.
    pub fn add_bos_token(&self) -> bool {
        self.add_bos
    }

    /// The tokenizer family the metadata names.
    pub fn family(&self) -> TokenizerFamily {
        self.family
    }

    /// The GGUF pre-tokenizer name this tokenizer was built for (`default` for
    /// SentencePiece, which has none; `gemma4` for Gemma 4).
    pub fn pre_tokenizer_name(&self) -> &str {
        &self.pre
    }

    /// Token ids that end generation, sorted and without duplicates.
    ///
    /// The rule: EOS; the end-of-turn id `tokenizer.ggml.eot_token_id` if present; and
    /// every [`END_OF_TURN_MARKERS`] string (`<|im_end|>`, `<|eot_id|>`, `<|end|>`,
    /// `<end_of_turn>`, `<|endoftext|>`) that is a special token of this vocabulary.
    /// A chat model ends its turn with such a marker even where the GGUF's EOS is
    /// another token, and continuing past a document end is never useful.
    pub fn stop_token_ids(&self) -> Vec<u32> {
        let mut ids = vec![self.eos];
        ids.extend(self.eot);
        ids.extend(
            END_OF_TURN_MARKERS
                .iter()
                .filter_map(|m| self.token_to_id(m))
                .filter(|&id| self.is_special(id)),
        );
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Number of tokens in the vocabulary (special tokens included).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Id of the token spelled exactly `token` (in the vocabulary's alphabet: a
    /// leading space is `Ġ` in byte-level BPE, `▁` in SentencePiece).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token string of `id`, in the vocabulary's alphabet.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Whether `id` is a special (unknown, control or user-defined) token. False for
    /// out-of-range ids.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// Hex SHA-256 of the tokenizer's canonical (compact) `tokenizer.json`
    /// serialization, for the revision record: two models with the same hash
    /// tokenize identically.
    pub fn sha256_hex(&self) -> String {
        self.sha256.clone()
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }
}

/// Reads only the metadata of a GGUF file.
pub fn read_gguf_metadata(
    path: &Path,
) -> Result<HashMap<String, gguf_file::Value>, TokenizerError> {
    let file =
        File::open(path).map_err(|e| TokenizerError::Io(format!("{}: {e}", path.display())))?;
    let content = gguf_file::Content::read(&mut BufReader::new(file))
        .map_err(|e| TokenizerError::Io(format!("{}: {e}", path.display())))?;
    Ok(content.metadata)
}

// ---- The llama.cpp pre-tokenizer table. ----

/// GPT-2's word-splitting regex (llama.cpp's spelling, without the redundant
/// trailing `|\s+`: text a regex leaves unmatched is a piece of its own anyway).
const RE_GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's regex as its tokenizer.json writes it (llama.cpp spells the
/// case-insensitive contractions out because its engine lacks `(?i:)`).
const RE_LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Jais 2: Llama 3's regex with a cascade of whitespace-run lengths.
const RE_JAIS2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}";
/// Qwen 2: Llama 3's regex with single digits.
const RE_QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 3.5: Qwen 2's regex with combining marks kept inside words.
const RE_QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// ChatGLM 4 / GLM 4 (llama.cpp's spelling).
const RE_CHATGLM4: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Poro, BLOOM, GPT-3 Finnish: everything up to a separator.
const RE_PORO: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";
/// Tekken (Mistral Nemo), as its tokenizer.json writes it.
const RE_TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-4o (o200k) and Llama 4, as their tokenizer.json writes it.
const RE_GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// DeepSeek V3's word regex (after digits and CJK runs are split off).
const RE_DEEPSEEK3_WORDS: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;

/// How one `tokenizer.ggml.pre` value splits text before byte-level BPE: the
/// regexes of llama.cpp's `llm_tokenizer_bpe` for that pre-tokenizer type, applied
/// in order, each isolating its matches (and the text between them) as pieces.
struct PreTokenizerRule {
    /// The `tokenizer.ggml.pre` values llama.cpp maps to this rule.
    names: &'static [&'static str],
    /// The split regexes, in order.
    regexes: &'static [&'static str],
    /// llama.cpp's `ignore_merges`: a piece that is itself a token is emitted whole.
    ignore_merges: bool,
}

/// llama.cpp's pre-tokenizer types for byte-level BPE (`src/llama-vocab.cpp`), by
/// the `tokenizer.ggml.pre` names that select them. Where llama.cpp quotes the
/// model's original tokenizer.json regex (it rewrites `(?i:...)` and `\p{Lu}`
/// classes that its own engine lacks), the original is used here. Left out:
/// types that need llama.cpp's hand-written splitters (`kimi-k2`, `afmoe`,
/// `superbpe`), possessive quantifiers (`bailingmoe`), non-byte-level BPE
/// (`whitespace`, `sarvam-moe`) and image tokens (`chameleon`).
const BYTE_LEVEL_PRE_TOKENIZERS: &[PreTokenizerRule] = &[
    PreTokenizerRule {
        names: &["default"],
        regexes: &[
            r"[\p{P}\$\+<=>\^~\|]+",
            RE_GPT2,
            r"\p{N}+",
            "[0-9][0-9][0-9]",
        ],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        regexes: &[RE_LLAMA3],
        ignore_merges: true,
    },
    PreTokenizerRule {
        names: &["dbrx", "smaug-bpe"],
        regexes: &[RE_LLAMA3],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["jais-2"],
        regexes: &[RE_JAIS2],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["deepseek-llm"],
        regexes: &[
            "[\r\n]",
            // Unicode's cased letters (Lu, Ll, Lt), spelled as escapes: several of them
            // (U+1FD3, U+2126, ...) would be changed by Unicode normalization of the
            // source text, which turns the ranges they end into invalid ones.
            concat!(
                "\\s?[",
                "A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}",
                "]+"
            ),
            r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
            r"\s+$",
            "[一-龥ࠀ-一가-퟿]+",
            r"\p{N}+",
        ],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["deepseek-coder"],
        regexes: &[
            "[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            "[一-龥ࠀ-一가-퟿]+",
            r"\p{N}",
        ],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"],
        regexes: &[r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", RE_DEEPSEEK3_WORDS],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["falcon"],
        regexes: &[r"[\p{P}\$\+<=>\^~\|`]+", RE_GPT2, "[0-9][0-9][0-9]"],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &[
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        regexes: &[r"\p{N}", RE_GPT2],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
            "exaone4",
        ],
        regexes: &[RE_GPT2],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ],
        regexes: &[RE_QWEN2],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["qwen35"],
        regexes: &[RE_QWEN35],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["poro-chat", "bloom", "gpt3-finnish"],
        regexes: &[RE_PORO],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["glm4", "chatglm-bpe"],
        regexes: &[RE_CHATGLM4],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["viking"],
        regexes: &[RE_PORO, r"\p{N}"],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["tekken"],
        regexes: &[RE_TEKKEN],
        ignore_merges: true,
    },
    PreTokenizerRule {
        names: &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        regexes: &[RE_GPT4O],
        ignore_merges: false,
    },
];

/// The rule for a `tokenizer.ggml.pre` value, if it is in the table.
fn pre_tokenizer_rule(name: &str) -> Option<&'static PreTokenizerRule> {
    BYTE_LEVEL_PRE_TOKENIZERS
        .iter()
        .find(|r| r.names.contains(&name))
}

/// Every `tokenizer.ggml.pre` value accepted for byte-level BPE, in table order.
pub fn supported_pre_tokenizers() -> Vec<&'static str> {
    BYTE_LEVEL_PRE_TOKENIZERS
        .iter()
        .flat_map(|r| r.names.iter().copied())
        .collect()
}

/// Every `tokenizer.ggml.model` value accepted, with the family it selects.
pub const SUPPORTED_MODELS: &[&str] = &["gpt2", "llama", "gemma4"];
