//! The model's chat template: turns a conversation into the prompt text.
//!
//! This module owns rendering of the Jinja chat template that ships in the GGUF
//! file (`tokenizer.chat_template`), so a conversation is laid out exactly as the
//! model was trained to see it, and as llama.cpp lays it out. Rendering uses
//! minijinja configured like Hugging Face's `apply_chat_template`, whose jinja2
//! setup llama.cpp's engine reproduces: `trim_blocks`, `lstrip_blocks`, loop
//! controls, `raise_exception`, `strftime_now`, a Python `json.dumps` `tojson`,
//! Python string and dict methods, the `{% generation %}` tag, and the
//! `messages`, `tools` (None when absent), `bos_token`, `eos_token` and
//! `add_generation_prompt` variables plus any extra ones a caller sets (e.g.
//! `enable_thinking`). `executor/tests/tokenizer/llama_cpp_templates.rs` checks
//! llama.cpp's collection of real templates against jinja2's output. Templates
//! come from model files, which we do not fully trust, so every failure is a
//! typed [`TemplateError`] and rendering is bounded: minijinja fuel caps the
//! executed instructions, the recursion limit is lowered, and the output size is
//! capped.

mod python;

use std::collections::HashMap;
use std::io;

use candle_core::quantized::gguf_file;
use minijinja::{Environment, ErrorKind, Value};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::tokenizer::ModelTokenizer;

/// GGUF key of the chat template source.
pub const KEY_CHAT_TEMPLATE: &str = "tokenizer.chat_template";

/// The template used when the GGUF has none: plain ChatML, one
/// `<|im_start|>{role}\n{content}<|im_end|>\n` block per message, then
/// `<|im_start|>assistant\n` when a generation prompt is asked for. It inserts no
/// system message.
pub const FALLBACK_CHATML_TEMPLATE: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\
{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// Instructions one render may execute (minijinja fuel). A ChatML-style template
/// spends a few dozen per message, so this allows conversations of tens of
/// thousands of messages while stopping a looping template within milliseconds.
pub const RENDER_FUEL: u64 = 2_000_000;

/// Deepest macro or include recursion a template may use. Chat templates need
/// little; a low limit keeps a recursing template far from the thread's stack end.
pub const RECURSION_LIMIT: usize = 64;

/// Fixed part of the output cap; the cap is this plus four times the bytes of the
/// messages' roles and contents and of the tools' JSON.
pub const OUTPUT_CAP_BASE: usize = 1 << 20;

const TEMPLATE_NAME: &str = "chat_template";

/// One message of a conversation. The tool fields are left out of what the
/// template sees when unset, so `message.tool_calls is defined` reads as
/// templates expect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool`, or whatever roles the template
    /// knows.
    pub role: String,
    /// The message text.
    pub content: String,
    /// An assistant's calls, in OpenAI's shape (`id`, `type`, `function`
    /// with `name` and `arguments`), arguments as a JSON object: the
    /// templates that render calls write them with `tojson`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<serde_json::Value>>,
    /// A `tool` message's answer to this call id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The participant's or the answering function's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
            name: None,
        }
    }

    /// Bytes of text the message brings to a render.
    fn input_bytes(&self) -> usize {
        self.role.len()
            + self.content.len()
            + self
                .tool_calls
                .as_ref()
                .map_or(0, |c| c.iter().map(|v| v.to_string().len()).sum())
    }
}

/// What a render binds besides the messages.
#[derive(Clone, Debug, Default)]
pub struct RenderOptions {
    /// End the text with the header of an assistant turn, ready for generation.
    pub add_generation_prompt: bool,
    /// The tool definitions (`tools`); `None` binds `tools` to none, as
    /// transformers does when no tools are given.
    pub tools: Option<serde_json::Value>,
    /// More template variables, e.g. `enable_thinking`; unset ones stay undefined.
    /// They cannot replace `messages`, `tools`, `add_generation_prompt`,
    /// `bos_token`, `eos_token` or `strftime_now`.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Why a template could not be loaded or rendered.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// `tokenizer.chat_template` is present but not a string.
    #[error("GGUF key `{KEY_CHAT_TEMPLATE}` should be a string")]
    WrongType,
    /// The template does not parse.
    #[error("chat template syntax error: {0}")]
    Syntax(String),
    /// The template called `raise_exception(message)`, usually to reject the
    /// conversation (e.g. roles out of order).
    #[error("chat template rejected the conversation: {0}")]
    Raised(String),
    /// The template hit a resource bound: fuel, recursion depth or output size.
    #[error("chat template exceeded a resource limit: {0}")]
    ResourceLimit(String),
    /// Any other failure during rendering.
    #[error("chat template render failed: {0}")]
    Render(String),
}

/// Marker error carried as the source of the minijinja error that
/// `raise_exception` returns, so it can be told apart from other failures.
#[derive(Debug)]
struct RaisedException(String);

impl std::fmt::Display for RaisedException {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedException {}

/// A compiled chat template with the special-token strings it is rendered with.
#[derive(Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    is_fallback: bool,
    /// Where the source came from, for errors and provenance.
    origin: String,
    /// The clock `strftime_now` reads: `None` for the local time of each render.
    fixed_now: Option<chrono::NaiveDateTime>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("is_fallback", &self.is_fallback)
            .field("origin", &self.origin)
            .field("fixed_now", &self.fixed_now)
            .field("source_len", &self.source.len())
            .finish_non_exhaustive()
    }
}

/// A writer that refuses to grow past `cap` bytes and remembers that it did.
struct CappedWriter {
    buf: Vec<u8>,
    cap: usize,
    overflowed: bool,
}

impl io::Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > self.cap {
            self.overflowed = true;
            return Err(io::Error::other("output cap reached"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn raise_exception(message: String) -> Result<String, minijinja::Error> {
    Err(
        minijinja::Error::new(ErrorKind::InvalidOperation, message.clone())
            .with_source(RaisedException(message)),
    )
}

/// Finds a `raise_exception` message anywhere in an error's source chain.
fn raised_message(err: &minijinja::Error) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(r) = e.downcast_ref::<RaisedException>() {
            return Some(r.0.clone());
        }
        cur = e.source();
    }
    None
}

/// Full description of a minijinja error, its causes included.
fn describe(err: &minijinja::Error) -> String {
    let mut out = err.to_string();
    let mut cur = std::error::Error::source(err);
    while let Some(e) = cur {
        out.push_str(": ");
        out.push_str(&e.to_string());
        cur = e.source();
    }
    out
}

impl ChatTemplate {
    /// Compiles `source`, to be rendered with the given BOS and EOS token strings.
    pub fn new(
        source: impl Into<String>,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self, TemplateError> {
        Self::build(source.into(), bos_token.into(), eos_token.into(), false)
    }

    /// The template of a GGUF file (`tokenizer.chat_template`), with the BOS and
    /// EOS strings taken from `tokenizer`. When the key is absent the
    /// [`FALLBACK_CHATML_TEMPLATE`] is used and [`Self::is_fallback`] says so.
    pub fn from_gguf_metadata(
        md: &HashMap<String, gguf_file::Value>,
        tokenizer: &ModelTokenizer,
    ) -> Result<Self, TemplateError> {
        let (bos, eos) = tokenizer.bos_eos_text();
        match md.get(KEY_CHAT_TEMPLATE) {
            None => Self::build(FALLBACK_CHATML_TEMPLATE.to_owned(), bos, eos, true),
            Some(gguf_file::Value::String(s)) => Self::build(s.clone(), bos, eos, false),
            Some(_) => Err(TemplateError::WrongType),
        }
    }

    /// The [`FALLBACK_CHATML_TEMPLATE`], for a model that ships no template.
    pub fn fallback(
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> Result<Self, TemplateError> {
        Self::build(
            FALLBACK_CHATML_TEMPLATE.to_owned(),
            bos_token.into(),
            eos_token.into(),
            true,
        )
    }

    fn build(
        source: String,
        bos_token: String,
        eos_token: String,
        is_fallback: bool,
    ) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_fuel(Some(RENDER_FUEL));
        env.set_recursion_limit(RECURSION_LIMIT);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", python::tojson);
        env.set_unknown_method_callback(python::unknown_method);
        env.add_test("iterable", |v: &Value| python::is_iterable(v));
        env.add_test("sequence", |v: &Value| python::is_sequence(v));
        env.set_formatter(python::format_output);
        let compiled = python::rewrite_generation_tags(&source).unwrap_or_else(|| source.clone());
        env.add_template_owned(TEMPLATE_NAME, compiled)
            .map_err(|e| TemplateError::Syntax(describe(&e)))?;
        Ok(Self {
            env,
            source,
            bos_token,
            eos_token,
            origin: if is_fallback {
                "the built-in ChatML fallback".into()
            } else {
                "the model file's template".into()
            },
            is_fallback,
            fixed_now: None,
        })
    }

    /// The same template, described as coming from `origin` (e.g. the file
    /// an operator gave with `--chat-template`).
    pub fn with_origin(mut self, origin: impl Into<String>) -> Self {
        self.origin = origin.into();
        self
    }

    /// Where the template came from: the model file, the ChatML fallback, or
    /// what [`Self::with_origin`] said.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The same template with `strftime_now` reading `now` instead of the local
    /// clock, so renders that print the date are reproducible (tests).
    pub fn with_fixed_now(mut self, now: chrono::NaiveDateTime) -> Self {
        self.fixed_now = Some(now);
        self
    }

    /// Renders the conversation. With `add_generation_prompt` the text ends with the
    /// header of an assistant turn, ready for generation.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        self.render_with(
            messages,
            &RenderOptions {
                add_generation_prompt,
                ..RenderOptions::default()
            },
        )
    }

    /// Renders a chat request's prompt as llama-server does (its
    /// `/apply-template`, the reference the tests hold this to): the variables it
    /// always binds are bound too, `enable_thinking` (true, so a reasoning
    /// model's template opens a thinking block) and `date_string` (today, as
    /// `26 Jul 2024`; the Llama 3.x templates print it, and would otherwise print
    /// their own fixed date); and when a template refuses a leading system
    /// message (Gemma's raise "System role not supported"), the system text is
    /// put before the first user message, separated by a newline, and the
    /// conversation is rendered again. Values in `options.extra` win over these
    /// defaults.
    pub fn render_prompt(
        &self,
        messages: &[ChatMessage],
        options: &RenderOptions,
    ) -> Result<String, TemplateError> {
        let now = self
            .fixed_now
            .unwrap_or_else(|| chrono::Local::now().naive_local());
        let mut options = options.clone();
        options
            .extra
            .entry("enable_thinking")
            .or_insert(serde_json::Value::Bool(true));
        options
            .extra
            .entry("date_string")
            .or_insert_with(|| serde_json::Value::String(now.format("%d %b %Y").to_string()));
        match self.render_with(messages, &options) {
            Err(TemplateError::Raised(why)) => match merge_system_into_user(messages) {
                Some(merged) => self
                    .render_with(&merged, &options)
                    .map_err(|_| TemplateError::Raised(why)),
                None => Err(TemplateError::Raised(why)),
            },
            other => other,
        }
    }

    /// Renders the conversation with tools and extra variables.
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        options: &RenderOptions,
    ) -> Result<String, TemplateError> {
        let tmpl = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| TemplateError::Render(describe(&e)))?;
        let input_bytes: usize = messages.iter().map(ChatMessage::input_bytes).sum::<usize>()
            + options.tools.as_ref().map_or(0, |t| t.to_string().len());
        let mut out = CappedWriter {
            buf: Vec::new(),
            cap: OUTPUT_CAP_BASE.saturating_add(input_bytes.saturating_mul(4)),
            overflowed: false,
        };
        let now = self
            .fixed_now
            .unwrap_or_else(|| chrono::Local::now().naive_local());
        let tools = match &options.tools {
            Some(t) => Value::from_serialize(t),
            None => Value::from(()),
        };
        let ctx = minijinja::context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => options.add_generation_prompt,
            bos_token => &self.bos_token,
            eos_token => &self.eos_token,
            strftime_now => Value::from_function(move |format: &str| python::strftime(&now, format)),
            ..Value::from_serialize(&options.extra)
        };
        match tmpl.render_captured_to(ctx, &mut out) {
            Ok(_) => String::from_utf8(out.buf)
                .map_err(|e| TemplateError::Render(format!("output is not UTF-8: {e}"))),
            Err(_) if out.overflowed => Err(TemplateError::ResourceLimit(format!(
                "output exceeds {} bytes",
                out.cap
            ))),
            Err(e) => Err(classify(&e)),
        }
    }

    /// Hex SHA-256 of the template source, for the revision record.
    pub fn sha256_hex(&self) -> String {
        hex::encode(Sha256::digest(self.source.as_bytes()))
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the GGUF had no template and [`FALLBACK_CHATML_TEMPLATE`] is used.
    pub fn is_fallback(&self) -> bool {
        self.is_fallback
    }

    /// The string bound to `bos_token` when rendering.
    pub fn bos_token(&self) -> &str {
        &self.bos_token
    }

    /// The string bound to `eos_token` when rendering.
    pub fn eos_token(&self) -> &str {
        &self.eos_token
    }
}

/// The conversation with a leading system message folded into the first user
/// message (`system + "\n" + user`), as llama.cpp does for templates without a
/// system role; `None` when it does not start with a system message followed
/// by a user one.
fn merge_system_into_user(messages: &[ChatMessage]) -> Option<Vec<ChatMessage>> {
    let (first, rest) = messages.split_first()?;
    if first.role != "system" {
        return None;
    }
    let at = rest.iter().position(|m| m.role == "user")?;
    let mut out = rest.to_vec();
    out[at].content = if out[at].content.is_empty() {
        first.content.clone()
    } else {
        format!("{}\n{}", first.content, out[at].content)
    };
    Some(out)
}

fn classify(err: &minijinja::Error) -> TemplateError {
    if let Some(msg) = raised_message(err) {
        return TemplateError::Raised(msg);
    }
    let text = describe(err);
    match err.kind() {
        ErrorKind::OutOfFuel => TemplateError::ResourceLimit(text),
        ErrorKind::InvalidOperation if text.contains("recursion limit") => {
            TemplateError::ResourceLimit(text)
        }
        ErrorKind::SyntaxError => TemplateError::Syntax(text),
        _ => TemplateError::Render(text),
    }
}
