//! Every real chat template in llama.cpp's collection renders as the reference
//! renders it.
//!
//! llama.cpp ships the templates of the model families it supports under
//! `models/templates/`; `scripts/fetch-llama-cpp-data.sh` puts them in
//! `models/llama.cpp/templates/`. The expected prompts come from
//! `scripts/make_template_fixtures.py`, which renders each template with Python
//! jinja2 configured as transformers' `apply_chat_template` (the setup llama.cpp's
//! engine reproduces; see the script for why it stands in for llama-server's
//! `/apply-template`) and stores the conversations, the BOS/EOS strings and the
//! clock it used in `executor/tests/fixtures/chat_templates.json`. The comparison
//! is of whole strings; a template jinja2 rejects must be rejected by stoker with a
//! typed error too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use stoker_executor::chat_template::{ChatMessage, ChatTemplate, RenderOptions, TemplateError};

/// Templates stoker renders differently from jinja2, each with the precise
/// reason. The test fails if one of them starts matching (so the list stays
/// true) as well as if any other template differs.
const KNOWN_MISMATCHES: &[(&str, &str)] = &[
    (
        "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
        NONE_TOOLS_LOOP,
    ),
    (
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        NONE_TOOLS_LOOP,
    ),
    (
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        NONE_TOOLS_LOOP,
    ),
];

/// Why the tool-use-only templates differ when no tools are given.
const NONE_TOOLS_LOOP: &str = "the template loops `{% for tool in tools %}` unconditionally; \
    with no tools `tools` is none, and jinja2 raises TypeError ('NoneType' object is not \
    iterable) while minijinja iterates none as an empty sequence (it has no hook to change \
    that), so stoker renders the tool-use system prompt with an empty tool list";

#[derive(Deserialize)]
struct Fixture {
    bos_token: String,
    eos_token: String,
    now: String,
    conversations: BTreeMap<String, Conversation>,
    renders: BTreeMap<String, BTreeMap<String, Expected>>,
}

#[derive(Deserialize)]
struct Conversation {
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Expected {
    Ok(String),
    Error(String),
}

pub(crate) fn templates_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/llama.cpp/templates");
    assert!(
        dir.is_dir(),
        "llama.cpp chat templates not found at {}: run scripts/fetch-llama-cpp-data.sh",
        dir.display()
    );
    dir
}

fn fixture() -> Fixture {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat_templates.json");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("parse chat_templates.json")
}

/// Where `got` first differs from `want`, with some context of both.
pub(crate) fn first_difference(got: &str, want: &str) -> String {
    let at = got
        .char_indices()
        .zip(want.chars())
        .find(|((_, a), b)| a != b)
        .map(|((i, _), _)| i)
        .unwrap_or(got.len().min(want.len()));
    let at = (0..=at)
        .rev()
        .find(|&i| got.is_char_boundary(i) && want.is_char_boundary(i))
        .unwrap_or(0);
    let from = (0..=at.saturating_sub(60))
        .rev()
        .find(|&i| got.is_char_boundary(i) && want.is_char_boundary(i))
        .unwrap_or(0);
    let end = |s: &str| {
        (at + 60..=s.len().max(at + 60))
            .find(|&i| i >= s.len() || s.is_char_boundary(i))
            .map_or(s.len(), |i| i.min(s.len()))
    };
    format!(
        "first difference at byte {at} (lengths: stoker {}, jinja2 {})\n    stoker: {:?}\n    jinja2: {:?}",
        got.len(),
        want.len(),
        &got[from..end(got)],
        &want[from..end(want)],
    )
}

/// Compares one template on every conversation; `None` when all agree.
fn check_template(fx: &Fixture, name: &str, source: &str) -> Option<String> {
    let now =
        chrono::NaiveDateTime::parse_from_str(&fx.now, "%Y-%m-%dT%H:%M:%S").expect("fixture clock");
    let expected = fx.renders.get(name).unwrap_or_else(|| {
        panic!("{name} is not in the fixture: rerun scripts/make_template_fixtures.py")
    });
    let template =
        ChatTemplate::new(source, &fx.bos_token, &fx.eos_token).map(|t| t.with_fixed_now(now));
    let mut problems = Vec::new();
    for (conv_name, conv) in &fx.conversations {
        let want = expected
            .get(conv_name)
            .unwrap_or_else(|| panic!("{name}: no expected render for {conv_name}"));
        let options = RenderOptions {
            add_generation_prompt: conv.add_generation_prompt,
            ..RenderOptions::default()
        };
        let got = match &template {
            Ok(t) => t.render_with(&conv.messages, &options),
            // Compiling only fails with a syntax error.
            Err(e) => Err(TemplateError::Syntax(e.to_string())),
        };
        match (got, want) {
            (Ok(got), Expected::Ok(want)) if &got == want => {}
            (Ok(got), Expected::Ok(want)) => {
                problems.push(format!("  {conv_name}: {}", first_difference(&got, want)));
            }
            (Err(e), Expected::Ok(_)) => {
                problems.push(format!(
                    "  {conv_name}: stoker failed, jinja2 rendered: {e}"
                ));
            }
            (Ok(_), Expected::Error(msg)) => {
                problems.push(format!(
                    "  {conv_name}: stoker rendered, jinja2 raised: {msg}"
                ));
            }
            (Err(e), Expected::Error(msg)) => {
                // raise_exception in jinja2 surfaces as its TemplateError.
                let raised = msg.starts_with("TemplateError: ");
                if raised && !matches!(e, TemplateError::Raised(_)) {
                    problems.push(format!(
                        "  {conv_name}: jinja2 called raise_exception ({msg}), stoker: {e:?}"
                    ));
                }
            }
        }
    }
    (!problems.is_empty()).then(|| problems.join("\n"))
}

#[test]
fn every_llama_cpp_template_renders_as_jinja2_does() {
    let dir = templates_dir();
    let fx = fixture();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("list templates")
        .map(|e| {
            e.expect("dir entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".jinja"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no templates in {}", dir.display());
    let fixture_names: Vec<&String> = fx.renders.keys().collect();
    assert_eq!(
        names.iter().collect::<Vec<_>>(),
        fixture_names,
        "the fixture covers other templates than {}: rerun scripts/make_template_fixtures.py",
        dir.display()
    );

    let mut failures = Vec::new();
    let mut matched = 0;
    for name in &names {
        let source = std::fs::read_to_string(dir.join(name)).expect("read template");
        let known = KNOWN_MISMATCHES.iter().find(|(n, _)| n == name);
        match (check_template(&fx, name, &source), known) {
            (None, None) => matched += 1,
            (Some(problem), None) => failures.push(format!("{name}:\n{problem}")),
            (None, Some(_)) => failures.push(format!(
                "{name}: now matches jinja2; remove it from KNOWN_MISMATCHES"
            )),
            (Some(_), Some(_)) => {}
        }
    }
    eprintln!(
        "{matched} of {} llama.cpp templates render as jinja2 does; {} known mismatches",
        names.len(),
        KNOWN_MISMATCHES.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} templates differ from jinja2:\n{}",
        failures.len(),
        names.len(),
        failures.join("\n")
    );
}
