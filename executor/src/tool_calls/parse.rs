//! Reading tool calls out of a finished output, per format. A call that does
//! not parse leaves the whole output as text, as vLLM's and llama.cpp's
//! parsers do: a client then sees what the model wrote rather than a call
//! with made-up arguments.

use serde_json::Value;

use super::{ToolCall, ToolFormat};

/// An output split into its calls and the text around them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Text before the first call (the whole output when there are none).
    pub before: String,
    pub calls: Vec<ToolCall>,
    /// Text after the last call.
    pub after: String,
}

impl Parsed {
    fn text(output: &str) -> Self {
        Self {
            before: output.to_string(),
            ..Self::default()
        }
    }

    /// The text a client sees beside the calls, trimmed; `None` when empty.
    pub fn content(&self) -> Option<String> {
        let joined = format!("{}{}", self.before, self.after);
        let t = joined.trim();
        (!t.is_empty()).then(|| t.to_string())
    }
}

const HERMES_OPEN: &str = "<tool_call>";
const HERMES_CLOSE: &str = "</tool_call>";
const PYTHON_TAG: &str = "<|python_tag|>";
const MISTRAL_MARKER: &str = "[TOOL_CALLS]";

/// Reads the calls in `output`, written in `format`.
pub fn parse(format: ToolFormat, output: &str) -> Parsed {
    let found = match format {
        ToolFormat::Hermes => hermes(output),
        ToolFormat::Llama3Json => llama3(output),
        ToolFormat::MistralNemo => mistral(output),
    };
    found.unwrap_or_else(|| Parsed::text(output))
}

/// Reads the output of a `tool_choice: required` request: a JSON array of
/// `{"name", "arguments"}` objects ([`super::required_schema`]). `None`
/// when it is not one (cut short by `max_tokens`).
pub fn parse_required(output: &str) -> Option<Vec<ToolCall>> {
    let v: Value = serde_json::from_str(output.trim()).ok()?;
    let calls = v
        .as_array()?
        .iter()
        .map(|c| call(c, &["arguments", "parameters"]))
        .collect::<Option<Vec<_>>>()?;
    (!calls.is_empty()).then_some(calls)
}

/// One `{"name": .., <args key>: ..}` object; arguments given as a string
/// are kept as that string, as OpenAI sends them.
fn call(v: &Value, args_keys: &[&str]) -> Option<ToolCall> {
    let o = v.as_object()?;
    let name = o.get("name")?.as_str()?;
    if name.is_empty() {
        return None;
    }
    let args = args_keys.iter().find_map(|k| o.get(*k));
    let arguments = match args {
        None => "{}".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(v @ Value::Object(_)) => v.to_string(),
        Some(_) => return None,
    };
    Some(ToolCall {
        name: name.to_string(),
        arguments,
    })
}

/// The first JSON value at the start of `s` (after whitespace) and the rest.
fn leading_json(s: &str) -> Option<(Value, &str)> {
    let mut it = serde_json::Deserializer::from_str(s).into_iter::<Value>();
    let v = it.next()?.ok()?;
    Some((v, &s[it.byte_offset()..]))
}

fn hermes(output: &str) -> Option<Parsed> {
    let first = output.find(HERMES_OPEN)?;
    let mut rest = &output[first..];
    let mut calls = Vec::new();
    while let Some(body) = rest.trim_start().strip_prefix(HERMES_OPEN) {
        let (inner, next) = match body.find(HERMES_CLOSE) {
            Some(end) => (&body[..end], &body[end + HERMES_CLOSE.len()..]),
            // Cut short before the closing tag: the call stands if its
            // JSON is whole.
            None => (body, ""),
        };
        let v: Value = serde_json::from_str(inner.trim()).ok()?;
        calls.push(call(&v, &["arguments", "parameters"])?);
        rest = next;
    }
    Some(Parsed {
        before: output[..first].to_string(),
        calls,
        after: rest.to_string(),
    })
}

fn llama3(output: &str) -> Option<Parsed> {
    let (before, body) = match output.find(PYTHON_TAG) {
        Some(at) => (&output[..at], &output[at + PYTHON_TAG.len()..]),
        None if output.trim_start().starts_with('{') => ("", output),
        None => return None,
    };
    let mut rest = body;
    let mut calls = Vec::new();
    loop {
        let (v, next) = leading_json(rest)?;
        calls.push(call(&v, &["parameters", "arguments"])?);
        rest = next;
        match rest.trim_start().strip_prefix(';') {
            Some(more) if more.trim_start().starts_with('{') => rest = more,
            _ => break,
        }
    }
    Some(Parsed {
        before: before.to_string(),
        calls,
        after: rest.to_string(),
    })
}

fn mistral(output: &str) -> Option<Parsed> {
    let (before, body) = match output.find(MISTRAL_MARKER) {
        Some(at) => (&output[..at], &output[at + MISTRAL_MARKER.len()..]),
        // The marker is a control token, left out of decoded text: a bare
        // array of calls at the very start is a call too.
        None if output.trim_start().starts_with("[{") => ("", output),
        None => return None,
    };
    let (v, rest) = leading_json(body)?;
    let calls = v
        .as_array()?
        .iter()
        .map(|c| call(c, &["arguments", "parameters"]))
        .collect::<Option<Vec<_>>>()?;
    if calls.is_empty() {
        return None;
    }
    Some(Parsed {
        before: before.to_string(),
        calls,
        after: rest.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(p: &Parsed) -> Vec<(&str, &str)> {
        p.calls
            .iter()
            .map(|c| (c.name.as_str(), c.arguments.as_str()))
            .collect()
    }

    #[test]
    fn hermes_reads_every_tagged_call_and_keeps_the_text_before() {
        let out = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"arguments\": {\"city\": \"Oslo\"}, \"name\": \"get_weather\"}\n</tool_call>";
        let p = parse(ToolFormat::Hermes, out);
        assert_eq!(
            calls(&p),
            vec![
                ("get_weather", r#"{"city":"Paris"}"#),
                ("get_weather", r#"{"city":"Oslo"}"#)
            ]
        );
        assert_eq!(p.content().as_deref(), Some("Let me check."));
    }

    #[test]
    fn hermes_without_a_closing_tag_keeps_a_whole_call() {
        let p = parse(
            ToolFormat::Hermes,
            "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}",
        );
        assert_eq!(calls(&p), vec![("f", "{}")]);
        assert_eq!(p.content(), None);
    }

    #[test]
    fn a_broken_call_leaves_the_output_as_text() {
        let out = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": </tool_call>";
        assert_eq!(parse(ToolFormat::Hermes, out), Parsed::text(out));
        let out = "<tool_call>{\"arguments\": {}}</tool_call>";
        assert_eq!(parse(ToolFormat::Hermes, out).calls, vec![]);
        assert_eq!(
            parse(ToolFormat::Hermes, "no call here")
                .content()
                .as_deref(),
            Some("no call here")
        );
    }

    #[test]
    fn llama3_reads_bare_objects_with_parameters() {
        let p = parse(
            ToolFormat::Llama3Json,
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
        );
        assert_eq!(calls(&p), vec![("get_weather", r#"{"city":"Paris"}"#)]);
        let p = parse(
            ToolFormat::Llama3Json,
            "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"k\": 1}}",
        );
        assert_eq!(calls(&p), vec![("a", "{}"), ("b", r#"{"k":1}"#)]);
        let p = parse(ToolFormat::Llama3Json, "The answer is {x}.");
        assert!(p.calls.is_empty());
        let p = parse(ToolFormat::Llama3Json, "{\"not\": \"a call\"}");
        assert!(p.calls.is_empty());
    }

    #[test]
    fn mistral_reads_the_array_with_or_without_its_marker() {
        let p = parse(
            ToolFormat::MistralNemo,
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcdefghi\"}]",
        );
        assert_eq!(calls(&p), vec![("get_weather", r#"{"city":"Paris"}"#)]);
        let p = parse(
            ToolFormat::MistralNemo,
            "[{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": \"{\\\"k\\\": 2}\"}]",
        );
        assert_eq!(calls(&p), vec![("a", "{}"), ("b", "{\"k\": 2}")]);
        assert!(parse(ToolFormat::MistralNemo, "[1, 2]").calls.is_empty());
        assert!(
            parse(ToolFormat::MistralNemo, "[TOOL_CALLS][]")
                .calls
                .is_empty()
        );
    }

    #[test]
    fn required_outputs_are_arrays_of_named_calls() {
        let c = parse_required(r#"[{"name":"f","arguments":{"x":1}}]"#).unwrap();
        assert_eq!(
            c,
            vec![ToolCall {
                name: "f".into(),
                arguments: r#"{"x":1}"#.into()
            }]
        );
        assert_eq!(parse_required("[]"), None);
        assert_eq!(parse_required(r#"[{"name":"f","arguments":{"x":"#), None);
    }
}
