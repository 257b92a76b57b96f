//! OpenAI-compatible request and response bodies for chat completions,
//! completions and model listing.
//!
//! Requests keep every field the OpenAI API defines that changes the result,
//! even those stoker does not serve yet (`n`, `tools`, `response_format`, ...), so the
//! API can refuse them by name instead of silently ignoring them. Fields the
//! API does not know are ignored, as OpenAI clients expect.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// `stop`: one string or a list of up to four.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum StopSpec {
    One(String),
    Many(Vec<String>),
}

impl StopSpec {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StopSpec::One(s) => vec![s],
            StopSpec::Many(v) => v,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and empty `choices`) before `[DONE]`.
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// A message's content: a string, or an array of content parts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

/// One content part. Only `text` parts are served; others are refused by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatMessageIn {
    /// `system`, `developer` (treated as system), `user`, `assistant` or
    /// `tool`.
    pub role: String,
    /// Required except on an assistant message with `tool_calls`.
    #[serde(default)]
    pub content: Option<MessageContent>,
    #[serde(default)]
    pub name: Option<String>,
    /// An assistant's earlier calls; each `function.arguments` must be a
    /// JSON object as text.
    #[serde(default)]
    #[schema(value_type = Option<Vec<ToolCallOut>>)]
    pub tool_calls: Option<Value>,
    /// On a `tool` message: the id of the call it answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
}

/// One function the model may call (`tools[]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolDef {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionDef,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionDef {
    /// 1-64 of `a-z A-Z 0-9 _ -`, unique among the tools.
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    /// A JSON schema of the arguments (an object).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Value>,
    /// Accepted; calls made under `tool_choice` `required` or a named
    /// function always match the parameters, others are parsed as written.
    #[serde(default)]
    pub strict: Option<bool>,
}

/// A call the model made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolCallOut {
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCallOut,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FunctionCallOut {
    pub name: String,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// A call in a stream chunk (`delta.tool_calls[]`): sent whole, in one
/// chunk, once the output has ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolCallDelta {
    pub index: u32,
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCallOut,
}

/// Declares a generation request (chat or completions): its own fields, then
/// the sampling fields both share, written once here so the two requests
/// cannot drift apart. The fields stay plain fields (no `#[serde(flatten)]`),
/// so a wrong type still names its field in the 400 and the OpenAPI schema
/// lists them as properties of each request.
macro_rules! generation_request {
    ($(#[$meta:meta])* pub struct $name:ident { $($own:tt)* }) => {
        $(#[$meta])*
        pub struct $name {
            $($own)*
            #[serde(default)]
            pub stream: Option<bool>,
            #[serde(default)]
            pub stream_options: Option<StreamOptions>,
            #[serde(default)]
            pub temperature: Option<f64>,
            #[serde(default)]
            pub top_p: Option<f64>,
            /// Extension (vLLM): keep only the k most likely tokens.
            #[serde(default)]
            pub top_k: Option<i64>,
            #[serde(default)]
            pub seed: Option<i64>,
            #[serde(default)]
            pub stop: Option<StopSpec>,
            /// End-user id; routes rollouts by a stable hash. Never the tenant.
            #[serde(default)]
            pub user: Option<String>,
            /// Choices to generate, 1 to 16 (each with its own seed, `seed + i`
            /// when `seed` is given); the prompt is computed once for all of them.
            #[serde(default)]
            #[schema(minimum = 1, maximum = 16)]
            pub n: Option<i64>,
            /// `auto`/`default` (interactive lane) or `flex`: the batch lane, which
            /// yields to interactive traffic and skips edge admission.
            #[serde(default)]
            pub service_tier: Option<String>,
            /// Extension (vLLM): keep generating past the end-of-sequence token until
            /// `max_tokens`, for benchmarks that need exact output lengths.
            #[serde(default)]
            pub ignore_eos: Option<bool>,
            /// -2 to 2: lowers the logit of every token generated so far once.
            #[serde(default)]
            pub presence_penalty: Option<f64>,
            /// -2 to 2: lowers the logit of every token generated so far once per
            /// occurrence.
            #[serde(default)]
            pub frequency_penalty: Option<f64>,
            /// Token id (as a string) to a bias from -100 to 100, added to its logit
            /// before sampling; at most 1024 entries.
            #[serde(default)]
            #[schema(value_type = Option<std::collections::HashMap<String, f64>>)]
            pub logit_bias: Option<Value>,
            /// Extension (vLLM): above 1 discourages, below 1 encourages every token
            /// of the prompt and the output (positive logits divided, negative
            /// multiplied); 1 is off; at most 10.
            #[serde(default)]
            pub repetition_penalty: Option<f64>,
            /// Extension (vLLM): generate at least this many tokens before the
            /// end-of-sequence token or a stop string may end the output.
            #[serde(default)]
            pub min_tokens: Option<i64>,
            /// Extension (vLLM): keep the matched stop string at the end of the
            /// output.
            #[serde(default)]
            pub include_stop_str_in_output: Option<bool>,
            /// `text`, `json_object` or `json_schema`: the output is constrained
            /// while decoding to parse as JSON (valid against the schema), whatever
            /// `strict` says. Compact JSON: no whitespace between tokens.
            #[serde(default)]
            #[schema(value_type = Option<ResponseFormat>)]
            pub response_format: Option<Value>,
        }
    };
}

generation_request! {
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
    pub struct ChatCompletionRequest {
        /// A model id from `GET /v1/models`.
        pub model: String,
        pub messages: Vec<ChatMessageIn>,
        /// Deprecated alias of `max_completion_tokens`.
        #[serde(default)]
        pub max_tokens: Option<i64>,
        #[serde(default)]
        pub max_completion_tokens: Option<i64>,
        /// Return the log probability of each output token
        /// (`choices[].logprobs.content`).
        #[serde(default)]
        pub logprobs: Option<bool>,
        /// 0-20 most likely alternatives per output token; needs `logprobs`.
        #[serde(default)]
        pub top_logprobs: Option<i64>,
        /// Functions the model may call, at most 128. They are rendered into
        /// the prompt by the served chat template, and the model's calls are
        /// read back in that template family's format (Hermes and Qwen
        /// `<tool_call>`, Llama 3.x JSON, Mistral `[TOOL_CALLS]`).
        #[serde(default)]
        #[schema(value_type = Option<Vec<ToolDef>>)]
        pub tools: Option<Value>,
        /// `none`, `auto` (the default with tools; needs a template that
        /// renders tools in a format named under `tools`), `required`, or
        /// `{"type": "function", "function": {"name": ..}}`. `required` and a
        /// named function are enforced while decoding: the call always parses
        /// and its arguments match the function's parameters.
        #[serde(default)]
        #[schema(value_type = Option<Object>)]
        pub tool_choice: Option<Value>,
        #[serde(default)]
        #[schema(value_type = Option<Object>)]
        pub functions: Option<Value>,
    }
}

/// `response_format` of chat and completions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ResponseFormat {
    /// `text`, `json_object` or `json_schema`.
    #[serde(rename = "type")]
    #[schema(pattern = "^(text|json_object|json_schema)$")]
    pub kind: String,
    /// With `json_schema`: the schema.
    #[serde(default)]
    pub json_schema: Option<JsonSchemaFormat>,
}

/// A named JSON schema (`response_format.json_schema`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JsonSchemaFormat {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    /// The JSON schema (at most 64 KiB serialized). What llguidance cannot
    /// enforce is a 400 naming the part.
    #[schema(value_type = Object)]
    pub schema: Value,
    /// Accepted; the schema is enforced either way.
    #[serde(default)]
    pub strict: Option<bool>,
}

/// `prompt` of a completion: text, or token ids, singly or as a one-item list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum PromptSpec {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<i64>),
    TokenLists(Vec<Vec<i64>>),
}

generation_request! {
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
    pub struct CompletionRequest {
        pub model: String,
        pub prompt: PromptSpec,
        /// Defaults to 16, as in OpenAI's API; 0 only with `echo`.
        #[serde(default)]
        pub max_tokens: Option<i64>,
        #[serde(default)]
        pub best_of: Option<i64>,
        /// Put the prompt before the output, in `text` and (with `logprobs`)
        /// in the log probabilities, each prompt token scored given the ones
        /// before it. With `max_tokens: 0` it scores a text without generating.
        #[serde(default)]
        pub echo: Option<bool>,
        #[serde(default)]
        pub suffix: Option<String>,
        /// Log probabilities of each output token and of up to this many (0-20)
        /// most likely alternatives, in the legacy completions shape.
        #[serde(default)]
        pub logprobs: Option<i64>,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    #[serde(default)]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatMessageOut {
    pub role: String,
    /// Null when the message is only tool calls.
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatChoice {
    pub index: u32,
    pub message: ChatMessageOut,
    /// `stop`, `length`, or `tool_calls` when the model called tools.
    pub finish_reason: String,
    /// Set when the request asked for `logprobs`.
    pub logprobs: Option<ChatLogprobs>,
}

/// `choices[].logprobs` of a chat completion or chunk: one entry per output
/// token. Log probabilities are the log-softmax of the model's raw logits,
/// before temperature, top-k, top-p, penalties or bias; a masked token has
/// -9999.0.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatTokenLogprob {
    /// The token's text (U+FFFD where its bytes are not whole UTF-8).
    pub token: String,
    pub logprob: f32,
    /// The token's bytes.
    pub bytes: Vec<u8>,
    /// The `top_logprobs` most likely tokens at this position, most likely
    /// first.
    pub top_logprobs: Vec<TopLogprob>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// `choices[].logprobs` of a completion (the legacy shape), one entry per
/// token in each list: with `echo`, the prompt's tokens first, then the
/// output's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    /// Null for the prompt's first token, which nothing precedes.
    pub token_logprobs: Vec<Option<f32>>,
    /// Token text to log probability of the `logprobs` most likely tokens;
    /// null for the prompt's first token.
    pub top_logprobs: Vec<Option<std::collections::BTreeMap<String, f32>>>,
    /// Where each token's text starts in `text` (characters), counted from
    /// the start of this choice's text across all chunks of a stream.
    pub text_offset: Vec<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatCompletion {
    pub id: String,
    /// Always `chat.completion`.
    pub object: String,
    pub created: u64,
    pub model: String,
    /// Names the exact model revision that produced the answer.
    pub system_fingerprint: String,
    pub choices: Vec<ChatChoice>,
    pub usage: Usage,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatDelta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatChunkChoice {
    pub index: u32,
    pub delta: ChatDelta,
    pub finish_reason: Option<String>,
    /// This chunk's tokens, when the request asked for `logprobs`.
    pub logprobs: Option<ChatLogprobs>,
}

/// One SSE `data:` payload of a streamed chat completion.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    /// Always `chat.completion.chunk`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<ChatChunkChoice>,
    /// Present (null) on every chunk when `include_usage` is set; filled on the
    /// last one, whose `choices` is empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    /// `stop` or `length`; null on streamed chunks before the last.
    pub finish_reason: Option<String>,
    /// Set when the request asked for `logprobs`.
    pub logprobs: Option<CompletionLogprobs>,
}

/// A completion, or one SSE `data:` payload of a streamed one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Completion {
    pub id: String,
    /// Always `text_completion`.
    pub object: String,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelCard {
    pub id: String,
    /// Always `model`.
    pub object: String,
    pub created: u64,
    pub owned_by: String,
    /// The revision serving this model id.
    pub revision: String,
    /// SHA-256 of the model artifact.
    pub sha256: String,
    /// Context window in tokens.
    pub max_model_len: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelList {
    /// Always `list`.
    pub object: String,
    pub data: Vec<ModelCard>,
}

/// `POST /tokenize` (vLLM's shape): either a `prompt` or chat `messages`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TokenizeRequest {
    /// The model (deployment) whose tokenizer to use; the default deployment when absent.
    #[serde(default)]
    pub model: Option<String>,
    /// Text to tokenize as `/v1/completions` would.
    #[serde(default)]
    pub prompt: Option<String>,
    /// A conversation to render with the model's chat template, then tokenize as
    /// `/v1/chat/completions` would.
    #[serde(default)]
    pub messages: Option<Vec<ChatMessageIn>>,
    /// Add the model's special tokens (BOS where its tokenizer adds one). Default
    /// true for `prompt`, false for `messages` (the template places them), as in vLLM.
    #[serde(default)]
    pub add_special_tokens: Option<bool>,
    /// With `messages`: end with the assistant turn's opening (default true).
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// Also return each token's text (`token_strs`).
    #[serde(default)]
    pub return_token_strs: Option<bool>,
}

/// The answer to `POST /tokenize`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TokenizeResponse {
    pub count: usize,
    /// The model's context window (the most tokens a prompt plus output may hold).
    pub max_model_len: usize,
    pub tokens: Vec<u32>,
    /// Each token's text, when `return_token_strs` was set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_strs: Option<Vec<String>>,
}

/// `POST /detokenize` (vLLM's shape).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DetokenizeRequest {
    #[serde(default)]
    pub model: Option<String>,
    /// Token ids; each must be inside the vocabulary.
    pub tokens: Vec<i64>,
}

/// The answer to `POST /detokenize`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DetokenizeResponse {
    pub prompt: String,
}
