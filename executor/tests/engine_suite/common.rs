//! Shared helpers for the executor's integration tests: the default model, an
//! engine on it, chat prompts and requests, greedy generation, and logits from
//! both our forward pass and candle's quantized Llama (the reference). The engine
//! suite and `reference_logits_f32` share it, so each test
//! file states what it checks rather than how to set a model up.
// Each test module uses a different subset of the helpers.
#![allow(dead_code)]

use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use stoker_executor::chat_template::ChatMessage;
use stoker_executor::engine::Collected;
use stoker_executor::model::{ForwardChunk, KvStorage, Workspace};
use stoker_executor::{
    BLOCK_SIZE, BlockId, Engine, EngineConfig, Lane, LoadOptions, Model, SamplingParams, TenantId,
    ValidRequest,
};

pub use stoker_test_support::model_path;

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
        .render(&[ChatMessage::new("user", user)], true)
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

/// candle-transformers' quantized Llama on the default model (the reference).
pub fn reference_model() -> ModelWeights {
    let mut file = std::fs::File::open(model_path()).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
    ModelWeights::from_gguf(content, &mut file, &Device::Cpu).unwrap()
}

/// The reference's logits for the last token of `prompt`, run as one call.
pub fn reference_prompt_logits(reference: &mut ModelWeights, prompt: &[u32]) -> Vec<f32> {
    reference.clear_kv_cache();
    let input = Tensor::new(prompt, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    reference
        .forward(&input, 0)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// Our logits for the last token of `prompt`, the whole prompt in one step,
/// in the reference's summation order.
pub fn prompt_logits(model: &Model, prompt: &[u32]) -> Vec<f32> {
    prompt_logits_in(model, prompt, prompt.len())
}

/// The same with rows summed as for a prompt `ordered_prompt_len` long
/// ([`stoker_executor::AttentionOrder::ordered_prompt_len`]): 0 sums every
/// row as in a one-token step, as the engine's default order does.
pub fn prompt_logits_in(model: &Model, prompt: &[u32], ordered_prompt_len: usize) -> Vec<f32> {
    try_prompt_logits_in(model, prompt, ordered_prompt_len).unwrap()
}

/// [`prompt_logits_in`], with the forward pass's typed refusal kept.
pub fn try_prompt_logits_in(
    model: &Model,
    prompt: &[u32],
    ordered_prompt_len: usize,
) -> Result<Vec<f32>, stoker_executor::model::forward::ForwardError> {
    let blocks: Vec<BlockId> = (0..prompt.len().div_ceil(BLOCK_SIZE) as u32)
        .map(BlockId)
        .collect();
    let mut kv = KvStorage::new(&model.config, blocks.len());
    let chunk = ForwardChunk {
        tokens: prompt,
        start_pos: 0,
        block_table: &blocks,
        logits: true,
        score: None,
        prompt_len: ordered_prompt_len,
    };
    Ok(model
        .forward(&[chunk], &mut kv, &mut Workspace::default())?
        .remove(0))
}

/// The largest absolute difference between two logit vectors.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}
