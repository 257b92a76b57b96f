//! Tests of the quantized matrix-multiply kernels: accuracy against an f32 reference and
//! against candle's `QMatMul`, bitwise batch invariance on both kernel paths and thread
//! pool sizes, agreement of the AVX2 and scalar paths, every tiled format's output bits
//! pinned per path (`kernels/pinned.rs`), and typed errors on hostile input.
//!
//! Real-model tests read `$STOKER_MODEL` or the default model under `models/`
//! (`stoker_test_support::model_path`) and fail with the fix (run
//! `scripts/fetch-model.sh`) when it is missing; none is skipped.

#[path = "kernels/block_formats.rs"]
mod block_formats;
#[path = "kernels/pinned.rs"]
mod pinned;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor, gguf_file};
use candle_core::{Device, Module, Tensor};
use stoker_executor::kernels::{
    KernelError, KernelPath, MatmulScratch, QDtype, QMatrix, matmul, matmul_on_path,
};
use stoker_test_support::{TestRng, model_path};

/// Test data the kernels see: activation-like values from the shared seeded generator.
trait Activations {
    /// Mostly small with occasional outliers, per-block scale varying.
    fn activations(&mut self, n: usize) -> Vec<f32>;
}

impl Activations for TestRng {
    fn activations(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| {
                let v = self.uniform();
                let scale = [0.05, 1.0, 3.0, 0.3][(i / 32) % 4];
                if self.uniform() > 0.98 {
                    v * 20.0
                } else {
                    v * scale
                }
            })
            .collect()
    }
}

fn paths() -> Vec<KernelPath> {
    [KernelPath::Scalar, KernelPath::Avx2, KernelPath::Avx512Vnni]
        .into_iter()
        .filter(|p| p.is_available())
        .collect()
}

/// A random weight matrix quantized by candle (ggml's reference quantizer) to `dtype`.
fn random_qtensor(dtype: GgmlDType, rows: usize, cols: usize, seed: u64) -> QTensor {
    let mut rng = TestRng::new(seed);
    let w: Vec<f32> = (0..rows * cols).map(|_| rng.uniform() * 0.2).collect();
    let t = Tensor::from_vec(w, (rows, cols), &Device::Cpu).unwrap();
    QTensor::quantize(&t, dtype).unwrap()
}

fn random_matrix(dtype: QDtype, rows: usize, cols: usize, seed: u64) -> QMatrix {
    match dtype {
        QDtype::Q4_1 => QMatrix::from_qtensor(&random_qtensor(GgmlDType::Q4_1, rows, cols, seed)),
        QDtype::Q8_0 => QMatrix::from_qtensor(&random_qtensor(GgmlDType::Q8_0, rows, cols, seed)),
        QDtype::Blocks(b) => QMatrix::from_qtensor(&random_qtensor(
            block_formats::BLOCK_TYPES
                .iter()
                .find(|(t, _)| *t == b)
                .unwrap()
                .1,
            rows,
            cols,
            seed,
        )),
        QDtype::F32 | QDtype::F16 | QDtype::BF16 => {
            let mut rng = TestRng::new(seed);
            QMatrix::from_f32(
                rows,
                cols,
                (0..rows * cols).map(|_| rng.uniform()).collect(),
            )
        }
    }
    .unwrap()
}

fn run(path: KernelPath, w: &QMatrix, x: &[f32], t: usize) -> Vec<f32> {
    let mut out = vec![0f32; t * w.rows()];
    matmul_on_path(path, w, x, t, &mut out, &mut MatmulScratch::new()).unwrap();
    out
}

fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

/// `Σ_k w_k x_k` in f64 and `Σ_k |w_k x_k|`, per output element.
fn reference(wf: &[f32], x: &[f32], t: usize, rows: usize, cols: usize) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(t * rows);
    for i in 0..t {
        for n in 0..rows {
            let (mut s, mut a) = (0f64, 0f64);
            for k in 0..cols {
                let p = wf[n * cols + k] as f64 * x[i * cols + k] as f64;
                s += p;
                a += p.abs();
            }
            out.push((s, a));
        }
    }
    out
}

/// Q4_1 block minimums `m[row][block]`, read from the ggml bytes.
fn q4_1_mins(w: &QMatrix) -> Vec<f32> {
    w.to_ggml_bytes()
        .chunks_exact(20)
        .map(|b| half::f16::from_le_bytes([b[2], b[3]]).to_f32())
        .collect()
}

/// The error bound of a quantized product against the exact product of the dequantized
/// weights with the unquantized activations, for output (row `n`, activation row `i`).
///
/// Per block b of 32 activations with scale `d = amax/127`, the kernel uses quants `q`
/// with `|x − q·d| ≤ d/2` and the scale rounded to f16 (`|d − d16| ≤ 2⁻¹¹·d`, so
/// `|q|·|d − d16| ≤ 127·2⁻¹¹·d < 0.063·d`): each activation is off by at most `0.563·d`,
/// which weighted by the dequantized weights gives `0.563·d·Σ|w|`. The Q4_1 min term uses
/// `s = fp16(d·Σq)` instead of `d16·Σq`, two f16 roundings: `2⁻¹⁰·|m|·d·|Σq|` with
/// `|Σq| ≤ Σ|x|/d + 16`. The f32 accumulation over at most 48 blocks adds a relative
/// `2⁻¹⁷` of `Σ|w|·(|x| + d)`.
fn quantized_bound(wf: &[f32], mins: Option<&[f32]>, xr: &[f32], n: usize) -> f64 {
    let cols = xr.len();
    let mut bound = 0f64;
    for (b, xs) in xr.chunks_exact(32).enumerate() {
        let d = xs.iter().fold(0f32, |a, v| a.max(v.abs())) as f64 / 127.0;
        let ws = &wf[n * cols + 32 * b..n * cols + 32 * b + 32];
        let wabs: f64 = ws.iter().map(|w| w.abs() as f64).sum();
        let xabs: f64 = xs.iter().map(|x| x.abs() as f64).sum();
        let wx: f64 = ws
            .iter()
            .zip(xs)
            .map(|(w, x)| (*w as f64 * *x as f64).abs())
            .sum();
        bound += 0.563 * d * wabs + (wx + d * wabs) * 2f64.powi(-17);
        if let Some(m) = mins {
            let m = m[n * (cols / 32) + b].abs() as f64;
            bound += 2f64.powi(-10) * m * (xabs + 16.0 * d);
        }
    }
    bound + 1e-6
}

fn check_against_reference(dtype: QDtype, rows: usize, cols: usize, t: usize) {
    let w = random_matrix(dtype, rows, cols, 7);
    let wf = match w.dequantize().data() {
        stoker_executor::kernels::QData::F32(v) => v.to_vec(),
        _ => unreachable!(),
    };
    let mins = (dtype == QDtype::Q4_1).then(|| q4_1_mins(&w));
    let x = TestRng::new(11).activations(t * cols);
    let refs = reference(&wf, &x, t, rows, cols);
    for path in paths() {
        let out = run(path, &w, &x, t);
        let mut worst = 0f64;
        for i in 0..t {
            for n in 0..rows {
                let (exact, abs) = refs[i * rows + n];
                let got = out[i * rows + n] as f64;
                let bound = if dtype == QDtype::F32 {
                    // Plain f32 sums of `cols` products: relative `cols·2⁻²⁴` of Σ|wx|.
                    cols as f64 * 2f64.powi(-24) * abs + 1e-7
                } else {
                    quantized_bound(&wf, mins.as_deref(), &x[i * cols..(i + 1) * cols], n)
                };
                let err = (got - exact).abs();
                assert!(
                    err <= bound,
                    "{dtype:?} {path:?} [{i},{n}]: got {got}, exact {exact}, err {err} > {bound}"
                );
                worst = worst.max(err / bound);
            }
        }
        eprintln!("{dtype:?} {path:?}: worst error is {worst:.3} of the bound");
    }
}

#[test]
fn q4_1_products_stay_within_the_activation_quantization_bound() {
    check_against_reference(QDtype::Q4_1, 45, 320, 7);
}

#[test]
fn q8_0_products_stay_within_the_activation_quantization_bound() {
    check_against_reference(QDtype::Q8_0, 45, 320, 7);
}

#[test]
fn f32_products_match_an_f64_reference_to_rounding() {
    check_against_reference(QDtype::F32, 45, 200, 5);
    check_against_reference(QDtype::F32, 19, 13, 3);
}

fn max_rel_diff(a: &[f32], b: &[f32], scale: &[(f64, f64)]) -> f64 {
    a.iter()
        .zip(b)
        .zip(scale)
        .map(|((a, b), (_, s))| (*a as f64 - *b as f64).abs() / (s + 1e-6))
        .fold(0.0, f64::max)
}

/// The product of a candle `QMatMul` on the same tensor and activations.
fn candle_product(qt: QTensor, x: &[f32], t: usize, cols: usize) -> Vec<f32> {
    let mm = QMatMul::from_qtensor(qt).unwrap();
    let xt = Tensor::from_vec(x.to_vec(), (t, cols), &Device::Cpu).unwrap();
    mm.forward(&xt)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

#[test]
fn synthetic_products_agree_closely_with_candle_qmatmul() {
    // Every other format within 2e-3 as well: both sides quantize the activations per
    // block (candle per 32 or 256 values, as ggml), with different rounding details.
    let others = block_formats::BLOCK_TYPES.map(|(_, g)| (g, 2e-3));
    for (dtype, tol) in [(GgmlDType::Q4_1, 2e-3), (GgmlDType::Q8_0, 1e-5)]
        .into_iter()
        .chain(others)
    {
        let (rows, cols, t) = (72, 512, 5);
        let qt = random_qtensor(dtype, rows, cols, 3);
        let w = QMatrix::from_qtensor(&qt).unwrap();
        let x = TestRng::new(5).activations(t * cols);
        let wf = candle_dequantized(&qt);
        let refs = reference(&wf, &x, t, rows, cols);
        let theirs = candle_product(qt, &x, t, cols);
        for path in paths() {
            let ours = run(path, &w, &x, t);
            let d = max_rel_diff(&ours, &theirs, &refs);
            assert!(d < tol, "{dtype:?} {path:?}: relative difference {d}");
        }
    }
}

fn candle_dequantized(qt: &QTensor) -> Vec<f32> {
    qt.dequantize(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

#[test]
fn real_model_tensors_agree_closely_with_candle_qmatmul() {
    let path = model_path();
    let mut file = std::fs::File::open(path).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    // Q4_1 layers of both input widths, and the Q8_0 embedding / output head. The
    // tolerance is relative to Σ|w·x|: candle forms the Q8_1 sum as fp16(Σq)·d16 where
    // ggml (and we) use fp16(Σq·d), a difference of a few f16 ulps in the min term.
    for (name, t, tol) in [
        ("blk.0.attn_q.weight", 9, 2e-3),
        ("blk.3.ffn_down.weight", 4, 2e-3),
        ("blk.29.attn_k.weight", 1, 2e-3),
        ("token_embd.weight", 3, 1e-5),
    ] {
        let qt = content.tensor(&mut file, name, &Device::Cpu).unwrap();
        let w = QMatrix::from_qtensor(&qt).unwrap();
        let (rows, cols) = (w.rows(), w.cols());
        let x = TestRng::new(17).activations(t * cols);
        let wf = candle_dequantized(&qt);
        let refs = reference(&wf, &x, t, rows, cols);
        // Dequantization and the block layout round-trip exactly.
        assert_eq!(w.to_ggml_bytes(), qt.data().unwrap().as_ref(), "{name}");
        for n in [0, rows / 2, rows - 1] {
            assert_eq!(
                w.row_f32(n).unwrap(),
                wf[n * cols..(n + 1) * cols],
                "{name}"
            );
        }
        let theirs = candle_product(qt, &x, t, cols);
        for path in paths() {
            let ours = run(path, &w, &x, t);
            let d = max_rel_diff(&ours, &theirs, &refs);
            let exact: Vec<f32> = refs.iter().map(|r| r.0 as f32).collect();
            eprintln!(
                "{name} {path:?}: max difference {d:.2e} of Σ|wx|; error vs the exact \
                 product: ours {:.2e}, candle {:.2e}",
                max_rel_diff(&ours, &exact, &refs),
                max_rel_diff(&theirs, &exact, &refs)
            );
            assert!(d < tol, "{name} {path:?}: relative difference {d}");
        }
    }
}

#[test]
fn fused_rows_compute_the_same_bits_as_their_parts() {
    let q = random_matrix(QDtype::Q4_1, 64, 256, 1);
    let k = random_matrix(QDtype::Q4_1, 21, 256, 2);
    let v = random_matrix(QDtype::Q4_1, 40, 256, 3);
    let qkv = QMatrix::concat_rows(&[&q, &k, &v]).unwrap();
    assert_eq!((qkv.rows(), qkv.cols()), (125, 256));
    let t = 6;
    let x = TestRng::new(9).activations(t * 256);
    for path in paths() {
        let fused = run(path, &qkv, &x, t);
        let parts = [
            run(path, &q, &x, t),
            run(path, &k, &x, t),
            run(path, &v, &x, t),
        ];
        for i in 0..t {
            let mut expect = Vec::new();
            for (p, m) in parts.iter().zip([&q, &k, &v]) {
                expect.extend_from_slice(&p[i * m.rows()..(i + 1) * m.rows()]);
            }
            let got = &fused[i * 125..(i + 1) * 125];
            assert!(bits_eq(got, &expect), "{path:?} row {i}");
        }
    }
    assert!(QMatrix::concat_rows(&[&q, &random_matrix(QDtype::Q8_0, 8, 256, 4)]).is_err());
    assert!(QMatrix::concat_rows(&[&q, &random_matrix(QDtype::Q4_1, 8, 128, 4)]).is_err());
    assert!(QMatrix::concat_rows(&[]).is_err());
}

fn bits_eq(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// For every format, path and pool size: each row of a batch equals, bit for bit, the
/// row computed alone, and all pool sizes give the same bits. The shapes cross the
/// sequential / group-split / activation-split thresholds and end in partial tiles.
#[test]
fn every_row_is_bitwise_independent_of_its_batch_threads_and_split() {
    let shapes = [(203usize, 256usize), (2601, 512)];
    for dtype in [QDtype::Q4_1, QDtype::Q8_0, QDtype::F32] {
        for &(rows, cols) in &shapes {
            let w = random_matrix(dtype, rows, cols, rows as u64);
            for path in paths() {
                for t in [1usize, 3, 16, 37, 300] {
                    let x = TestRng::new(t as u64 * 31 + rows as u64).activations(t * cols);
                    let mut by_pool = Vec::new();
                    for threads in [1, 2] {
                        let pool = pool(threads);
                        let batch = pool.install(|| run(path, &w, &x, t));
                        for i in 0..t {
                            let alone =
                                pool.install(|| run(path, &w, &x[i * cols..(i + 1) * cols], 1));
                            assert!(
                                bits_eq(&batch[i * rows..(i + 1) * rows], &alone),
                                "{dtype:?} {rows}x{cols} {path:?} t={t} threads={threads} row {i}"
                            );
                        }
                        by_pool.push(batch);
                    }
                    assert!(
                        bits_eq(&by_pool[0], &by_pool[1]),
                        "{dtype:?} {rows}x{cols} {path:?} t={t}: pools of 1 and 2 threads differ"
                    );
                }
            }
        }
    }
}

/// A matrix too large to be re-read per task (like the output head) is split by weight
/// rows in rounds of activation rows; a round of one row writes the output directly.
#[test]
fn rows_of_a_large_head_matrix_are_bitwise_independent_of_their_batch() {
    let (rows, cols) = (16_003, 256);
    let w = random_matrix(QDtype::Q8_0, rows, cols, 77);
    assert!(w.byte_size() > 4 << 20);
    for path in paths() {
        for t in [1usize, 3, 65, 130] {
            let x = TestRng::new(t as u64).activations(t * cols);
            let mut by_pool = Vec::new();
            for threads in [1, 2] {
                let pool = pool(threads);
                let batch = pool.install(|| run(path, &w, &x, t));
                for i in (0..t).step_by(7).chain([t - 1]) {
                    let alone = pool.install(|| run(path, &w, &x[i * cols..(i + 1) * cols], 1));
                    assert!(
                        bits_eq(&batch[i * rows..(i + 1) * rows], &alone),
                        "{path:?} t={t} threads={threads} row {i}"
                    );
                }
                by_pool.push(batch);
            }
            assert!(bits_eq(&by_pool[0], &by_pool[1]), "{path:?} t={t}");
        }
    }
}

#[test]
#[cfg(target_arch = "x86_64")]
fn avx2_and_scalar_paths_agree_to_float_rounding() {
    assert!(
        KernelPath::Avx2.is_available(),
        "this x86-64 CPU reports no AVX2, FMA or F16C, so the AVX2 kernels cannot be \
         tested here: run the tests on a CPU with them (x86-64 servers since 2013)"
    );
    for dtype in [QDtype::Q4_1, QDtype::Q8_0, QDtype::F32] {
        let (rows, cols, t) = (77, 576, 9);
        let w = random_matrix(dtype, rows, cols, 5);
        let wf = match w.dequantize().data() {
            stoker_executor::kernels::QData::F32(v) => v.to_vec(),
            _ => unreachable!(),
        };
        let x = TestRng::new(6).activations(t * cols);
        let refs = reference(&wf, &x, t, rows, cols);
        let a = run(KernelPath::Scalar, &w, &x, t);
        let b = run(KernelPath::Avx2, &w, &x, t);
        // Both paths compute the same quantized integer sums; only the order and fusion of
        // the f32 accumulation differ: a few ulps of Σ|w·x|.
        let d = max_rel_diff(&a, &b, &refs);
        assert!(d < 1e-5, "{dtype:?}: relative difference {d}");
    }
}

#[test]
fn nan_and_infinite_activations_propagate_to_their_row_only() {
    for dtype in [QDtype::Q4_1, QDtype::Q8_0, QDtype::F32] {
        let (rows, cols, t) = (20, 64, 4);
        let w = random_matrix(dtype, rows, cols, 8);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut x = TestRng::new(1).activations(t * cols);
            x[cols + 5] = bad;
            for path in paths() {
                let out = run(path, &w, &x, t);
                for n in 0..rows {
                    let v = out[rows + n];
                    if bad.is_nan() || dtype != QDtype::F32 {
                        assert!(v.is_nan(), "{dtype:?} {path:?} {bad}: {v}");
                    } else {
                        assert!(!v.is_finite(), "{dtype:?} {path:?} {bad}: {v}");
                    }
                }
                for i in [0, 2, 3] {
                    let alone = run(path, &w, &x[i * cols..(i + 1) * cols], 1);
                    assert!(bits_eq(&out[i * rows..(i + 1) * rows], &alone));
                    assert!(alone.iter().all(|v| v.is_finite()));
                }
            }
        }
    }
}

#[test]
fn hostile_shapes_and_lengths_are_typed_errors() {
    let bytes = vec![0u8; 2 * 20 * 2];
    assert!(QMatrix::from_ggml_bytes(QDtype::Q4_1, &bytes, 2, 64).is_ok());
    assert!(matches!(
        QMatrix::from_ggml_bytes(QDtype::Q4_1, &bytes[1..], 2, 64),
        Err(KernelError::ByteLength {
            expected: 80,
            actual: 79,
            ..
        })
    ));
    assert!(matches!(
        QMatrix::from_ggml_bytes(QDtype::Q8_0, &bytes, 2, 64),
        Err(KernelError::ByteLength { .. })
    ));
    assert!(matches!(
        QMatrix::from_ggml_bytes(QDtype::Q4_1, &bytes, 2, 48),
        Err(KernelError::ColsNotMultipleOf32 { cols: 48, .. })
    ));
    for (rows, cols) in [(0, 64), (2, 0), (0, 0)] {
        assert!(matches!(
            QMatrix::from_ggml_bytes(QDtype::Q4_1, &[], rows, cols),
            Err(KernelError::EmptyMatrix { .. })
        ));
        assert!(matches!(
            QMatrix::from_f32(rows, cols, vec![]),
            Err(KernelError::EmptyMatrix { .. })
        ));
    }
    assert!(matches!(
        QMatrix::from_ggml_bytes(QDtype::Q8_0, &bytes, usize::MAX, 64),
        Err(KernelError::SizeOverflow { .. })
    ));
    assert!(matches!(
        QMatrix::from_f32(3, 4, vec![0.0; 11]),
        Err(KernelError::ValueCount { .. })
    ));

    let w = random_matrix(QDtype::Q4_1, 10, 64, 1);
    let mut out = vec![0f32; 30];
    assert!(matches!(
        matmul(&w, &[0.0; 191], 3, &mut out),
        Err(KernelError::InputLength {
            expected: 192,
            actual: 191
        })
    ));
    assert!(matches!(
        matmul(&w, &[0.0; 192], 3, &mut out[..29]),
        Err(KernelError::OutputLength {
            expected: 30,
            actual: 29
        })
    ));
    assert!(matches!(
        matmul(&w, &[0.0; 64], usize::MAX, &mut out),
        Err(KernelError::SizeOverflow { .. })
    ));
    // An empty batch is valid and writes nothing.
    assert!(matmul(&w, &[], 0, &mut []).is_ok());
    assert!(matmul(&w, &[0.0; 192], 3, &mut out).is_ok());
    assert!(out.iter().all(|v| v.is_finite()));

    assert!(matches!(
        w.row_f32(10),
        Err(KernelError::RowOutOfRange { row: 10, rows: 10 })
    ));
    assert!(w.row_f32(9).is_ok());
    assert!(matches!(
        w.row_f32_into(0, &mut [0.0; 63]),
        Err(KernelError::OutputLength { .. })
    ));

    let vector = QTensor::quantize(
        &Tensor::zeros(64, candle_core::DType::F32, &Device::Cpu).unwrap(),
        GgmlDType::F32,
    )
    .unwrap();
    assert!(matches!(
        QMatrix::from_qtensor(&vector),
        Err(KernelError::NotAMatrix(_))
    ));
    // Q8_K is an activation format, never a weight: refused by name, listing the rest.
    let q8k = random_qtensor(GgmlDType::Q8K, 2, 256, 1);
    match QMatrix::from_qtensor(&q8k) {
        Err(KernelError::UnsupportedDtype(msg)) => {
            assert!(msg.contains("Q8K") && msg.contains("Q4_K"), "{msg}")
        }
        other => panic!("expected UnsupportedDtype, got {other:?}"),
    }
}

#[test]
fn garbage_weight_bytes_never_panic() {
    // Arbitrary bytes are valid blocks (NaN/inf scales included): products may be
    // non-finite but must not panic or read out of bounds.
    let mut rng = TestRng::new(99);
    for dtype in [
        QDtype::Q4_1,
        QDtype::Q8_0,
        QDtype::F32,
        QDtype::F16,
        QDtype::BF16,
    ] {
        let (rows, cols) = (13, 96);
        let per = match dtype {
            QDtype::Q4_1 => 20 * 3,
            QDtype::Q8_0 => 34 * 3,
            QDtype::F32 => 4 * 96,
            QDtype::F16 | QDtype::BF16 => 2 * 96,
            QDtype::Blocks(_) => unreachable!("see block_formats"),
        };
        let bytes: Vec<u8> = (0..rows * per)
            .map(|_| (rng.uniform() * 128.0 + 128.0) as u8)
            .collect();
        let w = QMatrix::from_ggml_bytes(dtype, &bytes, rows, cols).unwrap();
        let x = rng.activations(2 * cols);
        for path in paths() {
            let out = run(path, &w, &x, 2);
            assert_eq!(out.len(), 2 * rows);
        }
        let _ = w.dequantize();
        assert_eq!(w.to_ggml_bytes(), bytes, "{dtype:?} keeps the file's bytes");
    }
}

#[test]
fn half_weights_give_the_bits_of_their_f32_widening() {
    // F16 and BF16 weights stay 2 bytes and are widened as the kernel loads them;
    // widening is exact, so every output must equal the product with the weights
    // widened to f32 up front, on every path and batch size (tails included).
    let mut rng = TestRng::new(7);
    for dtype in [QDtype::F16, QDtype::BF16] {
        let (rows, cols) = (19, 100);
        let values: Vec<f32> = (0..rows * cols).map(|_| rng.uniform() * 3.0).collect();
        let bytes = stoker_executor::quantize::quantize_row(dtype, &values).unwrap();
        let half = QMatrix::from_ggml_bytes(dtype, &bytes, rows, cols).unwrap();
        assert_eq!(half.dtype(), dtype);
        assert_eq!(half.byte_size(), 2 * rows * cols);
        let wide = half.dequantize();
        assert_eq!(wide.dtype(), QDtype::F32);
        for t in [1, 3, 17] {
            let x = rng.activations(t * cols);
            for path in paths() {
                let a = run(path, &half, &x, t);
                let b = run(path, &wide, &x, t);
                assert!(
                    a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{dtype:?} t={t} {path:?}"
                );
            }
        }
    }
}

#[test]
fn the_scalar_path_can_be_forced_by_environment() {
    if std::env::var("STOKER_KERNELS").as_deref() == Ok("scalar") {
        assert_eq!(stoker_executor::kernels::kernel_path(), KernelPath::Scalar);
        return;
    }
    // The variable is read once per process: check it in a child running only this test.
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "the_scalar_path_can_be_forced_by_environment"])
        .env("STOKER_KERNELS", "scalar")
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn the_plain_avx2_path_can_be_forced_by_environment() {
    if std::env::var("STOKER_KERNELS").as_deref() == Ok("avx2") {
        let expected = if KernelPath::Avx2.is_available() {
            KernelPath::Avx2
        } else {
            KernelPath::Scalar
        };
        assert_eq!(stoker_executor::kernels::kernel_path(), expected);
        return;
    }
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_plain_avx2_path_can_be_forced_by_environment",
        ])
        .env("STOKER_KERNELS", "avx2")
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn unavailable_paths_are_refused() {
    let w = random_matrix(QDtype::Q8_0, 8, 32, 1);
    let mut out = vec![0f32; 8];
    let res = matmul_on_path(
        KernelPath::Avx2,
        &w,
        &[0.5; 32],
        1,
        &mut out,
        &mut MatmulScratch::new(),
    );
    if KernelPath::Avx2.is_available() {
        assert!(res.is_ok());
    } else {
        assert_eq!(res, Err(KernelError::PathUnavailable(KernelPath::Avx2)));
    }
}
