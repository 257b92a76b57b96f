//! Reference parity with candle-transformers' own quantized Llama forward
//! (used only here, as an independent single-sequence implementation).


use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use crate::common::*;
use stoker_executor::EngineConfig;

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
fn at_least_seven_of_eight_prompts_match_the_reference_over_48_greedy_tokens() {
    let engine = engine(EngineConfig::default());
    let path = model_path();
    let mut file = std::fs::File::open(&path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
    let mut reference = ModelWeights::from_gguf(content, &mut file, &Device::Cpu).unwrap();

    let mut matching = 0;
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
    }
    eprintln!("{}", report.join("\n"));
    assert!(
        matching >= 7,
        "only {matching} of 8 prompts match:\n{}",
        report.join("\n")
    );
}
