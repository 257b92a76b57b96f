//! Structured outputs: a response format (JSON, a JSON schema) enforced while
//! decoding, so what a request gets back always parses.
//!
//! The grammar engine is `llguidance`, the one behind vLLM's, SGLang's and
//! llama.cpp's guidance backends. [`Grammars`] is built once per tokenizer
//! (a token trie of the served vocabulary); [`Grammars::compile`] turns a
//! request's [`StructuredOutput`] into a [`Constraint`], one per sequence,
//! which masks the tokens the grammar forbids before each sample and follows
//! every sampled token. Compiling happens off the engine thread (in the
//! caller of `Engine::submit`), and the engine computes a step's masks beside
//! the forward pass rather than after it.

mod constraint;
mod vocabulary;

pub use constraint::{Constraint, Mask};
pub use vocabulary::{Grammars, Vocabulary};

use serde_json::Value;

/// Longest JSON schema accepted, serialized, in bytes.
pub const MAX_SCHEMA_BYTES: usize = 64 << 10;

/// What a response must be.
#[derive(Clone, Debug, PartialEq)]
pub enum StructuredOutput {
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// A JSON value valid against this schema (OpenAI's `json_schema`).
    JsonSchema(Value),
}

impl StructuredOutput {
    /// The JSON schema the grammar is compiled from, with stoker's layout
    /// options unless the schema sets its own `x-guidance`: compact JSON
    /// (no free whitespace between tokens), which keeps a small model from
    /// spending its budget on indentation.
    pub fn schema(&self) -> Value {
        let mut schema = match self {
            StructuredOutput::JsonObject => serde_json::json!({"type": "object"}),
            StructuredOutput::JsonSchema(s) => s.clone(),
        };
        if let Value::Object(map) = &mut schema
            && !map.contains_key("x-guidance")
        {
            map.insert(
                "x-guidance".into(),
                serde_json::json!({"whitespace_flexible": false}),
            );
        }
        schema
    }
}

/// Why a response format cannot be served.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GrammarError {
    #[error("the JSON schema is {got} bytes; the limit is {max}")]
    SchemaTooLarge { got: usize, max: usize },
    #[error("the JSON schema must be an object or a boolean")]
    SchemaNotObject,
    /// llguidance's message names the offending part of the schema.
    #[error("the schema cannot be enforced: {0}")]
    Compile(String),
    /// The grammar compiled and started, then reached a state it cannot
    /// leave; the request ends with what it produced so far.
    #[error("the schema's grammar failed while decoding: {0}")]
    Decoding(String),
    #[error("this model's vocabulary cannot drive a grammar: {0}")]
    Vocabulary(String),
}

impl StructuredOutput {
    /// Checks what can be checked without the vocabulary.
    pub fn validate(&self) -> Result<(), GrammarError> {
        if let StructuredOutput::JsonSchema(s) = self {
            if !(s.is_object() || s.is_boolean()) {
                return Err(GrammarError::SchemaNotObject);
            }
            let got = serde_json::to_vec(s).map(|v| v.len()).unwrap_or(usize::MAX);
            if got > MAX_SCHEMA_BYTES {
                return Err(GrammarError::SchemaTooLarge {
                    got,
                    max: MAX_SCHEMA_BYTES,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn compact_json_unless_the_schema_says_otherwise() {
        let s = StructuredOutput::JsonObject.schema();
        assert_eq!(s["type"], "object");
        assert_eq!(s["x-guidance"]["whitespace_flexible"], false);
        let own = json!({"type": "string", "x-guidance": {"whitespace_flexible": true}});
        let s = StructuredOutput::JsonSchema(own.clone()).schema();
        assert_eq!(s, own);
        // A boolean schema has nowhere to carry options and keeps its meaning.
        let s = StructuredOutput::JsonSchema(json!(true)).schema();
        assert_eq!(s, json!(true));
    }

    #[test]
    fn schemas_that_are_not_objects_or_too_large_are_refused_before_compiling() {
        for bad in [json!(5), json!("x"), json!([1]), json!(null)] {
            assert_eq!(
                StructuredOutput::JsonSchema(bad).validate(),
                Err(GrammarError::SchemaNotObject)
            );
        }
        let big: serde_json::Map<String, Value> = (0..8000)
            .map(|i| (format!("field_{i}"), json!({"type": "string"})))
            .collect();
        let big = json!({"type": "object", "properties": big});
        assert!(matches!(
            StructuredOutput::JsonSchema(big).validate(),
            Err(GrammarError::SchemaTooLarge {
                max: MAX_SCHEMA_BYTES,
                ..
            })
        ));
        assert_eq!(StructuredOutput::JsonObject.validate(), Ok(()));
        assert_eq!(
            StructuredOutput::JsonSchema(json!(false)).validate(),
            Ok(())
        );
    }
}
