//! Our Q4_1 matmul reproduces candle's `QMatMul` bit for bit on the model's
//! real tensors (same activation quantization, same per-block arithmetic),
//! whatever the batch size. The Q8_0 head is only close: candle's AVX2 Q8_0
//! dot accumulates in another order.

use std::sync::Arc;

use super::common::model_path;
use candle_core::quantized::{QMatMul, gguf_file};
use candle_core::{Device, Module, Tensor};
use stoker_executor::kernels::{QMatrix, matmul};

fn activations(t: usize, k: usize) -> Vec<f32> {
    // Mostly small values with sparse large outliers, like SmolLM2's residual stream.
    (0..t * k)
        .map(|i| (((i * 7919) % 1000) as f32 / 100.0 - 5.0) * if i % 97 == 0 { 30.0 } else { 1.0 })
        .collect()
}

#[test]
fn q4_1_products_equal_candle_bit_for_bit_at_every_batch_size() {
    let mut file = std::fs::File::open(model_path()).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    for name in [
        "blk.0.attn_q.weight",
        "blk.3.ffn_down.weight",
        "blk.29.ffn_up.weight",
    ] {
        let qt = content.tensor(&mut file, name, &Device::Cpu).unwrap();
        let (n, k) = qt.shape().dims2().unwrap();
        let ours = QMatrix::from_qtensor(&qt).unwrap();
        let reference = QMatMul::from_arc(Arc::new(qt)).unwrap();
        for t in [1usize, 4, 5, 8, 17] {
            let x = activations(t, k);
            let mut out = vec![0f32; t * n];
            matmul(&ours, &x, t, &mut out).unwrap();
            let xt = Tensor::from_vec(x, (t, k), &Device::Cpu).unwrap();
            let theirs: Vec<f32> = reference
                .forward(&xt)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let same = out
                .iter()
                .zip(&theirs)
                .filter(|(a, b)| a.to_bits() == b.to_bits())
                .count();
            assert_eq!(
                same,
                out.len(),
                "{name} t={t}: only {same} of {} outputs equal",
                out.len()
            );
        }
    }
}

#[test]
fn the_q8_0_head_agrees_with_candle_closely() {
    let mut file = std::fs::File::open(model_path()).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let qt = content
        .tensor(&mut file, "token_embd.weight", &Device::Cpu)
        .unwrap();
    let (n, k) = qt.shape().dims2().unwrap();
    let ours = QMatrix::from_qtensor(&qt).unwrap();
    let reference = QMatMul::from_arc(Arc::new(qt)).unwrap();
    let t = 3;
    let x = activations(t, k);
    let mut out = vec![0f32; t * n];
    matmul(&ours, &x, t, &mut out).unwrap();
    let xt = Tensor::from_vec(x, (t, k), &Device::Cpu).unwrap();
    let theirs: Vec<f32> = reference
        .forward(&xt)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let worst = out
        .iter()
        .zip(&theirs)
        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "relative difference {worst}");
}
