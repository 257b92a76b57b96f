//! With every weight dequantized to f32, our last-token logits must agree
//! with candle-transformers' quantized Llama forward within 1e-3. Kept in its
//! own test binary because it sets `CANDLE_DEQUANTIZE_ALL` for the process.

#[path = "engine_suite/common.rs"]
mod common;

use common::*;
use stoker_executor::model::WeightMode;
use stoker_executor::{LoadOptions, Model};

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
    let mut reference = reference_model();

    let texts = [
        "The quick brown fox jumps over the lazy dog.",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "Καλημέρα κόσμε, 你好世界, 12345",
    ];
    let mut worst = 0f32;
    for text in texts {
        let prompt = ours.tokenizer.encode(text).unwrap();
        let mine = prompt_logits(&ours, &prompt);
        let theirs = reference_prompt_logits(&mut reference, &prompt);
        let diff = max_abs_diff(&mine, &theirs);
        eprintln!("{text:?}: max |Δlogit| = {diff:e}");
        worst = worst.max(diff);
    }
    assert!(worst <= 1e-3, "max logit difference {worst} exceeds 1e-3");
}
