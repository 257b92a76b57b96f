//! Reference parity with candle-transformers' own quantized Llama forward
//! (used only here, as an independent single-sequence implementation).
//!
//! Our forward pass reproduces the reference's arithmetic bit for bit: every
//! Q4_1/Q8_0 product is bit-identical to candle's (`candle_bitwise.rs`), and
//! attention sums in the order candle's gemm and softmax kernels use for the
//! reference's two call shapes, a whole prompt and one token at a time
//! (`model::row_order`, checked op by op in `attention_order.rs`). The one
//! product that is not bit-identical is the Q8_0 output head: candle's AVX2
//! Q8_0 dot keeps 8 partial sums per row, ours one per block, which is faster
//! for a batch; that moves logits by about 1e-5, where an attention order
//! difference moved them by 0.3-0.9. Greedy decoding gives the same tokens on
//! every prompt, through the engine's scheduler, paged cache and prefix cache
//! (the prompts share the chat template's system message). The issue asks for
//! 7 of 8 prompts; we hold all 8.

use super::common::*;
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use stoker_executor::{AttentionOrder, EngineConfig};

const NEW_TOKENS: usize = 48;

fn reference_greedy(model: &mut ModelWeights, prompt: &[u32], n: usize) -> Vec<u32> {
    model.clear_kv_cache();
    let mut out = Vec::with_capacity(n);
    let input = Tensor::new(prompt, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let mut logits = model.forward(&input, 0).unwrap();
    for pos in prompt.len()..prompt.len() + n {
        let v: Vec<f32> = logits.squeeze(0).unwrap().to_vec1().unwrap();
        let next = stoker_executor::sampling::argmax(&v);
        out.push(next);
        let input = Tensor::new(&[next], &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        logits = model.forward(&input, pos).unwrap();
    }
    out
}

#[test]
fn last_prompt_token_logits_differ_from_the_references_only_in_the_heads_last_bits() {
    let engine = engine(EngineConfig {
        attention_order: AttentionOrder::Reference,
        ..EngineConfig::default()
    });
    let ours = load_model();
    let mut reference = reference_model();
    for p in PROMPTS {
        let prompt = chat_prompt(&engine, p);
        let mine = prompt_logits(&ours, &prompt);
        let theirs = reference_prompt_logits(&mut reference, &prompt);
        let worst = max_abs_diff(&mine, &theirs);
        eprintln!("{p:?} ({} tokens): max |Δlogit| = {worst:e}", prompt.len());
        // Attention summed in another order moved these logits by 0.3-0.9.
        assert!(worst <= 1e-4, "{p:?}: max |Δlogit| = {worst:e}");
    }
}

#[test]
fn greedy_tokens_equal_the_references_on_every_prompt() {
    let engine = engine(EngineConfig {
        attention_order: AttentionOrder::Reference,
        ..EngineConfig::default()
    });
    let mut reference = reference_model();

    let mut matching = 0;
    let mut first_token = 0;
    let mut report = Vec::new();
    for p in PROMPTS {
        let prompt = chat_prompt(&engine, p);
        let ours = greedy_ids(&engine, prompt.clone(), NEW_TOKENS).token_ids;
        let theirs = reference_greedy(&mut reference, &prompt, NEW_TOKENS);
        let agree = ours.iter().zip(&theirs).take_while(|(a, b)| a == b).count();
        report.push(format!("{p:?}: first {agree} of {NEW_TOKENS} agree"));
        if ours == theirs {
            matching += 1;
        }
        if ours.first() == theirs.first() {
            first_token += 1;
        }
    }
    eprintln!("{}", report.join("\n"));
    let report = report.join("\n");
    assert_eq!(
        (matching, first_token),
        (PROMPTS.len(), PROMPTS.len()),
        "prompts identical over {NEW_TOKENS} tokens, and on the first token:\n{report}"
    );
}
