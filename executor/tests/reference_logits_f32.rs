//! With every weight dequantized to f32, our last-token logits must agree
//! with candle-transformers' quantized Llama forward within 1e-3. candle
//! reads `CANDLE_DEQUANTIZE_ALL` for its whole process, so the test runs
//! itself again in a child of this binary with the variable set, and the
//! rest of the suite never sees it.

use std::process::Command;

use super::engine_suite::common::*;
use stoker_executor::model::WeightMode;
use stoker_executor::{LoadOptions, Model};

/// Set in the child that runs the comparison.
const CHILD: &str = "STOKER_REFERENCE_F32_CHILD";
const NAME: &str =
    "reference_logits_f32::dequantized_f32_logits_agree_with_the_reference_within_1e_3";

#[test]
fn dequantized_f32_logits_agree_with_the_reference_within_1e_3() {
    if std::env::var_os(CHILD).is_none() {
        let exe = std::env::current_exe().unwrap();
        let out = Command::new(&exe)
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .env("CANDLE_DEQUANTIZE_ALL", "1")
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", exe.display()));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        eprintln!("{stderr}");
        assert!(
            out.status.success(),
            "the child failed:\n{stdout}\n{stderr}"
        );
        // The filter matched this test and nothing else: the comparison ran.
        assert!(
            stdout.contains("1 passed"),
            "the child ran no test:\n{stdout}"
        );
        return;
    }
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
