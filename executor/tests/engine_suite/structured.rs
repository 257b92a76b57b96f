//! Structured outputs on the real model: what a schema-constrained request
//! returns parses and validates whatever the sampler draws, a cut at
//! `max_tokens` says `length`, constrained sampling is batch invariant, and a
//! schema llguidance cannot enforce is a typed refusal.

use serde_json::{Value, json};
use stoker_executor::structured::{GrammarError, StructuredOutput};
use stoker_executor::{
    EngineConfig, EngineError, FinishReason, Lane, SamplingParams, ValidationError,
};

use super::common::*;

fn label_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "label": {"enum": ["positive", "negative", "neutral"]},
            "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
            "reason": {"type": "string", "maxLength": 40}
        },
        "required": ["label", "confidence", "reason"],
        "additionalProperties": false
    })
}

/// The checks the schema above makes, by hand.
fn assert_valid_label(text: &str) {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {text}"));
    let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["confidence", "label", "reason"], "{text}");
    assert!(
        ["positive", "negative", "neutral"].contains(&o["label"].as_str().unwrap_or("")),
        "{text}"
    );
    let c = o["confidence"].as_i64().unwrap_or(-1);
    assert!((0..=100).contains(&c), "{text}");
    assert!(
        o["reason"]
            .as_str()
            .is_some_and(|r| r.chars().count() <= 40),
        "{text}"
    );
}

fn constrained(
    format: StructuredOutput,
    temperature: f32,
    seed: u64,
    max: usize,
) -> SamplingParams {
    SamplingParams {
        temperature,
        seed: Some(seed),
        max_tokens: max,
        structured: Some(format),
        ..SamplingParams::default()
    }
}

#[test]
fn json_schema_outputs_parse_and_validate_greedy_and_sampled() {
    let engine = engine(EngineConfig::default());
    let format = StructuredOutput::JsonSchema(label_schema());
    let mut handles = Vec::new();
    for (i, p) in PROMPTS.iter().enumerate() {
        let prompt = chat_prompt(&engine, &format!("Classify the sentiment of: {p}"));
        for (temperature, seed) in [(0.0, 0), (1.0, i as u64), (1.5, 100 + i as u64)] {
            let params = constrained(format.clone(), temperature, seed, 120);
            let req = request(&engine, prompt.clone(), params, Lane::Interactive);
            handles.push(engine.submit(req).unwrap());
        }
    }
    for mut h in handles {
        let c = h.collect_blocking();
        assert!(c.error.is_none(), "{:?}", c.error);
        assert_eq!(c.finish, Some(FinishReason::Stop), "{:?}", c.text);
        assert_valid_label(&c.text);
    }
}

#[test]
fn json_object_outputs_are_objects() {
    let engine = engine(EngineConfig::default());
    for seed in 0..4 {
        let prompt = chat_prompt(&engine, "Describe a cat as JSON.");
        let params = constrained(StructuredOutput::JsonObject, 1.0, seed, 200);
        let c = engine
            .submit(request(&engine, prompt, params, Lane::Interactive))
            .unwrap()
            .collect_blocking();
        if c.finish == Some(FinishReason::Stop) {
            let v: Value = serde_json::from_str(&c.text).unwrap_or_else(|e| panic!("{e}: {c:?}"));
            assert!(v.is_object(), "{}", c.text);
        } else {
            assert_eq!(c.finish, Some(FinishReason::Length), "{c:?}");
            assert!(c.text.starts_with('{'), "{}", c.text);
        }
    }
}

#[test]
fn a_constrained_output_cut_by_max_tokens_says_length() {
    let engine = engine(EngineConfig::default());
    // The story cannot end within the budget, so the cut comes first.
    let schema = json!({"type": "object",
        "properties": {"story": {"type": "string", "minLength": 500}},
        "required": ["story"], "additionalProperties": false});
    let prompt = chat_prompt(&engine, "Tell me a long story.");
    let params = constrained(StructuredOutput::JsonSchema(schema), 0.0, 0, 16);
    let c = engine
        .submit(request(&engine, prompt, params, Lane::Interactive))
        .unwrap()
        .collect_blocking();
    assert_eq!(c.finish, Some(FinishReason::Length), "{c:?}");
    assert_eq!(c.token_ids.len(), 16);
    assert!(
        c.text.starts_with("{\"story\":\""),
        "{:?} {:?}",
        c.text,
        c.token_ids
    );
}

#[test]
fn constrained_sampling_is_batch_invariant() {
    let engine = engine(EngineConfig::default());
    let format = StructuredOutput::JsonSchema(label_schema());
    let prompt = chat_prompt(&engine, "Classify: the food was cold and late.");
    let params = SamplingParams {
        logprobs: Some(3),
        ..constrained(format.clone(), 1.2, 77, 80)
    };
    let alone = engine
        .submit(request(
            &engine,
            prompt.clone(),
            params.clone(),
            Lane::Interactive,
        ))
        .unwrap()
        .collect_blocking();
    assert_valid_label(&alone.text);
    let noise: Vec<_> = (0..5)
        .map(|i| {
            let p = chat_prompt(&engine, &format!("Classify review number {i}: fine."));
            let n = if i % 2 == 0 {
                constrained(format.clone(), 1.0, i, 60)
            } else {
                SamplingParams {
                    temperature: 1.0,
                    seed: Some(i),
                    max_tokens: 30,
                    ..SamplingParams::default()
                }
            };
            engine.submit(request(&engine, p, n, Lane::Batch)).unwrap()
        })
        .collect();
    let crowd = engine
        .submit(request(&engine, prompt, params, Lane::Interactive))
        .unwrap()
        .collect_blocking();
    for mut h in noise {
        assert!(h.collect_blocking().error.is_none());
    }
    assert_eq!(alone.token_ids, crowd.token_ids);
    assert_eq!(alone.text, crowd.text);
    for (a, b) in alone.logprobs.iter().zip(&crowd.logprobs) {
        assert_eq!(a.logprob.to_bits(), b.logprob.to_bits());
    }
}

#[test]
fn a_schema_llguidance_cannot_enforce_is_a_typed_refusal() {
    let engine = engine(EngineConfig::default());
    let prompt = chat_prompt(&engine, "Hi");
    for (schema, needle) in [
        (json!({"$ref": "#/$defs/missing"}), "missing"),
        (json!({"type": "string", "pattern": "(?<=a)b"}), ""),
        (json!({"type": "integer", "minimum": 5, "maximum": 1}), ""),
    ] {
        let params = constrained(StructuredOutput::JsonSchema(schema.clone()), 0.0, 0, 8);
        let err = engine
            .submit(request(&engine, prompt.clone(), params, Lane::Interactive))
            .expect_err("refused at submit");
        match err {
            EngineError::Invalid(ValidationError::ResponseFormat(GrammarError::Compile(m))) => {
                assert!(m.contains(needle), "{schema}: {m}");
                assert!(m.len() <= 512 && !m.contains('\n'), "{m}");
            }
            other => panic!("{schema}: {other:?}"),
        }
    }
}

/// Schemas a hostile or careless client sends. Each one is either refused
/// at submit with a typed error that names what is wrong, or compiles and
/// generates without an error; none reaches the engine only to fail its
/// first mask (a `$ref` that only refers to itself was a 500), and none
/// takes long to decide (llguidance's fuel limits).
fn hostile_schemas() -> Vec<(&'static str, Value, bool)> {
    let mut deep = json!({"type": "integer"});
    for _ in 0..200 {
        deep = json!({"type": "array", "items": deep, "minItems": 1});
    }
    let mut deep_objects = json!({"type": "string"});
    for _ in 0..200 {
        deep_objects =
            json!({"type": "object", "properties": {"a": deep_objects}, "required": ["a"]});
    }
    let huge_enum: Vec<String> = (0..6000).map(|i| format!("v{i}")).collect();
    vec![
        (
            "a $ref that only refers to itself",
            json!({"$ref": "#/$defs/loop", "$defs": {"loop": {"$ref": "#/$defs/loop"}}}),
            true,
        ),
        (
            "two $refs that refer to each other",
            json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}),
            true,
        ),
        ("an unsatisfiable schema", json!({"not": {}}), true),
        ("the false schema", json!(false), true),
        (
            "a required property that cannot exist",
            json!({"type": "object", "properties": {"a": false}, "required": ["a"]}),
            true,
        ),
        ("an empty enum", json!({"enum": []}), true),
        ("200 nested arrays", deep, false),
        ("200 nested objects", deep_objects, false),
        (
            "an enum of 6,000 strings",
            json!({"enum": huge_enum}),
            false,
        ),
        (
            "a pattern with nested quantifiers",
            json!({"type": "string", "pattern": "^(a+)+(b+)+(c|cc)*d{100}$"}),
            false,
        ),
        (
            "a pattern with a huge repetition count",
            json!({"type": "string", "pattern": "^(x{1000}){1000}$"}),
            false,
        ),
        (
            "an allOf of incompatible types",
            json!({"allOf": [{"type": "string"}, {"type": "integer"}]}),
            true,
        ),
    ]
}

#[test]
fn hostile_schemas_are_refused_at_submit_or_served_never_failed_mid_way() {
    let engine = engine(EngineConfig::default());
    let prompt = chat_prompt(&engine, "Hi");
    for (what, schema, must_refuse) in hostile_schemas() {
        let started = std::time::Instant::now();
        let params = constrained(StructuredOutput::JsonSchema(schema), 0.0, 0, 4);
        let submitted = engine.submit(request(&engine, prompt.clone(), params, Lane::Interactive));
        let decided = started.elapsed();
        // Not a speed measurement: a bound an unbounded grammar would blow
        // through by orders of magnitude.
        assert!(decided.as_secs() < 5, "{what}: {decided:?} to decide");
        match submitted {
            Err(EngineError::Invalid(ValidationError::ResponseFormat(GrammarError::Compile(
                m,
            )))) => {
                assert!(
                    !m.is_empty() && m.len() <= 512 && !m.contains('\n'),
                    "{what}: {m}"
                );
                if what.starts_with("a $ref that only refers to itself") {
                    // llguidance says only `NoExtensionBias`; the client
                    // reads what it means.
                    assert!(m.contains("no token can continue"), "{what}: {m}");
                }
                eprintln!("{what}: refused in {decided:?}: {m}");
            }
            Err(other) => panic!("{what}: an untyped refusal {other:?}"),
            Ok(mut h) => {
                assert!(!must_refuse, "{what}: accepted");
                let c = h.collect_blocking();
                assert!(c.error.is_none(), "{what}: failed mid-way: {:?}", c.error);
                assert!(!c.token_ids.is_empty(), "{what}: nothing generated");
                eprintln!("{what}: compiled in {decided:?}, generated {:?}", c.text);
            }
        }
    }
}
