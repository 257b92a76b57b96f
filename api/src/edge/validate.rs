//! Turns OpenAI request bodies into engine requests, with the deployment's
//! limits. Features we do not serve are refused by name (400), never ignored;
//! fields we do not know are ignored, as OpenAI clients expect. Validation
//! tokenizes with the served revision's tokenizer, so the context-window check
//! counts real tokens.

use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::Value;
use stoker_executor::chat_template::{ChatMessage, RenderOptions, TemplateError};
use stoker_executor::model::GenerationDefaults;
use stoker_executor::{Lane, SamplingParams, TenantId, ValidRequest};
use stoker_schemas::openai::{
    ChatCompletionRequest, CompletionRequest, MessageContent, PromptSpec, StopSpec,
};

pub use crate::edge::echo::Echo;
use crate::edge::request_fields::{logit_bias, response_format};
use crate::edge::routing::Target;
use crate::edge::tools::{self, ToolMode};
use crate::error::{ApiError, truncate};

/// Longest `user` value accepted.
pub const MAX_USER_BYTES: usize = 256;
/// Most messages in one conversation.
pub const MAX_MESSAGES: usize = 4096;
/// Longest deadline a client may ask for.
pub const MAX_DEADLINE: Duration = Duration::from_secs(24 * 3600);
/// `max_tokens` of a completion when the client sends none (OpenAI's default).
pub const COMPLETION_DEFAULT_MAX_TOKENS: usize = 16;

/// Most choices (`n`) one request may ask for.
pub const MAX_CHOICES: usize = 16;

/// A request ready for admission and the engine.
#[derive(Debug)]
pub struct Prepared {
    pub request: ValidRequest,
    pub stream: bool,
    pub include_usage: bool,
    /// Choices to generate (`n`), 1 to [`MAX_CHOICES`].
    pub n: usize,
    /// How the output is read as tool calls (chat with `tools`).
    pub tools: Option<ToolMode>,
    /// The prompt to put before the output (completions with `echo`).
    pub echo: Option<Echo>,
}

impl Prepared {
    pub fn prompt_tokens(&self) -> usize {
        self.request.prompt().len()
    }
    /// Output tokens the request may generate, over all its choices.
    pub fn max_tokens(&self) -> usize {
        self.request.params().max_tokens * self.n
    }
}

/// The sampling fields chat and completions share.
#[derive(Default)]
struct Common<'a> {
    stream: Option<bool>,
    include_usage: Option<bool>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<i64>,
    seed: Option<i64>,
    stop: Option<StopSpec>,
    user: Option<&'a str>,
    n: Option<i64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    logit_bias: Option<&'a Value>,
    repetition_penalty: Option<f64>,
    min_tokens: Option<i64>,
    include_stop_str_in_output: Option<bool>,
    service_tier: Option<&'a str>,
    ignore_eos: Option<bool>,
    response_format: Option<&'a Value>,
}

/// The [`Common`] of a chat or completion request: both declare the shared
/// sampling fields through `stoker_schemas::openai`'s `generation_request!`,
/// so their names are the same.
macro_rules! common_of {
    ($req:expr) => {
        Common {
            stream: $req.stream,
            include_usage: $req.stream_options.as_ref().and_then(|o| o.include_usage),
            temperature: $req.temperature,
            top_p: $req.top_p,
            top_k: $req.top_k,
            seed: $req.seed,
            stop: $req.stop.clone(),
            user: $req.user.as_deref(),
            n: $req.n,
            presence_penalty: $req.presence_penalty,
            frequency_penalty: $req.frequency_penalty,
            logit_bias: $req.logit_bias.as_ref(),
            repetition_penalty: $req.repetition_penalty,
            min_tokens: $req.min_tokens,
            include_stop_str_in_output: $req.include_stop_str_in_output,
            service_tier: $req.service_tier.as_deref(),
            ignore_eos: $req.ignore_eos,
            response_format: $req.response_format.as_ref(),
        }
    };
}

/// `service_tier`: `flex` runs in the batch lane (it yields to interactive
/// traffic and skips edge admission); `auto`, `default` and none are
/// interactive. Anything else is refused by name rather than served at a
/// tier the client did not ask for.
pub(crate) fn lane_of(tier: Option<&str>) -> Result<Lane, ApiError> {
    match tier {
        None | Some("auto") | Some("default") => Ok(Lane::Interactive),
        Some("flex") => Ok(Lane::Batch),
        Some(other) => Err(ApiError::invalid(
            format!(
                "`service_tier` must be one of auto, default, flex; got `{}`",
                truncate(other, 32)
            ),
            "service_tier",
        )),
    }
}

/// `n`: 1 to [`MAX_CHOICES`].
fn choices(n: Option<i64>) -> Result<usize, ApiError> {
    match n {
        None => Ok(1),
        Some(n) if (1..=MAX_CHOICES as i64).contains(&n) => Ok(n as usize),
        Some(n) => Err(ApiError::invalid(
            format!("`n` must be between 1 and {MAX_CHOICES}, got {n}"),
            "n",
        )),
    }
}

/// A model's default as the request's type (see [`common_params`]).
fn model_default(v: Option<f32>) -> Option<f64> {
    v.map(f64::from)
}

/// The request's sampling parameters; fields it leaves out take the model's
/// own defaults (`g`, a directory's generation config), else OpenAI's.
fn common_params(c: &Common<'_>, g: &GenerationDefaults) -> Result<SamplingParams, ApiError> {
    choices(c.n)?;
    let penalty = |name: &str, v: Option<f64>, default: f32| -> Result<f32, ApiError> {
        match v {
            None => Ok(default),
            Some(x) if x.is_finite() => Ok(x as f32),
            Some(_) => Err(ApiError::invalid(
                format!("`{name}` must be a number"),
                name,
            )),
        }
    };
    let presence_penalty = penalty("presence_penalty", c.presence_penalty, 0.0)?;
    let frequency_penalty = penalty("frequency_penalty", c.frequency_penalty, 0.0)?;
    let repetition_penalty = c.repetition_penalty.or(model_default(g.repetition_penalty));
    let repetition_penalty = penalty("repetition_penalty", repetition_penalty, 1.0)?;
    let logit_bias = logit_bias(c.logit_bias)?;
    let min_tokens = match c.min_tokens {
        None => 0,
        Some(n) if n >= 0 => n.min(u32::MAX as i64) as usize,
        Some(_) => {
            return Err(ApiError::invalid(
                "`min_tokens` must be at least 0",
                "min_tokens",
            ));
        }
    };
    if let Some(u) = c.user
        && u.len() > MAX_USER_BYTES
    {
        return Err(ApiError::invalid(
            format!("`user` must be at most {MAX_USER_BYTES} bytes"),
            "user",
        ));
    }
    let temperature = c
        .temperature
        .or(model_default(g.temperature))
        .unwrap_or(1.0);
    let top_p = c.top_p.or(model_default(g.top_p)).unwrap_or(1.0);
    let top_k = match c.top_k {
        None => g.top_k,
        Some(0) | Some(-1) => None,
        Some(k) if k >= 1 => Some(k.min(u32::MAX as i64) as usize),
        Some(_) => {
            return Err(ApiError::invalid(
                "`top_k` must be -1 or 0 (disabled) or at least 1",
                "top_k",
            ));
        }
    };
    let stop = c.stop.clone().map(StopSpec::into_vec).unwrap_or_default();
    let structured = response_format(c.response_format)?;
    Ok(SamplingParams {
        // Range checks happen in ValidRequest::new; non-finite f64 values
        // stay non-finite as f32 and are refused there.
        temperature: temperature as f32,
        top_p: top_p as f32,
        top_k,
        seed: c.seed.map(|s| s as u64),
        max_tokens: 0,
        stop,
        stop_token_ids: Vec::new(),
        stop_at_eos: !c.ignore_eos.unwrap_or(false),
        // Set by each route, whose fields differ.
        logprobs: None,
        prompt_logprobs: None,
        // Ranges are checked in ValidRequest::new, ids against the vocabulary.
        presence_penalty,
        frequency_penalty,
        repetition_penalty,
        logit_bias,
        min_tokens,
        include_stop_str_in_output: c.include_stop_str_in_output.unwrap_or(false),
        structured,
    })
}

fn max_tokens(v: Option<i64>, param: &str) -> Result<Option<usize>, ApiError> {
    match v {
        None => Ok(None),
        Some(n) if n < 1 => Err(ApiError::invalid(
            format!("`{param}` must be at least 1"),
            param,
        )),
        Some(n) => Ok(Some(n as usize)),
    }
}

#[allow(clippy::too_many_arguments)]
fn finish(
    prompt: Vec<u32>,
    mut params: SamplingParams,
    requested_max: Option<usize>,
    default_max: Option<usize>,
    c: &Common<'_>,
    lane: Lane,
    tenant: &str,
    t: &Target,
) -> Result<Prepared, ApiError> {
    let n = choices(c.n)?;
    let stream = c.stream.unwrap_or(false);
    let include_usage = c.include_usage;
    let l = &t.limits;
    params.max_tokens = match requested_max.or(default_max) {
        Some(n) => n,
        // Like vLLM: fill the context, within the deployment's output cap.
        None => l
            .context_window
            .saturating_sub(prompt.len())
            .min(l.max_output_tokens)
            .max(1),
    };
    if include_usage.is_some() && !stream {
        return Err(ApiError::invalid(
            "`stream_options` is only allowed when `stream` is true",
            "stream_options",
        ));
    }
    // The context window is the first limit a client meets; name it even
    // when max_tokens alone also passes the output cap.
    if prompt.len() + params.max_tokens > l.context_window {
        return Err(stoker_executor::ValidationError::ContextLengthExceeded {
            prompt: prompt.len(),
            max_tokens: params.max_tokens,
            context: l.context_window,
        }
        .into());
    }
    let mut request = ValidRequest::new(prompt, params, lane, TenantId(tenant.to_string()), l)?;
    if request.needs_constraint() {
        // Compiled here so a schema llguidance cannot enforce is a 400
        // before admission; the engine takes the compiled grammar as it is.
        let grammars = t
            .served
            .artifact
            .tokenizer()
            .grammars()
            .map_err(stoker_executor::ValidationError::from)?;
        request.compile_constraint(grammars)?;
    }
    Ok(Prepared {
        request,
        stream,
        include_usage: include_usage.unwrap_or(false),
        n,
        tools: None,
        echo: None,
    })
}

fn template_error(e: TemplateError) -> ApiError {
    match e {
        TemplateError::Raised(m) => ApiError::invalid(
            format!("the chat template rejected the conversation: {m}"),
            "messages",
        ),
        TemplateError::ResourceLimit(m) => ApiError::invalid(
            format!("the conversation is too large to render: {m}"),
            "messages",
        ),
        // The template loaded, so what fails now is this conversation's shape
        // (a field the template reads that this request lacks, a value of
        // another type): the client's to change, as vLLM answers it.
        TemplateError::Render(m) => ApiError::invalid(
            format!("the chat template could not render this conversation: {m}"),
            "messages",
        ),
        // Checked when the model loaded: reaching them here is a bug.
        e @ (TemplateError::Syntax(_) | TemplateError::WrongType) => {
            ApiError::Internal(e.to_string())
        }
    }
}

pub fn chat(req: ChatCompletionRequest, tenant: &str, t: &Target) -> Result<Prepared, ApiError> {
    let c = common_of!(req);
    let params = common_params(&c, &t.served.artifact.info().generation)?;
    let lane = lane_of(c.service_tier)?;
    if req.functions.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(ApiError::unsupported(
            "functions",
            "the legacy `functions` field (send `tools`)",
        ));
    }
    let template = t.served.artifact.chat_template();
    let plan = tools::plan(
        req.tools.as_ref(),
        req.tool_choice.as_ref(),
        template,
        params.structured.is_some(),
    )?;
    let mut params = params;
    params.logprobs = chat_logprobs(req.logprobs, req.top_logprobs)?;
    let from_tools = plan.constraint.is_some();
    if let Some(c) = plan.constraint {
        params.structured = Some(c);
    }
    let prompt = match chat_prompt(&req.messages, true, plan.render.as_ref(), t) {
        // The template reads the tools' schemas (field types, descriptions);
        // when only the tools make it fail, they are what the client changes.
        Err(e @ ApiError::InvalidValue { .. })
            if plan.render.is_some() && chat_prompt(&req.messages, true, None, t).is_ok() =>
        {
            return Err(ApiError::invalid(
                format!("the tools cannot be rendered by the served chat template: {e}"),
                "tools",
            ));
        }
        r => r?,
    };
    let requested = match max_tokens(req.max_completion_tokens, "max_completion_tokens")? {
        Some(n) => Some(n),
        None => max_tokens(req.max_tokens, "max_tokens")?,
    };
    let mut prepared =
        finish(prompt, params, requested, None, &c, lane, tenant, t).map_err(|e| {
            // A parameters schema llguidance cannot compile is the tools' fault.
            match e {
                ApiError::InvalidValue { message, param }
                    if from_tools && param.as_deref() == Some("response_format") =>
                {
                    let message = message.replacen("response_format", "tools", 1);
                    ApiError::invalid(message, "tools")
                }
                e => e,
            }
        })?;
    prepared.tools = plan.mode;
    Ok(prepared)
}

/// Chat's `logprobs` and `top_logprobs` as the engine takes them: OpenAI
/// refuses `top_logprobs` without `logprobs: true`, and so do we.
fn chat_logprobs(on: Option<bool>, top: Option<i64>) -> Result<Option<usize>, ApiError> {
    match (on.unwrap_or(false), top) {
        (true, top) => Ok(Some(top_logprobs(top.unwrap_or(0), "top_logprobs")?)),
        (false, None) => Ok(None),
        (false, Some(_)) => Err(ApiError::invalid(
            "`top_logprobs` needs `logprobs: true`",
            "top_logprobs",
        )),
    }
}

/// A count of alternatives per token, 0 to 20.
fn top_logprobs(n: i64, param: &'static str) -> Result<usize, ApiError> {
    let max = stoker_executor::logprobs::MAX_TOP_LOGPROBS;
    if (0..=max as i64).contains(&n) {
        Ok(n as usize)
    } else {
        Err(ApiError::invalid(
            format!("`{param}` must be between 0 and {max}, got {n}"),
            param,
        ))
    }
}

/// A conversation rendered with the served model's chat template and tokenized, as
/// the chat route and `POST /tokenize` see it. Roles and content parts are checked
/// here; what is not served is refused by name.
pub fn chat_prompt(
    messages_in: &[stoker_schemas::openai::ChatMessageIn],
    add_generation_prompt: bool,
    tools: Option<&Value>,
    t: &Target,
) -> Result<Vec<u32>, ApiError> {
    if messages_in.is_empty() {
        return Err(ApiError::invalid(
            "`messages` must not be empty",
            "messages",
        ));
    }
    if messages_in.len() > MAX_MESSAGES {
        return Err(ApiError::invalid(
            format!("at most {MAX_MESSAGES} messages are allowed"),
            "messages",
        ));
    }
    let mut messages = Vec::with_capacity(messages_in.len());
    for (i, m) in messages_in.iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" => "assistant",
            "tool" => "tool",
            "function" => {
                return Err(ApiError::unsupported(
                    &format!("messages[{i}].role"),
                    "the legacy `function` role (send `tool`)",
                ));
            }
            _ => {
                return Err(ApiError::invalid(
                    format!(
                        "`messages[{i}].role` must be one of system, developer, user, assistant, tool"
                    ),
                    format!("messages[{i}].role"),
                ));
            }
        };
        let calls = match m.tool_calls.as_ref().filter(|v| !v.is_null()) {
            Some(_) if role != "assistant" => {
                return Err(ApiError::invalid(
                    format!("`messages[{i}].tool_calls` is only allowed on assistant messages"),
                    format!("messages[{i}].tool_calls"),
                ));
            }
            Some(v) => Some(tools::message_calls(
                v,
                &format!("messages[{i}].tool_calls"),
            )?),
            None => None,
        };
        let content = match &m.content {
            Some(MessageContent::Text(t)) => t.clone(),
            Some(MessageContent::Parts(parts)) => {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    let param = format!("messages[{i}].content[{j}]");
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => text.push_str(t),
                        ("text", None) => {
                            return Err(ApiError::MissingField {
                                message: format!("missing required field `{param}.text`"),
                                param: format!("{param}.text"),
                            });
                        }
                        (other, _) => {
                            return Err(ApiError::unsupported(
                                &format!("{param}.type"),
                                &format!("content of type `{}`", truncate(other, 32)),
                            ));
                        }
                    }
                }
                text
            }
            // An assistant turn that only called tools has no text.
            None if calls.is_some() => String::new(),
            None => {
                return Err(ApiError::MissingField {
                    message: format!("missing required field `messages[{i}].content`"),
                    param: format!("messages[{i}].content"),
                });
            }
        };
        let mut message = ChatMessage::new(role, content);
        message.tool_calls = calls;
        message.tool_call_id = m.tool_call_id.clone();
        message.name = m.name.clone();
        messages.push(message);
    }
    let text = t
        .served
        .artifact
        .chat_template()
        .render_prompt(
            &messages,
            &RenderOptions {
                add_generation_prompt,
                tools: tools.cloned(),
                ..RenderOptions::default()
            },
        )
        .map_err(template_error)?;
    t.served
        .artifact
        .tokenizer()
        .encode_chat(&text)
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// Token ids of a completion prompt: the text's tokens (special-token strings become
/// their ids), with the model's BOS (and EOS) when `add_special` is set and its
/// metadata asks for them (`tokenizer.ggml.add_bos_token`), as llama.cpp does for a
/// completion.
pub fn encode_prompt(
    tok: &stoker_executor::tokenizer::ModelTokenizer,
    text: &str,
    add_special: bool,
) -> Result<Vec<u32>, ApiError> {
    tok.encode_with(
        text,
        stoker_executor::tokenizer::EncodeOptions {
            add_special,
            parse_special: true,
        },
    )
    .map_err(|e| ApiError::Internal(e.to_string()))
}

/// Caller-given token ids, each checked against the vocabulary (`param` names the field).
pub fn token_ids(v: &[i64], vocab_size: usize, param: &str) -> Result<Vec<u32>, ApiError> {
    v.iter()
        .map(|&id| {
            if id < 0 || id as usize >= vocab_size {
                Err(ApiError::invalid(
                    format!("token id {id} is outside the vocabulary of {vocab_size} tokens"),
                    param,
                ))
            } else {
                Ok(id as u32)
            }
        })
        .collect()
}

pub fn completion(req: CompletionRequest, tenant: &str, t: &Target) -> Result<Prepared, ApiError> {
    let c = common_of!(req);
    let params = common_params(&c, &t.served.artifact.info().generation)?;
    let lane = lane_of(c.service_tier)?;
    if req.best_of.is_some_and(|b| b > 1) {
        return Err(ApiError::unsupported("best_of", "best_of > 1"));
    }
    if req.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported("suffix", "a suffix (insertion)"));
    }
    let mut params = params;
    params.logprobs = match req.logprobs {
        None => None,
        Some(n) => Some(top_logprobs(n, "logprobs")?),
    };
    let echo = req.echo == Some(true);
    let requested_max = match req.max_tokens {
        // Scoring a text without generating, OpenAI's legacy way.
        Some(0) if echo => Some(0),
        Some(n) if echo && n < 0 => {
            return Err(ApiError::invalid(
                "`max_tokens` must be at least 0 with `echo`",
                "max_tokens",
            ));
        }
        Some(0) => {
            return Err(ApiError::invalid(
                "`max_tokens` must be at least 1 (0 only with `echo`)",
                "max_tokens",
            ));
        }
        v => max_tokens(v, "max_tokens")?,
    };
    if echo {
        // The prompt is scored for `logprobs`; with nothing to generate it
        // is still run (unreported), which is what lets `max_tokens` be 0.
        params.prompt_logprobs = params.logprobs.or((requested_max == Some(0)).then_some(0));
    }
    let tok = t.served.artifact.tokenizer();
    let encode = |text: &str| encode_prompt(tok, text, true);
    let ids = |v: &[i64]| token_ids(v, t.limits.vocab_size, "prompt");
    let many = || ApiError::unsupported("prompt", "more than one prompt per request");
    let prompt = match &req.prompt {
        PromptSpec::Text(t) => encode(t)?,
        PromptSpec::Texts(v) => match v.as_slice() {
            [t] => encode(t)?,
            [] => Vec::new(),
            _ => return Err(many()),
        },
        PromptSpec::Tokens(v) => ids(v)?,
        PromptSpec::TokenLists(v) => match v.as_slice() {
            [t] => ids(t)?,
            [] => Vec::new(),
            _ => return Err(many()),
        },
    };
    let echo = echo
        .then(|| Echo::of(&req.prompt, &prompt, tok, params.logprobs.is_some()))
        .transpose()?;
    let mut prepared = finish(
        prompt,
        params,
        requested_max,
        Some(COMPLETION_DEFAULT_MAX_TOKENS),
        &c,
        lane,
        tenant,
        t,
    )?;
    prepared.echo = echo;
    Ok(prepared)
}

/// `x-stoker-deadline-ms`: how long the client will wait for the first token.
pub fn deadline(headers: &HeaderMap) -> Result<Option<Duration>, ApiError> {
    const H: &str = "x-stoker-deadline-ms";
    let Some(v) = headers.get(H) else {
        return Ok(None);
    };
    let ms = v
        .to_str()
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .ok_or_else(|| {
            ApiError::invalid(
                format!("`{H}` must be a positive integer of milliseconds"),
                H,
            )
        })?;
    Ok(Some(Duration::from_millis(ms).min(MAX_DEADLINE)))
}

#[cfg(test)]
mod tests {
    use stoker_schemas::codes::ErrorCode;

    use super::*;

    #[test]
    fn fields_a_request_leaves_out_take_the_models_defaults() {
        let g = GenerationDefaults {
            temperature: Some(0.6),
            top_p: Some(0.9),
            top_k: Some(20),
            repetition_penalty: Some(1.1),
        };
        let p = common_params(&Common::default(), &g).unwrap();
        assert_eq!((p.temperature, p.top_p, p.top_k), (0.6, 0.9, Some(20)));
        assert_eq!(p.repetition_penalty, 1.1);
        // What the request says wins; `top_k: -1` turns the default off.
        let c = Common {
            temperature: Some(0.0),
            top_p: Some(1.0),
            top_k: Some(-1),
            repetition_penalty: Some(1.0),
            ..Common::default()
        };
        let p = common_params(&c, &g).unwrap();
        assert_eq!((p.temperature, p.top_p, p.top_k), (0.0, 1.0, None));
        assert_eq!(p.repetition_penalty, 1.0);
        // No model defaults: OpenAI's.
        let p = common_params(&Common::default(), &GenerationDefaults::default()).unwrap();
        assert_eq!((p.temperature, p.top_p, p.top_k), (1.0, 1.0, None));
    }

    #[test]
    fn a_conversation_the_template_cannot_render_is_the_clients_400() {
        for e in [
            TemplateError::Raised("roles must alternate".into()),
            TemplateError::ResourceLimit("output too large".into()),
            TemplateError::Render("undefined value".into()),
        ] {
            let api = template_error(e);
            assert_eq!(api.code(), ErrorCode::InvalidValue, "{api}");
            assert!(
                matches!(&api, ApiError::InvalidValue { param: Some(p), .. } if p == "messages"),
                "{api:?}"
            );
        }
        let bug = template_error(TemplateError::Syntax("x".into()));
        assert_eq!(bug.code(), ErrorCode::InternalError);
    }
}
