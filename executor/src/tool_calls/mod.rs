//! Tool calls in a model's own words: which format a chat template teaches its
//! model to call tools in, and how to read calls back out of what the model
//! wrote.
//!
//! Each template family writes calls its own way: Hermes 2/3, Qwen 2.5 and
//! Qwen 3 wrap a `{"name", "arguments"}` object in `<tool_call>` tags; Llama
//! 3.1-3.3 write a bare `{"name", "parameters"}` object (after
//! `<|python_tag|>` for built-in tools); Mistral Nemo and Small write
//! `[TOOL_CALLS]` and a JSON array. The format is read off the template's
//! source, as llama.cpp's `common_chat_templates_init` does, so a deployment
//! that serves another template (`--chat-template`) parses that template's
//! format. [`parse`] reads a finished output; [`ToolStream`] splits a
//! streamed one into the text a client may see at once and the part that
//! may be a call, held until the output ends. Nothing here runs the model:
//! the API decides when to parse, and constrains `tool_choice: required`
//! outputs with a grammar instead (see [`required_schema`]).

mod parse;
mod stream;

pub use parse::{Parsed, parse, parse_required};
pub use stream::ToolStream;

use serde_json::{Value, json};

/// How a template's model writes tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolFormat {
    /// `<tool_call>{"name": .., "arguments": {..}}</tool_call>`, once per
    /// call (Hermes 2 Pro, Hermes 3, Qwen 2.5, Qwen 3, QwQ).
    Hermes,
    /// A bare `{"name": .., "parameters": {..}}` object, or several joined
    /// by `;`, optionally after `<|python_tag|>` (Llama 3.1, 3.2, 3.3).
    Llama3Json,
    /// `[TOOL_CALLS][{"name": .., "arguments": {..}}, ..]` (Mistral Nemo,
    /// Mistral Small 3.x, Devstral). Its templates want call ids of nine
    /// alphanumerics.
    MistralNemo,
}

impl ToolFormat {
    /// The format a template's source teaches, or `None` when it renders no
    /// tools or writes calls in a format not read here.
    pub fn detect(template_source: &str) -> Option<Self> {
        if !mentions_tools(template_source) {
            return None;
        }
        if template_source.contains("<tool_call>") {
            Some(Self::Hermes)
        } else if template_source.contains("[TOOL_CALLS]") {
            Some(Self::MistralNemo)
        } else if template_source.contains("<|python_tag|>")
            || (template_source.contains("<|start_header_id|>")
                && template_source.contains("ipython"))
        {
            Some(Self::Llama3Json)
        } else {
            None
        }
    }

    /// Name of the format, for errors and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hermes => "hermes",
            Self::Llama3Json => "llama3_json",
            Self::MistralNemo => "mistral",
        }
    }

    /// An id for a call, made of `random`, that this format's template can
    /// render back: nine alphanumerics for Mistral's (its templates refuse
    /// others), OpenAI's `call_` and 24 hex digits otherwise.
    pub fn call_id(self, random: u128) -> String {
        let hex = format!("{random:032x}");
        match self {
            Self::MistralNemo => hex[..9].to_string(),
            _ => format!("call_{}", &hex[..24]),
        }
    }
}

/// Whether a template reads the `tools` variable at all.
pub fn mentions_tools(template_source: &str) -> bool {
    template_source.match_indices("tools").any(|(at, _)| {
        let before = template_source[..at].chars().next_back();
        let after = template_source[at + 5..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

/// One call read out of a model's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as JSON text, as OpenAI sends them.
    pub arguments: String,
}

/// The JSON schema `tool_choice: "required"` constrains the output to: an
/// array of one or more `{"name", "arguments"}` objects, each naming a given
/// function with arguments valid against its parameters (vLLM's encoding).
/// `tools` are `(name, parameters)` pairs; `None` parameters take any object.
pub fn required_schema(tools: &[(String, Option<Value>)]) -> Value {
    let any_of: Vec<Value> = tools
        .iter()
        .map(|(name, params)| {
            json!({
                "type": "object",
                "properties": {
                    "name": {"const": name},
                    "arguments": params.clone().unwrap_or_else(|| json!({"type": "object"})),
                },
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    json!({"type": "array", "minItems": 1, "items": {"anyOf": any_of}})
}

/// The JSON schema a named `tool_choice` constrains the output to: the
/// function's parameters (any object when it declares none).
pub fn named_schema(parameters: Option<&Value>) -> Value {
    parameters
        .cloned()
        .unwrap_or_else(|| json!({"type": "object"}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_each_family_by_its_markers() {
        let hermes = "{% if tools %}<tool_call>{% endif %}";
        assert_eq!(ToolFormat::detect(hermes), Some(ToolFormat::Hermes));
        let mistral = "{% if tools is not none %}[TOOL_CALLS]{% endif %}";
        assert_eq!(ToolFormat::detect(mistral), Some(ToolFormat::MistralNemo));
        let llama = "{% if tools %}<|start_header_id|>ipython{% endif %}";
        assert_eq!(ToolFormat::detect(llama), Some(ToolFormat::Llama3Json));
        assert_eq!(ToolFormat::detect("<tool_call> without the variable"), None);
        assert_eq!(ToolFormat::detect("{{ my_tools }}<tool_call>"), None);
        assert_eq!(
            ToolFormat::detect("{% for m in messages %}{% endfor %}"),
            None
        );
    }

    #[test]
    fn mistral_ids_have_nine_alphanumerics_and_others_openais_shape() {
        let id = ToolFormat::MistralNemo.call_id(u128::MAX / 3);
        assert_eq!(id.len(), 9);
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric()));
        let id = ToolFormat::Hermes.call_id(7);
        assert!(id.starts_with("call_") && id.len() == 29, "{id}");
    }

    #[test]
    fn the_required_schema_names_every_function() {
        let s = required_schema(&[
            (
                "a".into(),
                Some(json!({"type": "object", "properties": {"x": {"type": "integer"}}})),
            ),
            ("b".into(), None),
        ]);
        assert_eq!(s["minItems"], 1);
        assert_eq!(s["items"]["anyOf"][0]["properties"]["name"]["const"], "a");
        assert_eq!(
            s["items"]["anyOf"][1]["properties"]["arguments"]["type"],
            "object"
        );
    }
}
