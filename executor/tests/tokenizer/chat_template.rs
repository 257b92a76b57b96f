//! Chat template tests: snapshots of SmolLM2's template, the ChatML fallback, and
//! hostile templates that must end in a typed error.

use std::collections::HashMap;

use candle_core::quantized::gguf_file::Value;
use sha2::{Digest, Sha256};
use stoker_executor::chat_template::{ChatMessage, ChatTemplate, RenderOptions, TemplateError};

use super::{metadata, tokenizer};

fn smollm_template() -> ChatTemplate {
    ChatTemplate::from_gguf_metadata(metadata(), tokenizer()).unwrap()
}

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "You are terse."),
        ChatMessage::new("user", "What is 2+2?"),
        ChatMessage::new("assistant", "4."),
        ChatMessage::new("user", "And 3+3?"),
    ]
}

/// Renders `source` with one user message.
fn render_hostile(source: &str) -> Result<String, TemplateError> {
    ChatTemplate::new(source, "<s>", "</s>")?.render(&[ChatMessage::new("user", "hi")], true)
}

#[test]
fn system_user_assistant_user_conversation_renders_as_the_snapshot() {
    let rendered = smollm_template().render(&conversation(), true).unwrap();
    let snapshot = "<|im_start|>system\nYou are terse.<|im_end|>\n\
                    <|im_start|>user\nWhat is 2+2?<|im_end|>\n\
                    <|im_start|>assistant\n4.<|im_end|>\n\
                    <|im_start|>user\nAnd 3+3?<|im_end|>\n\
                    <|im_start|>assistant\n";
    assert_eq!(rendered, snapshot);
}

#[test]
fn conversation_without_system_message_gets_the_default_one() {
    let rendered = smollm_template()
        .render(&[ChatMessage::new("user", "Hi!")], false)
        .unwrap();
    let snapshot = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, \
                    trained by Hugging Face<|im_end|>\n\
                    <|im_start|>user\nHi!<|im_end|>\n";
    assert_eq!(rendered, snapshot);
}

#[test]
fn rendered_prompt_tokenizes_with_special_tokens_as_single_ids() {
    let rendered = smollm_template().render(&conversation(), true).unwrap();
    let ids = tokenizer().encode(&rendered).unwrap();
    assert_eq!(&ids[..1], &[1]);
    assert_eq!(
        &ids[ids.len() - 4..],
        &[1, 520, 9531, 198],
        "<|im_start|>assistant\\n"
    );
    assert_eq!(
        ids.iter().filter(|&&id| id == 2).count(),
        4,
        "one <|im_end|> per message"
    );
}

#[test]
fn template_hash_is_the_sha256_of_its_source() {
    let t = smollm_template();
    assert!(!t.is_fallback());
    assert_eq!(
        t.sha256_hex(),
        hex::encode(Sha256::digest(t.source().as_bytes()))
    );
    assert_eq!(
        (t.bos_token(), t.eos_token()),
        ("<|im_start|>", "<|im_end|>")
    );
}

#[test]
fn missing_template_falls_back_to_plain_chatml() {
    let mut md: HashMap<String, Value> = metadata().clone();
    md.remove("tokenizer.chat_template");
    let t = ChatTemplate::from_gguf_metadata(&md, tokenizer()).unwrap();
    assert!(t.is_fallback());
    let rendered = t.render(&[ChatMessage::new("user", "Hi!")], true).unwrap();
    assert_eq!(
        rendered,
        "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn template_of_the_wrong_type_is_a_typed_error() {
    let mut md: HashMap<String, Value> = metadata().clone();
    md.insert("tokenizer.chat_template".into(), Value::U32(1));
    let err = ChatTemplate::from_gguf_metadata(&md, tokenizer()).unwrap_err();
    assert!(matches!(err, TemplateError::WrongType), "{err:?}");
}

#[test]
fn bos_and_eos_tokens_are_available_to_templates() {
    let t = ChatTemplate::new(
        "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
        "<s>",
        "</s>",
    )
    .unwrap();
    assert_eq!(
        t.render(&[ChatMessage::new("user", "x")], false).unwrap(),
        "<s>x</s>"
    );
}

#[test]
fn blocks_are_trimmed_like_hugging_face_templates() {
    let t = ChatTemplate::new(
        "  {% for m in messages %}\n{{ m.role }}\n  {% endfor %}\n",
        "",
        "",
    )
    .unwrap();
    let out = t
        .render(
            &[ChatMessage::new("a", ""), ChatMessage::new("b", "")],
            false,
        )
        .unwrap();
    assert_eq!(out, "a\nb\n");
}

#[test]
fn template_with_a_syntax_error_is_a_typed_error() {
    let err = render_hostile("{% for m in messages %}{{ m.content }").unwrap_err();
    assert!(matches!(err, TemplateError::Syntax(_)), "{err:?}");
    let err = render_hostile("{% if %}").unwrap_err();
    assert!(matches!(err, TemplateError::Syntax(_)), "{err:?}");
}

#[test]
fn raise_exception_becomes_a_typed_error_with_its_message() {
    let err = render_hostile("{{ raise_exception('roles must alternate') }}").unwrap_err();
    assert!(
        matches!(&err, TemplateError::Raised(m) if m == "roles must alternate"),
        "{err:?}"
    );
}

#[test]
fn recursing_macro_ends_with_a_resource_limit_error() {
    let err = render_hostile("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").unwrap_err();
    assert!(matches!(err, TemplateError::ResourceLimit(_)), "{err:?}");
}

#[test]
fn endless_loop_runs_out_of_fuel() {
    let started = std::time::Instant::now();
    let err = render_hostile(
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
    )
    .unwrap_err();
    assert!(matches!(err, TemplateError::ResourceLimit(_)), "{err:?}");
    assert!(
        started.elapsed().as_secs() < 10,
        "fuel should stop it quickly"
    );
}

#[test]
fn huge_output_is_capped() {
    let err =
        render_hostile("{% for a in range(100000) %}{{ 'x' * 100000 }}{% endfor %}").unwrap_err();
    assert!(matches!(err, TemplateError::ResourceLimit(_)), "{err:?}");
}

#[test]
fn runtime_type_errors_are_typed_render_errors() {
    let err = render_hostile("{{ messages + 1 }}").unwrap_err();
    assert!(matches!(err, TemplateError::Render(_)), "{err:?}");
}

#[test]
fn unknown_methods_are_typed_render_errors() {
    for source in [
        "{{ 'x'.no_such_method() }}",
        "{{ messages.append(1) }}",
        "{{ messages[0].pop('role') }}",
        "{{ (1).bit_length() }}",
    ] {
        let err = render_hostile(source).unwrap_err();
        assert!(matches!(err, TemplateError::Render(_)), "{source}: {err:?}");
    }
}

#[test]
fn recursive_loop_ends_with_a_resource_limit_error() {
    let err =
        render_hostile("{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}").unwrap_err();
    assert!(matches!(err, TemplateError::ResourceLimit(_)), "{err:?}");
}

fn render_one(source: &str, options: &RenderOptions) -> String {
    ChatTemplate::new(source, "<s>", "</s>")
        .unwrap()
        .with_fixed_now(fixed_now())
        .render_with(&[ChatMessage::new("user", "hi")], options)
        .unwrap()
}

fn fixed_now() -> chrono::NaiveDateTime {
    chrono::NaiveDate::from_ymd_opt(2024, 7, 26)
        .unwrap()
        .and_hms_opt(9, 5, 0)
        .unwrap()
}

#[test]
fn tojson_writes_like_python_json_dumps() {
    let o = RenderOptions::default();
    let value = "{'a': [1, 2.5, 'ü\"\\n', none, true], 'b': {}}";
    assert_eq!(
        render_one(&format!("{{{{ {value} | tojson }}}}"), &o),
        r#"{"a": [1, 2.5, "ü\"\n", null, true], "b": {}}"#
    );
    assert_eq!(
        render_one(
            &format!("{{{{ {value} | tojson(ensure_ascii=True) }}}}"),
            &o
        ),
        r#"{"a": [1, 2.5, "\u00fc\"\n", null, true], "b": {}}"#
    );
    assert_eq!(
        render_one(&format!("{{{{ {value} | tojson(indent=2) }}}}"), &o),
        "{\n  \"a\": [\n    1,\n    2.5,\n    \"ü\\\"\\n\",\n    null,\n    true\n  ],\n  \"b\": {}\n}"
    );
    assert_eq!(
        render_one(
            "{{ {'b': 1, 'a': 2} | tojson(separators=(',', ':'), sort_keys=true) }}",
            &o
        ),
        r#"{"a":2,"b":1}"#
    );
    let err = ChatTemplate::new("{{ nothing | tojson }}", "", "")
        .unwrap()
        .render(&[], false)
        .unwrap_err();
    assert!(matches!(err, TemplateError::Render(_)), "{err:?}");
}

#[test]
fn strftime_now_reads_the_injected_clock() {
    let out = render_one(
        "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %d, %Y') }}|{{ strftime_now('%Y-%m-%d') }}",
        &RenderOptions::default(),
    );
    assert_eq!(out, "26 Jul 2024|July 26, 2024|2024-07-26");
    let err = ChatTemplate::new("{{ strftime_now('%Q') }}", "", "")
        .unwrap()
        .render(&[], false)
        .unwrap_err();
    assert!(matches!(err, TemplateError::Render(_)), "{err:?}");
}

#[test]
fn tools_are_none_when_absent_and_extra_variables_stay_undefined_unless_set() {
    let source = "{{ tools is none }} {{ tools is defined }} {{ enable_thinking is defined }}\
                  {% if tools %} {{ tools[0].name }}{% endif %}\
                  {% if enable_thinking is defined %} {{ enable_thinking }}{% endif %}";
    assert_eq!(
        render_one(source, &RenderOptions::default()),
        "True True False"
    );
    let mut options = RenderOptions {
        tools: Some(serde_json::json!([{"name": "search"}])),
        ..RenderOptions::default()
    };
    options
        .extra
        .insert("enable_thinking".into(), serde_json::Value::Bool(false));
    assert_eq!(render_one(source, &options), "False True True search False");
}

#[test]
fn python_string_and_dict_methods_work() {
    let out = render_one(
        "{{ '  a b  '.strip() }}|{{ 'a,b'.split(',') | join('+') }}|{{ 'xab'.lstrip('x') }}|\
         {{ 'ab'.startswith('a') }}|{{ 'ab'.endswith(('x', 'b')) }}|{{ 'ab'.upper() }}|\
         {{ 'a b'.title() }}|{{ 'abc'.replace('b', '') }}|\
         {% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}|\
         {{ messages[0].get('missing', 'dflt') }}",
        &RenderOptions::default(),
    );
    assert_eq!(
        out,
        "a b|a+b|ab|True|True|AB|A B|ac|role=user;content=hi;|dflt"
    );
}

#[test]
fn generation_tags_render_their_body() {
    let out = render_one(
        "{% for m in messages %}{%- generation -%} [{{ m.content }}] {%- endgeneration -%}{% endfor %}",
        &RenderOptions::default(),
    );
    assert_eq!(out, "[hi]");
}
