//! The model's tokenizer, rebuilt from the GGUF file's own metadata.
//!
//! This module owns the mapping between text and token ids for the served model.
//! It reads the `tokenizer.ggml.*` keys of a GGUF file and assembles a
//! [`tokenizers::Tokenizer`] that behaves like the reference (llama.cpp and the
//! original Hugging Face `tokenizer.json`), instead of relying on a generic GGUF
//! converter: candle's `TokenizerFromGguf`, for instance, adds a prefix space,
//! inserts spaces after special tokens and reads the wrong unknown-token key for
//! SmolLM2. Only the byte-level BPE family (`tokenizer.ggml.model = "gpt2"`) with a
//! pre-tokenizer whose rules are known here is accepted; anything else is a typed
//! [`TokenizerError`], so a model we cannot tokenize faithfully is refused at load
//! time rather than served with subtly wrong ids.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file;
use sha2::{Digest, Sha256};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::{AddedToken, Tokenizer};

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
    /// The tokenizer family is not byte-level BPE.
    #[error("unsupported tokenizer model `{0}` (only `gpt2` byte-level BPE is supported)")]
    UnsupportedModel(String),
    /// The pre-tokenizer is one whose rules are not implemented here.
    #[error("unsupported pre-tokenizer `{0}` (supported: `smollm`, `gpt-2`)")]
    UnsupportedPreTokenizer(String),
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

/// The served model's tokenizer: a byte-level BPE [`Tokenizer`] assembled from
/// GGUF metadata plus the facts about special tokens that generation needs.
#[derive(Clone)]
pub struct ModelTokenizer {
    inner: Tokenizer,
    vocab_size: usize,
    special: Vec<bool>,
    bos: Option<u32>,
    eos: u32,
    eot: Option<u32>,
    pad: Option<u32>,
    unk: Option<u32>,
    pre: String,
    sha256: String,
}

impl fmt::Debug for ModelTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelTokenizer")
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

impl ModelTokenizer {
    /// Builds the tokenizer from a GGUF file's metadata map.
    ///
    /// Required keys: `tokenizer.ggml.model` (must be `gpt2`), `tokenizer.ggml.pre`
    /// (`smollm` or `gpt-2`), `tokenizer.ggml.tokens`, `tokenizer.ggml.merges`,
    /// `tokenizer.ggml.eos_token_id`. Optional: `tokenizer.ggml.token_type` (tokens of
    /// type 3 or 4 become special tokens, matched verbatim in text), the BOS, EOT,
    /// padding and unknown token ids. The BPE model has no unknown token: every
    /// byte has a token in a byte-level vocabulary.
    pub fn from_gguf_metadata(
        md: &HashMap<String, gguf_file::Value>,
    ) -> Result<Self, TokenizerError> {
        let model = get_string(md, KEY_MODEL)?.ok_or(TokenizerError::MissingKey(KEY_MODEL))?;
        if model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(model.to_owned()));
        }
        let pre = get_string(md, KEY_PRE)?.ok_or(TokenizerError::MissingKey(KEY_PRE))?;
        // smollm: llama.cpp splits every numeric character on its own, then applies the
        // GPT-2 regex; the original tokenizer.json says the same with Digits + ByteLevel.
        let pre_tokenizer: PreTokenizerWrapper = match pre {
            "smollm" => Sequence::new(vec![
                Digits::new(true).into(),
                ByteLevel::new(false, true, true).into(),
            ])
            .into(),
            "gpt-2" => ByteLevel::new(false, true, true).into(),
            other => return Err(TokenizerError::UnsupportedPreTokenizer(other.to_owned())),
        };

        let tokens =
            get_string_array(md, KEY_TOKENS)?.ok_or(TokenizerError::MissingKey(KEY_TOKENS))?;
        let vocab_size = tokens.len();
        let merges_raw =
            get_string_array(md, KEY_MERGES)?.ok_or(TokenizerError::MissingKey(KEY_MERGES))?;

        let special: Vec<bool> = match get_array(md, KEY_TOKEN_TYPE)? {
            None => vec![false; vocab_size],
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
                        as_integer(v)
                            .map(|t| t == TOKEN_TYPE_CONTROL || t == TOKEN_TYPE_USER_DEFINED)
                            .ok_or_else(|| TokenizerError::WrongType {
                                key: KEY_TOKEN_TYPE,
                                expected: "an array of integers",
                                found: format!("an array holding {}", type_name(v)),
                            })
                    })
                    .collect::<Result<_, _>>()?
            }
        };

        let eos =
            get_token_id(md, KEY_EOS, vocab_size)?.ok_or(TokenizerError::MissingKey(KEY_EOS))?;
        let bos = get_token_id(md, KEY_BOS, vocab_size)?;
        let eot = get_token_id(md, KEY_EOT, vocab_size)?;
        let pad = get_token_id(md, KEY_PAD, vocab_size)?;
        let unk = get_token_id(md, KEY_UNK, vocab_size)?;

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
        let merges: Merges = merges_raw
            .iter()
            .enumerate()
            .map(|(index, m)| match m.split_once(' ') {
                Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains(' ') => {
                    Ok((a.to_owned(), b.to_owned()))
                }
                _ => Err(TokenizerError::MalformedMerge {
                    index,
                    merge: (*m).to_owned(),
                }),
            })
            .collect::<Result<_, _>>()?;

        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| TokenizerError::Build(e.to_string()))?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(pre_tokenizer));
        inner.with_decoder(Some(ByteLevelDecoder::new(false, true, true)));
        let added: Vec<AddedToken> = tokens
            .iter()
            .zip(&special)
            .filter(|&(_, &s)| s)
            .map(|(t, _)| AddedToken::from((*t).to_owned(), true))
            .collect();
        inner.add_special_tokens(&added);

        let json = inner
            .to_string(false)
            .map_err(|e| TokenizerError::Build(format!("cannot serialize: {e}")))?;
        let sha256 = hex::encode(Sha256::digest(json.as_bytes()));

        Ok(Self {
            inner,
            vocab_size,
            special,
            bos,
            eos,
            eot,
            pad,
            unk,
            pre: pre.to_owned(),
            sha256,
        })
    }

    /// Reads a GGUF file's metadata (not its tensors) and builds the tokenizer.
    pub fn from_gguf_file(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        let md = read_gguf_metadata(path.as_ref())?;
        Self::from_gguf_metadata(&md)
    }

    /// Token ids of `text`. Special-token strings in the text (`<|im_start|>`) become
    /// their single ids; no BOS is added.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        let enc = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| TokenizerError::Encode(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
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
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| TokenizerError::Decode(e.to_string()))
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

    /// The GGUF pre-tokenizer name this tokenizer was built for.
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

    /// Id of the token spelled exactly `token` (in the byte-level alphabet, so a
    /// leading space is `Ġ`).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The token string of `id`, in the byte-level alphabet.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Whether `id` is a special (control or user-defined) token. False for
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
