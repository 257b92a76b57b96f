//! The served vocabulary as llguidance sees it: every token's bytes in a
//! token trie, special tokens behind llguidance's marker byte so a grammar
//! never produces them as text, and the parser factory built over it once.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};

use super::constraint::first_line;
use super::{Constraint, GrammarError, StructuredOutput};
use crate::tokenizer::ModelTokenizer;

/// Compiles response formats for one tokenizer. Cheap to clone.
#[derive(Clone)]
pub struct Grammars {
    factory: Arc<ParserFactory>,
    vocab_size: usize,
}

impl std::fmt::Debug for Grammars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grammars")
            .field("vocab_size", &self.vocab_size)
            .finish_non_exhaustive()
    }
}

impl Grammars {
    /// Builds the token trie and parser factory of `tokenizer` (tens of
    /// milliseconds for a 50k vocabulary; done once per model).
    pub fn new(tokenizer: &ModelTokenizer) -> Result<Self, GrammarError> {
        let vocab_size = tokenizer.vocab_size();
        let words: Vec<Vec<u8>> = (0..vocab_size as u32)
            .map(|id| {
                let bytes = tokenizer.token_bytes(id);
                if tokenizer.is_special(id) {
                    let mut w = Vec::with_capacity(bytes.len() + 1);
                    w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                    w.extend_from_slice(&bytes);
                    w
                } else {
                    bytes
                }
            })
            .collect();
        let info = TokRxInfo {
            vocab_size: vocab_size as u32,
            tok_eos: tokenizer.eos_token_id(),
            tok_bos: tokenizer.bos_token_id(),
            tok_pad: tokenizer.pad_token_id(),
            tok_unk: tokenizer.unknown_token_id(),
            tok_end_of_turn: None,
        };
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| GrammarError::Vocabulary(e.to_string()))?;
        factory.quiet();
        *factory.limits_mut() = limits();
        Ok(Grammars {
            factory: Arc::new(factory),
            vocab_size,
        })
    }

    /// Tokens the grammar knows; ids at or past it are always masked.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// A fresh constraint for one sequence. The error names what in the
    /// schema llguidance cannot enforce.
    pub fn compile(&self, format: &StructuredOutput) -> Result<Constraint, GrammarError> {
        format.validate()?;
        let grammar = TopLevelGrammar::from_json_schema(format.schema());
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| GrammarError::Compile(first_line(&e.to_string())))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(GrammarError::Compile(first_line(&e)));
        }
        Constraint::new(matcher, self.vocab_size).map_err(GrammarError::Compile)
    }
}

/// What one request's grammar may cost, whatever its schema: llguidance's
/// defaults for time (lexer fuel and Earley items per mask, about 20 ms of
/// work at most), with fewer lexer states (each 1-2 kB, built lazily while
/// decoding: 50,000 bound one grammar's lexer to about 100 MB rather than
/// 500), and no grammar echoed into error messages.
fn limits() -> llguidance::api::ParserLimits {
    llguidance::api::ParserLimits {
        max_lexer_states: 50_000,
        verbose_errors: false,
        ..Default::default()
    }
}
