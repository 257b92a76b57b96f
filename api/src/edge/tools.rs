//! Tool calling at the edge: `tools` and `tool_choice` checked and turned
//! into what the template renders, how the output is read, and, for
//! `required` and a named function, the grammar that makes the call parse.
//!
//! `auto` reads calls out of free text in the served template's format
//! ([`ToolFormat::detect`]); a template whose format is unknown is refused
//! by name rather than answered with calls nobody parses. `required` and a
//! named function constrain the output with llguidance to a JSON schema
//! (vLLM's approach), so they work whatever the template's format.

use serde_json::{Map, Value, json};
use stoker_executor::chat_template::ChatTemplate;
use stoker_executor::structured::StructuredOutput;
use stoker_executor::tool_calls::{self, ToolFormat};

use crate::error::{ApiError, truncate};

/// Most tools one request may carry.
pub const MAX_TOOLS: usize = 128;
/// Longest function name (OpenAI's).
pub const MAX_NAME: usize = 64;

/// How a request's output is read as calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolMode {
    /// The model may call: calls are read out of its text in this format.
    Auto(ToolFormat),
    /// The output is an array of calls (constrained); the template's format,
    /// when known, shapes the call ids.
    Required(Option<ToolFormat>),
    /// The output is this function's arguments (constrained).
    Named {
        name: String,
        format: Option<ToolFormat>,
    },
}

impl ToolMode {
    /// The id of a new call, in the shape the template renders back.
    pub fn call_id(&self) -> String {
        let format = match self {
            Self::Auto(f) => Some(*f),
            Self::Required(f) | Self::Named { format: f, .. } => *f,
        };
        let random = uuid::Uuid::new_v4().as_u128();
        format.unwrap_or(ToolFormat::Hermes).call_id(random)
    }
}

/// What a request's tools come to.
#[derive(Debug, Default)]
pub struct ToolPlan {
    /// The tools the template renders (`None`: no `tools` variable).
    pub render: Option<Value>,
    /// How the output is read; `None` for plain text.
    pub mode: Option<ToolMode>,
    /// The grammar `required` or a named function decodes under.
    pub constraint: Option<StructuredOutput>,
}

/// One checked tool: its name and parameters schema.
struct Tool {
    name: String,
    parameters: Option<Value>,
}

fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn tools_of(v: Option<&Value>) -> Result<Vec<Tool>, ApiError> {
    let arr = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(ApiError::invalid("`tools` must be an array", "tools")),
    };
    if arr.len() > MAX_TOOLS {
        return Err(ApiError::invalid(
            format!("at most {MAX_TOOLS} tools are allowed, got {}", arr.len()),
            "tools",
        ));
    }
    let mut out: Vec<Tool> = Vec::with_capacity(arr.len());
    for (i, t) in arr.iter().enumerate() {
        let param = format!("tools[{i}]");
        let kind = t.get("type").and_then(Value::as_str);
        if kind != Some("function") {
            return match kind {
                Some(other) => Err(ApiError::unsupported(
                    &format!("{param}.type"),
                    &format!("tools of type `{}`", truncate(other, 32)),
                )),
                None => Err(ApiError::invalid(
                    format!("`{param}.type` must be `function`"),
                    format!("{param}.type"),
                )),
            };
        }
        let f = t
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("`{param}.function` must be an object"),
                    format!("{param}.function"),
                )
            })?;
        let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
        if !valid_name(name) {
            return Err(ApiError::invalid(
                format!(
                    "`{param}.function.name` must be 1 to {MAX_NAME} characters of a-z, A-Z, 0-9, _ and -"
                ),
                format!("{param}.function.name"),
            ));
        }
        if let Some(j) = out.iter().position(|o| o.name == name) {
            return Err(ApiError::invalid(
                format!("`{param}.function.name` `{name}` is already the name of tools[{j}]"),
                format!("{param}.function.name"),
            ));
        }
        if f.get("description")
            .is_some_and(|d| !(d.is_string() || d.is_null()))
        {
            return Err(ApiError::invalid(
                format!("`{param}.function.description` must be a string"),
                format!("{param}.function.description"),
            ));
        }
        let parameters = match f.get("parameters") {
            None | Some(Value::Null) => None,
            Some(p @ Value::Object(_)) => {
                StructuredOutput::JsonSchema(p.clone())
                    .validate()
                    .map_err(|e| {
                        ApiError::invalid(
                            format!("`{param}.function.parameters`: {e}"),
                            format!("{param}.function.parameters"),
                        )
                    })?;
                Some(p.clone())
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    format!("`{param}.function.parameters` must be a JSON schema object"),
                    format!("{param}.function.parameters"),
                ));
            }
        };
        out.push(Tool {
            name: name.to_string(),
            parameters,
        });
    }
    Ok(out)
}

/// `tool_choice` as given: `None` when absent or null.
enum Choice {
    None,
    Auto,
    Required,
    Named(String),
}

fn choice_of(v: Option<&Value>) -> Result<Option<Choice>, ApiError> {
    let bad = || {
        ApiError::invalid(
            "`tool_choice` must be `none`, `auto`, `required` or {\"type\": \"function\", \"function\": {\"name\": ...}}",
            "tool_choice",
        )
    };
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(Some(Choice::None)),
            "auto" => Ok(Some(Choice::Auto)),
            "required" => Ok(Some(Choice::Required)),
            _ => Err(bad()),
        },
        Some(Value::Object(o)) => {
            if o.get("type").and_then(Value::as_str) != Some("function") {
                return Err(bad());
            }
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(bad)?;
            Ok(Some(Choice::Named(name.to_string())))
        }
        Some(_) => Err(bad()),
    }
}

/// Checks `tools` and `tool_choice` against the served template.
/// `structured` says whether `response_format` already constrains the
/// output, which `required` and a named function cannot share.
pub fn plan(
    tools: Option<&Value>,
    tool_choice: Option<&Value>,
    template: &ChatTemplate,
    structured: bool,
) -> Result<ToolPlan, ApiError> {
    let list = tools_of(tools)?;
    let choice = choice_of(tool_choice)?;
    if list.is_empty() {
        return match choice {
            None | Some(Choice::None | Choice::Auto) => Ok(ToolPlan::default()),
            Some(_) => Err(ApiError::invalid(
                "`tool_choice` `required` or a named function needs `tools`",
                "tool_choice",
            )),
        };
    }
    let source = template.source();
    let format = ToolFormat::detect(source);
    let render = tool_calls::mentions_tools(source).then(|| tools.cloned().unwrap_or_default());
    let choice = choice.unwrap_or(Choice::Auto);
    if structured && matches!(choice, Choice::Required | Choice::Named(_)) {
        return Err(ApiError::invalid(
            "`tool_choice` `required` or a named function cannot be combined with a `response_format` other than text",
            "tool_choice",
        ));
    }
    let (mode, constraint) = match choice {
        // The model sees the tools, as vLLM renders them, but its text is
        // not read as calls.
        Choice::None => (None, None),
        Choice::Auto => {
            let format = format.ok_or_else(|| no_tool_format(template))?;
            (Some(ToolMode::Auto(format)), None)
        }
        Choice::Required => {
            let pairs: Vec<(String, Option<Value>)> = list
                .iter()
                .map(|t| (t.name.clone(), t.parameters.clone()))
                .collect();
            let schema = tool_calls::required_schema(&pairs);
            (
                Some(ToolMode::Required(format)),
                Some(StructuredOutput::JsonSchema(schema)),
            )
        }
        Choice::Named(name) => {
            let tool = list.iter().find(|t| t.name == name).ok_or_else(|| {
                ApiError::invalid(
                    format!(
                        "`tool_choice.function.name` `{}` names no function in `tools`",
                        truncate(&name, MAX_NAME)
                    ),
                    "tool_choice.function.name",
                )
            })?;
            let schema = tool_calls::named_schema(tool.parameters.as_ref());
            (
                Some(ToolMode::Named { name, format }),
                Some(StructuredOutput::JsonSchema(schema)),
            )
        }
    };
    Ok(ToolPlan {
        render,
        mode,
        constraint,
    })
}

fn no_tool_format(template: &ChatTemplate) -> ApiError {
    let sha = template.sha256_hex();
    let why = if tool_calls::mentions_tools(template.source()) {
        "writes tool calls in a format stoker does not read"
    } else {
        "does not render tools"
    };
    ApiError::invalid(
        format!(
            "the served chat template ({}, sha256 {}) {why}: `tool_choice` `auto` needs a template of the Hermes/Qwen (`<tool_call>`), Llama 3.x (JSON) or Mistral (`[TOOL_CALLS]`) family. Serve a tool-use template (`stoker serve --chat-template FILE`), or send `tool_choice` `required` or a named function, which are enforced while decoding",
            template.origin(),
            &sha[..12]
        ),
        "tools",
    )
}

/// An assistant message's `tool_calls` as the template renders them:
/// OpenAI's shape with `arguments` parsed into a JSON object (the templates
/// write it with `tojson`). `param` names the field in errors.
pub fn message_calls(v: &Value, param: &str) -> Result<Vec<Value>, ApiError> {
    let arr = v
        .as_array()
        .ok_or_else(|| ApiError::invalid(format!("`{param}` must be an array"), param))?;
    if arr.len() > MAX_TOOLS {
        return Err(ApiError::invalid(
            format!("`{param}` may hold at most {MAX_TOOLS} calls"),
            param,
        ));
    }
    arr.iter()
        .enumerate()
        .map(|(j, c)| {
            let p = format!("{param}[{j}]");
            let id = c.get("id").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid(format!("`{p}.id` must be a string"), format!("{p}.id"))
            })?;
            if c.get("type").is_some_and(|t| t != "function") {
                return Err(ApiError::invalid(
                    format!("`{p}.type` must be `function`"),
                    format!("{p}.type"),
                ));
            }
            let f = c
                .get("function")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ApiError::invalid(
                        format!("`{p}.function` must be an object"),
                        format!("{p}.function"),
                    )
                })?;
            let name = f.get("name").and_then(Value::as_str).ok_or_else(|| {
                ApiError::invalid(
                    format!("`{p}.function.name` must be a string"),
                    format!("{p}.function.name"),
                )
            })?;
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => {
                        return Err(ApiError::invalid(
                            format!("`{p}.function.arguments` must be a JSON object as text"),
                            format!("{p}.function.arguments"),
                        ));
                    }
                },
                Some(v @ Value::Object(_)) => v.clone(),
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(_) => {
                    return Err(ApiError::invalid(
                        format!("`{p}.function.arguments` must be a JSON object as text"),
                        format!("{p}.function.arguments"),
                    ));
                }
            };
            Ok(json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }))
        })
        .collect()
}
