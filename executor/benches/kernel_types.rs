//! Every tensor type's matmul at the shapes of llama.cpp's own kernel benchmark.
//!
//! `test-backend-ops perf -o MUL_MAT` times `MUL_MAT(type_a, f32, m=4096, n=bs,
//! k=14336)` for every type: a 4096 × 14336 weight matrix against `bs` activation rows.
//! This bench builds the same product for each type stoker reads (random weights
//! quantized by stoker's own quantizers, which write llama-quantize's bytes) and prints
//! one line per (type, bs) in the same units, microseconds per run and GFLOP/s, so
//! `scripts/bench-kernels-llama-cpp.sh` can set the two side by side in one run.
//!
//! Run with `cargo bench -p stoker-executor --bench kernel_types`. `STOKER_BENCH_TYPES`
//! (comma-separated ggml names) and `STOKER_BENCH_BS` (default `1,8,512`) narrow it.
//! Each figure is the median of interleaved rounds of at least 0.3 s each.

use std::hint::black_box;
use std::time::Instant;

use rayon::prelude::*;
use stoker_executor::kernels::{MatmulScratch, QMatrix, matmul_with_scratch};
use stoker_executor::quantize::{SUPPORTED_TYPES, parse_type, quantize_row};
use stoker_test_support::{TestRng, median};

/// llama.cpp's perf shape: rows (output features) and columns (input features).
const M: usize = 4096;
const K: usize = 14336;

fn list(var: &str, default: &str) -> Vec<String> {
    std::env::var(var)
        .unwrap_or_else(|_| default.to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Deterministic weights with a spread like a trained layer's (mostly small, some large).
fn weights(seed: u64) -> Vec<f32> {
    (0..M)
        .into_par_iter()
        .flat_map_iter(|r| {
            let mut rng = TestRng::new(seed ^ (r as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            (0..K).map(move |_| {
                let u = rng.uniform() * 0.5;
                u * u * u * 0.2
            })
        })
        .collect()
}

fn main() {
    let types = list("STOKER_BENCH_TYPES", &SUPPORTED_TYPES.join(","));
    let batch: Vec<usize> = list("STOKER_BENCH_BS", "1,8,512")
        .iter()
        .map(|b| b.parse().expect("STOKER_BENCH_BS: numbers"))
        .collect();
    let w = weights(7);
    println!(
        "| type | bs | stoker µs/run | stoker GFLOP/s | threads {} |",
        rayon::current_num_threads()
    );
    println!("|---|---|---|---|---|");
    for name in &types {
        let ty = parse_type(name).unwrap_or_else(|e| panic!("{e}"));
        let bytes: Vec<u8> = w
            .par_chunks(K)
            .flat_map_iter(|row| quantize_row(ty, row).expect("whole blocks"))
            .collect();
        let m = QMatrix::from_ggml_bytes(ty, &bytes, M, K).expect("the quantizer's own bytes");
        drop(bytes);
        for &bs in &batch {
            let x: Vec<f32> = (0..bs * K)
                .map(|i| ((i * 7919 % 2003) as f32 - 1001.0) / 1001.0)
                .collect();
            let mut out = vec![0f32; bs * M];
            let mut scratch = MatmulScratch::new();
            matmul_with_scratch(&m, &x, bs, &mut out, &mut scratch).unwrap();
            let mut samples = Vec::new();
            for _ in 0..5 {
                let t0 = Instant::now();
                let mut runs = 0u32;
                while t0.elapsed().as_secs_f64() < 0.3 {
                    matmul_with_scratch(&m, black_box(&x), bs, &mut out, &mut scratch).unwrap();
                    runs += 1;
                }
                samples.push(t0.elapsed().as_secs_f64() / runs as f64);
                black_box(&out);
            }
            let s = median(samples);
            let gflops = 2.0 * (M * K * bs) as f64 / s / 1e9;
            println!("| {name} | {bs} | {:.1} | {gflops:.1} | |", s * 1e6);
        }
    }
}
