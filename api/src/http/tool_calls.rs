//! A choice's output turned into OpenAI's `tool_calls`, whole or streamed:
//! [`Splitter`] passes text a client may see at once and holds what may be a
//! call until the choice ends, then gives the calls with fresh ids. Calls
//! are streamed as one `delta.tool_calls` entry each, name and arguments
//! whole, once the choice ended: the OpenAI SDKs accumulate that as they
//! accumulate argument fragments.

use stoker_executor::engine::FinishReason;
use stoker_executor::tool_calls::{self, ToolStream};
use stoker_schemas::openai::{FunctionCallOut, ToolCallDelta, ToolCallOut};

use crate::edge::tools::ToolMode;

/// One choice's output on its way to `content` and `tool_calls`.
#[derive(Debug)]
pub struct Splitter {
    mode: ToolMode,
    /// `auto`: free text, read in the template's format.
    stream: Option<ToolStream>,
    /// `required` or named: the constrained JSON, held whole.
    held: String,
}

/// What remains of a choice once it ended.
#[derive(Debug, Default)]
pub struct Ended {
    /// Content not yet given out.
    pub content: String,
    pub calls: Vec<ToolCallOut>,
}

impl Splitter {
    pub fn new(mode: ToolMode) -> Self {
        let stream = match &mode {
            ToolMode::Auto(f) => Some(ToolStream::new(*f)),
            _ => None,
        };
        Self {
            mode,
            stream,
            held: String::new(),
        }
    }

    /// The next delta's text; returns what may be sent as content now.
    pub fn push(&mut self, text: &str) -> String {
        match &mut self.stream {
            Some(s) => s.push(text),
            None => {
                self.held.push_str(text);
                String::new()
            }
        }
    }

    /// The choice ended: the content still held and the calls.
    pub fn finish(self) -> Ended {
        let mode = self.mode;
        let call = |name: String, arguments: String| ToolCallOut {
            id: mode.call_id(),
            kind: "function".into(),
            function: FunctionCallOut { name, arguments },
        };
        match (&mode, self.stream) {
            (_, Some(s)) => {
                let (content, calls) = s.finish();
                Ended {
                    content,
                    calls: calls
                        .into_iter()
                        .map(|c| call(c.name, c.arguments))
                        .collect(),
                }
            }
            (ToolMode::Named { name, .. }, None) => Ended {
                content: String::new(),
                calls: vec![call(name.clone(), self.held.trim().to_string())],
            },
            (_, None) => match tool_calls::parse_required(&self.held) {
                Some(calls) => Ended {
                    content: String::new(),
                    calls: calls
                        .into_iter()
                        .map(|c| call(c.name, c.arguments))
                        .collect(),
                },
                // Cut short by max_tokens: what was written, as text.
                None => Ended {
                    content: self.held,
                    calls: Vec::new(),
                },
            },
        }
    }

    /// OpenAI's `finish_reason` for a choice that ended for `reason` with
    /// `calls`: `tool_calls` when it called (a named `tool_choice` says
    /// `stop`, as OpenAI's does).
    pub fn finish_reason(mode: &ToolMode, reason: FinishReason, calls: bool) -> &'static str {
        match (mode, reason, calls) {
            (ToolMode::Named { .. }, _, _) | (_, _, false) => reason.as_str(),
            (_, FinishReason::Stop, true) => "tool_calls",
            (_, r, true) => r.as_str(),
        }
    }
}

/// The calls as stream deltas.
pub fn deltas(calls: Vec<ToolCallOut>) -> Vec<ToolCallDelta> {
    calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| ToolCallDelta {
            index: i as u32,
            id: c.id,
            kind: c.kind,
            function: c.function,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_executor::tool_calls::ToolFormat;

    #[test]
    fn a_named_call_is_the_held_arguments() {
        let mut s = Splitter::new(ToolMode::Named {
            name: "f".into(),
            format: None,
        });
        assert_eq!(s.push("{\"a\":"), "");
        assert_eq!(s.push("1}"), "");
        let e = s.finish();
        assert_eq!(e.calls[0].function.name, "f");
        assert_eq!(e.calls[0].function.arguments, "{\"a\":1}");
        assert!(e.calls[0].id.starts_with("call_"));
    }

    #[test]
    fn a_required_output_cut_short_is_text() {
        let mut s = Splitter::new(ToolMode::Required(Some(ToolFormat::MistralNemo)));
        s.push("[{\"name\":\"f\",\"argu");
        let e = s.finish();
        assert!(e.calls.is_empty());
        assert_eq!(e.content, "[{\"name\":\"f\",\"argu");
        let mut s = Splitter::new(ToolMode::Required(Some(ToolFormat::MistralNemo)));
        s.push("[{\"name\":\"f\",\"arguments\":{}}]");
        let e = s.finish();
        assert_eq!(e.calls[0].id.len(), 9);
    }

    #[test]
    fn finish_reasons_follow_openai() {
        let auto = ToolMode::Auto(ToolFormat::Hermes);
        assert_eq!(
            Splitter::finish_reason(&auto, FinishReason::Stop, true),
            "tool_calls"
        );
        assert_eq!(
            Splitter::finish_reason(&auto, FinishReason::Stop, false),
            "stop"
        );
        assert_eq!(
            Splitter::finish_reason(&auto, FinishReason::Length, true),
            "length"
        );
        let named = ToolMode::Named {
            name: "f".into(),
            format: None,
        };
        assert_eq!(
            Splitter::finish_reason(&named, FinishReason::Stop, true),
            "stop"
        );
    }
}
