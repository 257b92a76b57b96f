//! The executor's error types: one enum for loading a model, one for a request
//! the engine refuses or fails. The API layer maps these to HTTP in one place.

use std::path::PathBuf;

use crate::ids::Lane;

/// Why a model artifact could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("model file not found: {0}")]
    NotFound(PathBuf),
    #[error("cannot read model file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("not a GGUF file: {0}")]
    NotGguf(String),
    #[error("not a model directory: {0}")]
    NotModelDirectory(String),
    #[error("safetensors file {path}: {reason}")]
    BadSafetensors { path: PathBuf, reason: String },
    #[error(
        "unsupported Hugging Face architecture `{0}` (supported: {list})",
        list = crate::arch::supported_hf_classes().join(", ")
    )]
    UnsupportedHfArchitecture(String),
    #[error("truncated GGUF file: {0}")]
    Truncated(String),
    #[error(
        "unsupported model architecture `{0}` (supported: {supported})",
        supported = crate::arch::SUPPORTED_ARCHITECTURES.join(", ")
    )]
    UnsupportedArchitecture(String),
    #[error("missing metadata key `{0}`")]
    MissingMetadata(String),
    #[error("bad metadata `{0}`: {1}")]
    BadMetadata(String, String),
    #[error("missing tensor `{0}`")]
    MissingTensor(String),
    #[error("tensor `{name}` has shape {got:?}, expected {expected:?}")]
    BadTensorShape {
        name: String,
        got: Vec<usize>,
        expected: Vec<usize>,
    },
    #[error("tensor `{0}`: {1}")]
    BadTensor(String, String),
    #[error(
        "tensor type {0} is not supported (supported: {list})",
        list = crate::kernels::SUPPORTED_TENSOR_TYPES.join(", ")
    )]
    UnsupportedTensorType(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("device `{0}` is not available in this build")]
    DeviceUnavailable(String),
    #[error(
        "kv cache budget of {budget} bytes holds {blocks} blocks; at least {needed} are needed"
    )]
    KvBudgetTooSmall {
        budget: usize,
        blocks: usize,
        needed: usize,
    },
    #[error("engine configuration: {0}")]
    Config(String),
}

/// Why a request was refused before it ran. Every variant is the caller's
/// fault and maps to a 400-class error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValidationError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("the prompt has {prompt} tokens; this model's context window is {context} tokens")]
    PromptTooLong { prompt: usize, context: usize },
    #[error(
        "the prompt ({prompt} tokens) plus max_tokens ({max_tokens}) exceeds the context window of {context} tokens"
    )]
    ContextLengthExceeded {
        prompt: usize,
        max_tokens: usize,
        context: usize,
    },
    #[error(
        "max_tokens must be at least 1 (0 only when the prompt is scored: `echo` on completions)"
    )]
    ZeroMaxTokens,
    #[error("max_tokens is {got}; the maximum is {max}")]
    MaxTokensTooLarge { got: usize, max: usize },
    #[error("the prompt has {got} tokens; the maximum input is {max} tokens")]
    InputTooLong { got: usize, max: usize },
    #[error("temperature must be a finite number between 0 and 2, got {0}")]
    BadTemperature(f32),
    #[error("top_p must be in (0, 1], got {0}")]
    BadTopP(f32),
    #[error("top_k must be at least 1 when given")]
    BadTopK,
    #[error("at most {max} stop sequences are allowed, got {got}")]
    TooManyStops { got: usize, max: usize },
    #[error("stop sequences must be non-empty and at most {max} bytes")]
    BadStop { max: usize },
    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfRange { id: u32, vocab: usize },
    #[error("at most {max} top log probabilities per token, got {got}")]
    TooManyTopLogprobs { got: usize, max: usize },
    #[error("{name} must be between -2 and 2, got {value}")]
    BadPenalty { name: &'static str, value: f32 },
    #[error(
        "repetition_penalty must be greater than 0 and at most {max}, got {0}",
        max = crate::limits::MAX_REPETITION_PENALTY
    )]
    BadRepetitionPenalty(f32),
    #[error("at most {max} logit_bias entries are allowed, got {got}")]
    TooManyLogitBiases { got: usize, max: usize },
    #[error("logit_bias for token {id} is {bias}; it must be between -100 and 100")]
    BadLogitBias { id: u32, bias: f32 },
    #[error("logit_bias token ids must be sorted and unique")]
    UnsortedLogitBias,
    #[error("logit_bias names token id {id}, outside the vocabulary of {vocab} tokens")]
    LogitBiasOutOfVocabulary { id: u32, vocab: usize },
    #[error("min_tokens ({min}) must be at most max_tokens ({max})")]
    MinTokensAboveMax { min: usize, max: usize },
    #[error("response_format: {0}")]
    ResponseFormat(#[from] crate::structured::GrammarError),
}

/// Why the engine refused or ended a request.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("the {lane:?} waiting queue is full")]
    QueueFull { lane: Lane },
    #[error("the request cannot fit in the KV cache available to its lane")]
    CannotFit,
    #[error("the engine is shutting down")]
    ShuttingDown,
    #[error("the engine stopped: {0}")]
    Stopped(String),
    #[error("internal engine error: {0}")]
    Internal(String),
}
