//! [`TokenizerError`]: every way a tokenizer can fail to build from metadata,
//! to encode or to decode, each naming what is unsupported and what is.

use super::SUPPORTED_MODELS;
use super::pre_tokenizers::supported_pre_tokenizers;

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
    /// A Hugging Face `tokenizer.json` or `tokenizer_config.json` is malformed
    /// or lacks what generation needs (an end-of-sequence token).
    #[error("Hugging Face tokenizer files: {0}")]
    HfFiles(String),
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

/// `["a", "b"]` as "`a`, `b`", for error messages.
fn quoted_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
