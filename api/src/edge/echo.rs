//! `echo` on completions: the prompt a response puts before its output, as
//! the client gave it, with the token ids the engine scores.

use stoker_executor::tokenizer::ModelTokenizer;
use stoker_schemas::openai::PromptSpec;

use crate::error::ApiError;

/// A completion's prompt as `echo` returns it: its text (as given, or the
/// given token ids decoded) and its token ids.
#[derive(Clone, Debug)]
pub struct Echo {
    pub text: String,
    pub ids: Vec<u32>,
    /// Whether the engine scores the prompt for this response's
    /// `logprobs` (a `PromptLogprobs` event comes before any text).
    pub scored: bool,
}

impl Echo {
    /// The echo of `spec`, whose tokens are `ids`.
    pub fn of(
        spec: &PromptSpec,
        ids: &[u32],
        tok: &ModelTokenizer,
        scored: bool,
    ) -> Result<Echo, ApiError> {
        let text = match spec {
            PromptSpec::Text(t) => t.clone(),
            PromptSpec::Texts(v) if v.len() == 1 => v[0].clone(),
            _ => tok
                .decode(ids, false)
                .map_err(|e| ApiError::Internal(e.to_string()))?,
        };
        Ok(Echo {
            text,
            ids: ids.to_vec(),
            scored,
        })
    }
}
