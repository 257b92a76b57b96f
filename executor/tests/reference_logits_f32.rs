//! With every weight dequantized to f32, our last-token logits must agree
//! with candle-transformers' quantized Llama forward within 1e-3. Kept in its
//! own test binary because it sets `CANDLE_DEQUANTIZE_ALL` for the process.

#[path = "engine_suite/common.rs"]
mod common;

use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;
use common::*;
use stoker_executor::model::{ForwardChunk, KvStorage, WeightMode, Workspace};
use stoker_executor::{BLOCK_SIZE, BlockId, LoadOptions, Model};

#[test]
fn dequantized_f32_logits_agree_with_the_reference_within_1e_3() {
    // SAFETY: set before any other thread of this test binary reads the
    // environment; this binary has a single test.
    unsafe { std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1") };
    let ours = Model::load(
        &model_path(),
        LoadOptions {
            weights: WeightMode::DequantizedF32,
            ..Default::default()
        },
    )
    .unwrap();
    let mut file = std::fs::File::open(model_path()).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
    let mut reference = ModelWeights::from_gguf(content, &mut file, &Device::Cpu).unwrap();

    let texts = [
        "The quick brown fox jumps over the lazy dog.",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "Καλημέρα κόσμε, 你好世界, 12345",
    ];
    let mut worst = 0f32;
    for text in texts {
        let prompt = ours.tokenizer.encode(text).unwrap();
        let blocks: Vec<BlockId> = (0..prompt.len().div_ceil(BLOCK_SIZE) as u32)
            .map(BlockId)
            .collect();
        let mut kv = KvStorage::new(&ours.config, blocks.len());
        let mut ws = Workspace::default();
        let chunk = ForwardChunk {
            tokens: &prompt,
            start_pos: 0,
            block_table: &blocks,
            logits: true,
            prompt_len: prompt.len(),
        };
        let mine = ours.forward(&[chunk], &mut kv, &mut ws).unwrap().remove(0);

        reference.clear_kv_cache();
        let input = Tensor::new(prompt.as_slice(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let theirs: Vec<f32> = reference
            .forward(&input, 0)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(mine.len(), theirs.len());
        let diff = mine
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        eprintln!("{text:?}: max |Δlogit| = {diff:e}");
        worst = worst.max(diff);
    }
    assert!(worst <= 1e-3, "max logit difference {worst} exceeds 1e-3");
}
