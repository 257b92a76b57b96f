#![allow(dead_code)]
//! Shared helpers for the executor's integration tests.

use std::path::PathBuf;

use stoker_executor::chat_template::ChatMessage;
use stoker_executor::engine::Collected;
use stoker_executor::{
    Engine, EngineConfig, Lane, LoadOptions, Model, SamplingParams, TenantId, ValidRequest,
};

/// The default model: `$STOKER_MODEL`, else `models/` at the workspace root.
pub fn model_path() -> PathBuf {
    if let Ok(p) = std::env::var("STOKER_MODEL") {
        return PathBuf::from(p);
    }
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "model missing at {}: run scripts/fetch-model.sh",
        p.display()
    );
    p
}

pub fn load_model() -> Model {
    Model::load(&model_path(), LoadOptions::default()).expect("load model")
}

pub fn engine(config: EngineConfig) -> Engine {
    Engine::start(load_model(), config).expect("start engine")
}

/// Eight varied prompts, rendered through the chat template.
pub const PROMPTS: [&str; 8] = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers greater than 100.",
    "Explain in one sentence what a KV cache is.",
    "Translate 'good morning' into Spanish and German.",
    "What is 17 times 23?",
    "Give me a short recipe for pancakes.",
    "Why is the sky blue? Answer briefly.",
];

pub fn chat_prompt(engine: &Engine, user: &str) -> Vec<u32> {
    let text = engine
        .chat_template()
        .render(
            &[ChatMessage {
                role: "user".into(),
                content: user.into(),
            }],
            true,
        )
        .expect("render");
    engine.tokenizer().encode(&text).expect("encode")
}

pub fn request(
    engine: &Engine,
    prompt: Vec<u32>,
    params: SamplingParams,
    lane: Lane,
) -> ValidRequest {
    ValidRequest::new(
        prompt,
        params,
        lane,
        TenantId::default(),
        &engine.model_limits(),
    )
    .expect("valid request")
}

pub fn greedy_ids(engine: &Engine, prompt: Vec<u32>, max_tokens: usize) -> Collected {
    let mut params = SamplingParams::greedy(max_tokens);
    params.stop_at_eos = false;
    let mut h = engine
        .submit(request(engine, prompt, params, Lane::Interactive))
        .unwrap();
    h.collect_blocking()
}
