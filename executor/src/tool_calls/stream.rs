//! A streamed output split as it comes: text that cannot be part of a call
//! goes to the client at once; from the point a call may begin (its marker,
//! or for Llama and Mistral a JSON value at the very start) the rest is held
//! and read as calls when the output ends. A marker split across deltas is
//! held back by the part that could still become it, as stop strings are.

use super::{ToolCall, ToolFormat, parse};

/// Splits one choice's streamed text into content and calls.
#[derive(Debug)]
pub struct ToolStream {
    format: ToolFormat,
    full: String,
    /// Bytes of `full` already given out as content.
    emitted: usize,
    /// A call may have begun at `emitted`: everything after is held.
    holding: bool,
}

impl ToolStream {
    pub fn new(format: ToolFormat) -> Self {
        Self {
            format,
            full: String::new(),
            emitted: 0,
            holding: false,
        }
    }

    fn marker(&self) -> &'static str {
        match self.format {
            ToolFormat::Hermes => "<tool_call>",
            ToolFormat::Llama3Json => "<|python_tag|>",
            ToolFormat::MistralNemo => "[TOOL_CALLS]",
        }
    }

    /// Takes the next delta; returns the content that may be sent now.
    pub fn push(&mut self, text: &str) -> String {
        self.full.push_str(text);
        if self.holding {
            return String::new();
        }
        let marker = self.marker();
        let pending = &self.full[self.emitted..];
        if let Some(at) = pending.find(marker) {
            let out = pending[..at].to_string();
            self.emitted += at;
            self.holding = true;
            return out;
        }
        if self.full[..self.emitted].trim().is_empty() {
            let t = pending.trim_start();
            let opens = match self.format {
                ToolFormat::Hermes => Some(false),
                ToolFormat::Llama3Json => Some(t.starts_with('{')),
                ToolFormat::MistralNemo if t == "[" => None,
                ToolFormat::MistralNemo => Some(t.starts_with("[{")),
            };
            match opens {
                _ if t.is_empty() => return String::new(),
                None => return String::new(),
                Some(true) => {
                    self.holding = true;
                    return String::new();
                }
                Some(false) => {}
            }
        }
        let keep = (1..marker.len())
            .rev()
            .find(|&n| pending.ends_with(&marker[..n]))
            .unwrap_or(0);
        let cut = pending.len() - keep;
        let out = pending[..cut].to_string();
        self.emitted += cut;
        out
    }

    /// The output ended: the content not yet sent, and the calls.
    pub fn finish(self) -> (String, Vec<ToolCall>) {
        let p = parse(self.format, &self.full);
        if p.calls.is_empty() {
            return (self.full[self.emitted..].to_string(), Vec::new());
        }
        let mut rest = p.before.get(self.emitted..).unwrap_or("").to_string();
        rest.push_str(&p.after);
        if rest.trim().is_empty() {
            rest.clear();
        }
        (rest, p.calls)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(format: ToolFormat, deltas: &[&str]) -> (String, Vec<ToolCall>) {
        let mut s = ToolStream::new(format);
        let mut content = String::new();
        for d in deltas {
            content.push_str(&s.push(d));
        }
        let (rest, calls) = s.finish();
        content.push_str(&rest);
        (content, calls)
    }

    #[test]
    fn text_before_a_split_marker_streams_and_the_call_is_held() {
        let mut s = ToolStream::new(ToolFormat::Hermes);
        assert_eq!(s.push("Checking"), "Checking");
        assert_eq!(s.push(" now <tool"), " now ");
        assert_eq!(s.push("_call>\n{\"name\": \"f\", "), "");
        assert_eq!(s.push("\"arguments\": {\"a\": 1}}\n</tool_call>"), "");
        let (rest, calls) = s.finish();
        assert_eq!(rest, "");
        assert_eq!(calls[0].name, "f");
        assert_eq!(calls[0].arguments, r#"{"a":1}"#);
    }

    #[test]
    fn a_marker_prefix_that_goes_elsewhere_is_released() {
        let (content, calls) = run(ToolFormat::Hermes, &["a <to", "ol> b"]);
        assert_eq!(content, "a <tool> b");
        assert!(calls.is_empty());
    }

    #[test]
    fn llama_holds_a_leading_object_and_releases_it_when_it_is_no_call() {
        let (content, calls) = run(
            ToolFormat::Llama3Json,
            &[" {\"name\": \"f\",", " \"parameters\": {}}"],
        );
        assert_eq!(content, "");
        assert_eq!(calls.len(), 1);
        let (content, calls) = run(ToolFormat::Llama3Json, &["{\"x\": 1}"]);
        assert_eq!(content, "{\"x\": 1}");
        assert!(calls.is_empty());
        let (content, _) = run(ToolFormat::Llama3Json, &["Sure {", "x}"]);
        assert_eq!(content, "Sure {x}");
    }

    #[test]
    fn mistral_waits_on_a_lone_bracket() {
        let mut s = ToolStream::new(ToolFormat::MistralNemo);
        assert_eq!(s.push("["), "");
        assert_eq!(s.push("1, 2]"), "[1, 2]");
        let (content, calls) = run(
            ToolFormat::MistralNemo,
            &["[", "{\"name\": \"f\", \"arguments\": {}}]"],
        );
        assert_eq!((content.as_str(), calls.len()), ("", 1));
    }
}
