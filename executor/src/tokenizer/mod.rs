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
//!
//! Layout: [`ModelTokenizer`] and its encoding and decoding are here; `build` assembles
//! it from metadata, read through `metadata`'s typed getters under the key names of
//! `keys`; `pre_tokenizers` is llama.cpp's regex table for byte-level BPE; `error`
//! is [`TokenizerError`].

mod build;
mod error;
mod hf;
mod keys;
mod metadata;
mod pre_tokenizers;

use std::fmt;
use std::sync::{Arc, OnceLock};

use tokenizers::Tokenizer;

pub use error::TokenizerError;
pub use hf::{HfSpecialIds, HfTokenizerConfig};
pub use keys::{
    END_OF_TURN_MARKERS, KEY_ADD_BOS, KEY_ADD_EOS, KEY_ADD_SPACE_PREFIX, KEY_BOS, KEY_EOS, KEY_EOT,
    KEY_MERGES, KEY_MODEL, KEY_PAD, KEY_PRE, KEY_SCORES, KEY_TOKEN_TYPE, KEY_TOKENS, KEY_UNK,
};
pub use metadata::read_gguf_metadata;
pub use pre_tokenizers::supported_pre_tokenizers;

/// Every `tokenizer.ggml.model` value accepted, with the family it selects.
pub const SUPPORTED_MODELS: &[&str] = &["gpt2", "llama", "gemma4"];

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

/// The served model's tokenizer: a [`Tokenizer`] assembled from GGUF metadata plus
/// the facts about special tokens that generation needs.
#[derive(Clone)]
pub struct ModelTokenizer {
    inner: Tokenizer,
    /// `inner` with control tokens left as text, built on first use.
    plain: Arc<OnceLock<Tokenizer>>,
    /// The grammar compiler over this vocabulary, built on first use.
    grammars: Arc<OnceLock<Result<crate::structured::Grammars, crate::structured::GrammarError>>>,
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
    /// Further ids that end generation (a Hugging Face directory's list of
    /// `eos_token_id`s, as Llama 3's `generation_config.json` has).
    extra_stops: Vec<u32>,
    /// Decode through `inner`'s own decoder even when `pieces` is set: a
    /// `tokenizer.json` says how its pieces join, and is followed as written.
    inner_decodes: bool,
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

impl ModelTokenizer {
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
        let pieces = self.pieces.as_ref().filter(|_| !self.inner_decodes);
        let Some(pieces) = pieces else {
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
        ids.extend(&self.extra_stops);
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

    /// The BOS and EOS tokens' text (empty when there is none), as chat
    /// templates receive them as `bos_token` and `eos_token`.
    pub fn bos_eos_text(&self) -> (String, String) {
        let bos = self
            .bos
            .and_then(|id| self.id_to_token(id))
            .unwrap_or_default();
        let eos = self.id_to_token(self.eos).unwrap_or_default();
        (bos, eos)
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

    /// The bytes token `id` stands for, as OpenAI's `logprobs` report them
    /// (`bytes`): `Ġ`-escaped byte-level BPE mapped back through GPT-2's byte
    /// alphabet, `▁` pieces as spaces and `<0xXX>` as the byte, special tokens
    /// as their text. Empty for an id outside the vocabulary.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        if id as usize >= self.vocab_size {
            return Vec::new();
        }
        if let Some(pieces) = &self.pieces {
            return pieces.bytes[id as usize].to_vec();
        }
        let Some(token) = self.inner.id_to_token(id) else {
            return Vec::new();
        };
        if self.is_special(id) {
            return token.into_bytes();
        }
        let mut out = Vec::with_capacity(token.len());
        for c in token.chars() {
            match gpt2_byte(c) {
                Some(b) => out.push(b),
                None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        out
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

    /// The compiler of response formats over this vocabulary, built on the
    /// first request that asks for one and shared by every clone.
    pub fn grammars(
        &self,
    ) -> Result<&crate::structured::Grammars, crate::structured::GrammarError> {
        self.grammars
            .get_or_init(|| {
                crate::structured::Grammars::new(crate::structured::Vocabulary {
                    tokens: (0..self.vocab_size as u32)
                        .map(|id| (self.token_bytes(id), self.is_special(id)))
                        .collect(),
                    eos: self.eos,
                    bos: self.bos,
                    pad: self.pad,
                    unk: self.unk,
                })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The underlying `tokenizers` tokenizer.
    pub fn inner(&self) -> &Tokenizer {
        &self.inner
    }
}

/// The byte a character of GPT-2's byte-level alphabet stands for: printable
/// bytes (`!`..`~`, `¡`..`¬`, `®`..`ÿ`) are themselves, the other 68 are
/// U+0100 onwards in byte order (so a space is `Ġ`, U+0120).
fn gpt2_byte(c: char) -> Option<u8> {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let cp = c as u32;
    if cp < 256 {
        return printable(cp).then_some(cp as u8);
    }
    let n = cp.checked_sub(256)? as usize;
    (0u32..256)
        .filter(|&b| !printable(b))
        .nth(n)
        .map(|b| b as u8)
}
