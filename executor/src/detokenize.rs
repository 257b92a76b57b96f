//! Incremental detokenization: turning a stream of generated token ids into text
//! deltas as they arrive.
//!
//! This module owns the streaming side of decoding. Byte-level BPE and
//! SentencePiece's `<0xXX>` byte fallback can split one multi-byte character
//! across several tokens, so decoding each token alone would
//! emit broken UTF-8 (U+FFFD) and decoding the whole sequence each step would cost
//! O(n) per token. [`IncrementalDetokenizer`] uses the prefix/read-offset technique
//! of vLLM and TGI: it decodes only a short window of recent tokens, emits the text
//! past what was already emitted, and holds back while that text ends in U+FFFD
//! (an incomplete character). The concatenation of all deltas plus
//! [`IncrementalDetokenizer::flush`] equals [`ModelTokenizer::decode`] of all ids.

use crate::tokenizer::{ModelTokenizer, TokenizerError};

/// The replacement character that a decoder writes for incomplete UTF-8.
const REPLACEMENT: char = '\u{FFFD}';

/// Prompt tokens kept as context before the first generated one
/// ([`IncrementalDetokenizer::after_prompt`]).
const PROMPT_CONTEXT: usize = 6;

/// Streaming decoder state for one sequence.
///
/// `ids[prefix_offset..read_offset]` is the last emitted window, decoded again each
/// step only as context; `ids[read_offset..]` are tokens whose text is not yet
/// emitted. The window moves forward on every emission, so each push decodes a
/// handful of tokens; it grows only while the pending text ends in U+FFFD, which
/// for well-formed output lasts at most three tokens (a UTF-8 character has at
/// most four bytes and every token at least one).
#[derive(Clone, Debug, Default)]
pub struct IncrementalDetokenizer {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    skip_special: bool,
    /// Leading `ids` that are prompt context, not pushed tokens.
    context: usize,
}

impl IncrementalDetokenizer {
    /// A fresh detokenizer; with `skip_special`, special tokens produce no text.
    pub fn new(skip_special: bool) -> Self {
        Self {
            skip_special,
            ..Self::default()
        }
    }

    /// A fresh detokenizer for text that continues `prompt`: its last few tokens
    /// are decoded as context but never emitted, as vLLM does. SentencePiece
    /// decoding drops the word-boundary space of a sequence's first token, so
    /// without context a generation's first word would lose its space
    /// (`▁Paris` after "The capital of France is" would stream as "Paris"
    /// where llama.cpp and vLLM give " Paris"). Byte-level BPE decodes the same
    /// either way.
    pub fn after_prompt(skip_special: bool, prompt: &[u32]) -> Self {
        let context = &prompt[prompt.len().saturating_sub(PROMPT_CONTEXT)..];
        Self {
            ids: context.to_vec(),
            prefix_offset: 0,
            read_offset: context.len(),
            skip_special,
            context: context.len(),
        }
    }

    /// Feeds one generated token and returns the newly completed text, or `None`
    /// when the token completes no character yet (or produces no text).
    pub fn push(
        &mut self,
        tok: &ModelTokenizer,
        id: u32,
    ) -> Result<Option<String>, TokenizerError> {
        if id as usize >= tok.vocab_size() {
            return Err(TokenizerError::IdOutOfRange {
                id,
                vocab_size: tok.vocab_size(),
            });
        }
        self.ids.push(id);
        let prefix_text = tok.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special,
        )?;
        let new_text = tok.decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        if new_text.len() <= prefix_text.len() || new_text.ends_with(REPLACEMENT) {
            return Ok(None);
        }
        let Some(delta) = new_text
            .strip_prefix(prefix_text.as_str())
            .or_else(|| new_text.get(prefix_text.len()..))
        else {
            // The window's text changed in a way that is not an extension (not
            // possible with lossy UTF-8 decoding of concatenated bytes); wait for
            // more tokens or flush.
            return Ok(None);
        };
        let delta = delta.to_owned();
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        Ok(Some(delta))
    }

    /// Emits whatever is still held back (possibly ending in U+FFFD, if the
    /// sequence ended inside a character) and marks it emitted. Returns `None`
    /// when nothing is pending.
    pub fn flush(&mut self, tok: &ModelTokenizer) -> Result<Option<String>, TokenizerError> {
        if self.read_offset == self.ids.len() {
            return Ok(None);
        }
        let prefix_text = tok.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special,
        )?;
        let new_text = tok.decode(&self.ids[self.prefix_offset..], self.skip_special)?;
        self.prefix_offset = self.read_offset;
        self.read_offset = self.ids.len();
        let delta = new_text
            .strip_prefix(prefix_text.as_str())
            .or_else(|| new_text.get(prefix_text.len()..))
            .unwrap_or_default();
        Ok((!delta.is_empty()).then(|| delta.to_owned()))
    }

    /// All token ids pushed so far (the prompt context is not among them).
    pub fn ids(&self) -> &[u32] {
        &self.ids[self.context..]
    }

    /// Number of pushed tokens whose text has not been emitted yet.
    pub fn pending_tokens(&self) -> usize {
        self.ids.len() - self.read_offset
    }
}
