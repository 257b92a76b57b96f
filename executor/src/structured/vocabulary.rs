//! The served vocabulary as llguidance sees it: every token's bytes in a
//! token trie, special tokens behind llguidance's marker byte so a grammar
//! never produces them as text, and the parser factory built over it once.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};

use super::constraint::first_line;
use super::{Constraint, GrammarError, StructuredOutput};

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

/// What the grammar compiler needs of a tokenizer: every token's bytes and
/// whether it is special, and the ids of its special roles. The tokenizer
/// describes itself this way ([`ModelTokenizer::grammars`]), so this module
/// does not depend on it.
///
/// [`ModelTokenizer::grammars`]: crate::tokenizer::ModelTokenizer::grammars
#[derive(Clone, Debug, Default)]
pub struct Vocabulary {
    /// By token id: the token's bytes and whether it is a special token.
    pub tokens: Vec<(Vec<u8>, bool)>,
    pub eos: u32,
    pub bos: Option<u32>,
    pub pad: Option<u32>,
    pub unk: Option<u32>,
}

impl Grammars {
    /// Builds the token trie and parser factory of a vocabulary (tens of
    /// milliseconds for a 50k vocabulary; done once per model).
    pub fn new(vocab: Vocabulary) -> Result<Self, GrammarError> {
        let vocab_size = vocab.tokens.len();
        let words: Vec<Vec<u8>> = vocab
            .tokens
            .into_iter()
            .map(|(bytes, special)| {
                if special {
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
            tok_eos: vocab.eos,
            tok_bos: vocab.bos,
            tok_pad: vocab.pad,
            tok_unk: vocab.unk,
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
