//! The GGUF metadata keys a tokenizer is rebuilt from (llama.cpp's
//! `tokenizer.ggml.*`), the token types they use, and the end-of-turn markers
//! that stop generation: the vocabulary of the other tokenizer modules.

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
pub(super) const SPM_SPACE: &str = "\u{2581}";

/// Token type of the unknown token (`<unk>`), matched in text like a control token.
pub(super) const TOKEN_TYPE_UNKNOWN: i64 = 2;
/// Token type of a control token (`<|im_start|>`, `<|endoftext|>`, ...).
pub(super) const TOKEN_TYPE_CONTROL: i64 = 3;
/// Token type of a user-defined token, matched verbatim in text like a control token.
pub(super) const TOKEN_TYPE_USER_DEFINED: i64 = 4;

/// Conventional end-of-turn markers. When one of them is a special token of the
/// vocabulary it is a stop token besides EOS (see
/// [`ModelTokenizer::stop_token_ids`](super::ModelTokenizer::stop_token_ids)).
pub const END_OF_TURN_MARKERS: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
];
