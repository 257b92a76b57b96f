//! Prompts for a benchmark: built to an exact token length with the target's
//! tokenizer when it is known, or sampled from a JSONL file of real prompts.
//!
//! Exact lengths come from words that are one token each with a leading
//! space (` river`, ` model`): a byte-level BPE pre-tokenizer splits before
//! every space, so a run of such words encodes to one token per word. The
//! builder still encodes the result and adds or drops words until the count
//! is exact, so a tokenizer that adds a BOS token or merges differently is
//! handled, not assumed away. Without a tokenizer the words come from a
//! short common-English list and the server's `usage` gives the true count.

use std::io::BufRead;
use std::path::Path;

use rand::Rng;
use rand::seq::IndexedRandom;
use stoker_executor::tokenizer::ModelTokenizer;

use super::spec::SpecError;

/// Common English words, one token each in most BPE vocabularies.
const FALLBACK_WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "river", "model",
    "light", "water", "house", "world", "small", "great", "city", "story", "paper", "field",
    "music", "north", "south", "green", "stone", "table", "market", "garden", "winter",
];

/// Largest prompts file read.
const MAX_PROMPTS_BYTES: u64 = 256 << 20;
/// Most prompts kept from a file.
const MAX_PROMPTS: usize = 1_000_000;

/// A prompt ready to send.
#[derive(Clone, Debug, PartialEq)]
pub struct Prompt {
    pub text: String,
    /// Its exact token count, when a tokenizer counted it.
    pub tokens: Option<u32>,
    /// `max_tokens` from the prompts file, if it gave one.
    pub max_tokens: Option<u32>,
}

/// Where prompts come from.
pub enum PromptSource {
    Generated {
        words: Vec<String>,
        tokenizer: Option<Box<ModelTokenizer>>,
    },
    File(Vec<Prompt>),
}

impl std::fmt::Debug for PromptSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PromptSource::Generated { words, tokenizer } => f
                .debug_struct("Generated")
                .field("words", &words.len())
                .field("exact", &tokenizer.is_some())
                .finish(),
            PromptSource::File(p) => f.debug_tuple("File").field(&p.len()).finish(),
        }
    }
}

impl PromptSource {
    /// Generated prompts; exact when a tokenizer is given.
    pub fn generated(tokenizer: Option<ModelTokenizer>) -> Result<Self, SpecError> {
        let words = match &tokenizer {
            Some(t) => single_token_words(t)?,
            None => FALLBACK_WORDS.iter().map(|w| format!(" {w}")).collect(),
        };
        Ok(PromptSource::Generated {
            words,
            tokenizer: tokenizer.map(Box::new),
        })
    }

    /// Prompts read from a JSONL file: one `{"prompt": "...", "max_tokens": N}`
    /// per line (`max_tokens` optional), counted when a tokenizer is given.
    pub fn from_file(path: &Path, tokenizer: Option<&ModelTokenizer>) -> Result<Self, SpecError> {
        let shown = path.display();
        let bad = |m: String| SpecError(format!("prompts file {shown}: {m}"));
        let meta = std::fs::metadata(path).map_err(|e| bad(e.to_string()))?;
        if meta.len() > MAX_PROMPTS_BYTES {
            return Err(bad(format!(
                "{} bytes; at most {MAX_PROMPTS_BYTES} are read",
                meta.len()
            )));
        }
        let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
        let mut out = Vec::new();
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let n = i + 1;
            let line = line.map_err(|e| bad(format!("line {n}: {e}")))?;
            if line.trim().is_empty() {
                continue;
            }
            #[derive(serde::Deserialize)]
            #[serde(deny_unknown_fields)]
            struct Line {
                prompt: String,
                #[serde(default)]
                max_tokens: Option<u32>,
            }
            let l: Line = serde_json::from_str(&line)
                .map_err(|e| bad(format!("line {n}: {e}; expected {{\"prompt\": \"...\"}}")))?;
            if l.prompt.is_empty() {
                return Err(bad(format!("line {n}: the prompt is empty")));
            }
            if l.max_tokens == Some(0) {
                return Err(bad(format!("line {n}: max_tokens must be at least 1")));
            }
            let tokens = match tokenizer {
                Some(t) => Some(
                    t.encode(&l.prompt)
                        .map_err(|e| bad(format!("line {n}: {e}")))?
                        .len() as u32,
                ),
                None => None,
            };
            out.push(Prompt {
                text: l.prompt,
                tokens,
                max_tokens: l.max_tokens,
            });
            if out.len() > MAX_PROMPTS {
                return Err(bad(format!("more than {MAX_PROMPTS} prompts")));
            }
        }
        if out.is_empty() {
            return Err(bad("no prompts".into()));
        }
        Ok(PromptSource::File(out))
    }

    /// Whether token counts are exact.
    pub fn exact(&self) -> bool {
        match self {
            PromptSource::Generated { tokenizer, .. } => tokenizer.is_some(),
            PromptSource::File(p) => p.iter().all(|p| p.tokens.is_some()),
        }
    }

    /// A prompt of `len` tokens (generated) or a sampled one (file).
    pub fn prompt(&self, len: u32, rng: &mut impl Rng) -> Prompt {
        match self {
            PromptSource::File(p) => p.choose(rng).expect("not empty").clone(),
            PromptSource::Generated { words, tokenizer } => {
                let mut picked: Vec<&str> = (0..len)
                    .map(|_| words.choose(rng).expect("not empty").as_str())
                    .collect();
                let Some(t) = tokenizer else {
                    return Prompt {
                        text: picked.concat(),
                        tokens: None,
                        max_tokens: None,
                    };
                };
                // Converge on the exact count: each step moves it by about one.
                for _ in 0..64 {
                    let text = picked.concat();
                    let n = t.encode(&text).map(|v| v.len()).unwrap_or(0) as u32;
                    if n == len {
                        return Prompt {
                            text,
                            tokens: Some(n),
                            max_tokens: None,
                        };
                    }
                    if n > len && picked.len() > 1 {
                        picked.pop();
                    } else {
                        picked.push(words.choose(rng).expect("not empty"));
                    }
                }
                let text = picked.concat();
                let n = t.encode(&text).map(|v| v.len() as u32).ok();
                Prompt {
                    text,
                    tokens: n,
                    max_tokens: None,
                }
            }
        }
    }
}

/// Vocabulary entries that are a space plus 2 to 8 lowercase ASCII letters
/// and encode back to themselves alone.
fn single_token_words(t: &ModelTokenizer) -> Result<Vec<String>, SpecError> {
    let mut words = Vec::new();
    for id in 0..t.vocab_size() as u32 {
        if t.is_special(id) {
            continue;
        }
        let Some(tok) = t.id_to_token(id) else {
            continue;
        };
        // Byte-level BPE writes the leading space as `Ġ`; SentencePiece as `▁`.
        let Some(rest) = tok.strip_prefix('Ġ').or_else(|| tok.strip_prefix('▁')) else {
            continue;
        };
        if !(2..=8).contains(&rest.len()) || !rest.bytes().all(|b| b.is_ascii_lowercase()) {
            continue;
        }
        let word = format!(" {rest}");
        if t.encode(&word).ok().as_deref().and_then(<[u32]>::last) == Some(&id) {
            words.push(word);
        }
        if words.len() >= 4000 {
            break;
        }
    }
    if words.len() < 50 {
        return Err(SpecError(format!(
            "the tokenizer has only {} single-token words; exact prompt lengths need a \
             byte-level BPE or SentencePiece vocabulary",
            words.len()
        )));
    }
    Ok(words)
}
