//! The block formats beyond Q4_1 and Q8_0 (Q4_0, Q5_0, Q5_1, Q2_K … Q6_K, BF16):
//! decoding against the `gguf` Python package's numpy dequantizers (a committed fixture,
//! `scripts/make_block_fixtures.py`), products against an f64 reference of the
//! dequantized weights, the AVX2 and scalar paths bit for bit, and batch invariance.

use candle_core::quantized::GgmlDType;
use serde_json::Value;
use stoker_executor::kernels::{BlockType, QData, QDtype, QMatrix};

use super::{Activations, TestRng, bits_eq, paths, pool, random_qtensor, reference, run};

/// Every format added beside Q4_1, Q8_0 and the float types, with candle's quantizer.
pub const BLOCK_TYPES: [(BlockType, GgmlDType); 8] = [
    (BlockType::Q4_0, GgmlDType::Q4_0),
    (BlockType::Q5_0, GgmlDType::Q5_0),
    (BlockType::Q5_1, GgmlDType::Q5_1),
    (BlockType::Q2K, GgmlDType::Q2K),
    (BlockType::Q3K, GgmlDType::Q3K),
    (BlockType::Q4K, GgmlDType::Q4K),
    (BlockType::Q5K, GgmlDType::Q5K),
    (BlockType::Q6K, GgmlDType::Q6K),
];

fn dtype_named(name: &str) -> QDtype {
    match name {
        "Q4_1" => QDtype::Q4_1,
        "Q8_0" => QDtype::Q8_0,
        "BF16" => QDtype::BF16,
        other => QDtype::Blocks(
            BLOCK_TYPES
                .iter()
                .map(|(b, _)| *b)
                .find(|b| b.name() == other)
                .unwrap_or_else(|| panic!("fixture names an unknown format {other}")),
        ),
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn dense(w: &QMatrix) -> Vec<f32> {
    match w.dequantize().data() {
        QData::F32(v) => v.to_vec(),
        _ => unreachable!("dequantize gives f32"),
    }
}

#[test]
fn every_format_decodes_as_the_gguf_reference_does() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/ggml_blocks.json"
    );
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let formats = fixture["formats"].as_object().unwrap();
    assert_eq!(
        formats.len(),
        11,
        "the fixture covers every readable format"
    );
    for (name, f) in formats {
        let dtype = dtype_named(name);
        let bytes = hex(f["bytes"].as_str().unwrap());
        let want: Vec<f32> = f["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        let (rows, cols) = (want.len() / 256, 256);
        let w = QMatrix::from_ggml_bytes(dtype, &bytes, rows, cols)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(w.to_ggml_bytes().len(), bytes.len(), "{name}");
        let got = dense(&w);
        let scale = want.iter().fold(0f32, |a, v| a.max(v.abs()));
        for (j, (g, e)) in got.iter().zip(&want).enumerate() {
            // gguf-py computes in f32 with ggml's operation order; Q3_K and Q6_K are
            // formed here as d·sc·q − d·off·sc instead of d·sc·(q − off): a few ulps.
            assert!(
                (g - e).abs() <= 4.0 * f32::EPSILON * scale,
                "{name} value {j}: got {g}, gguf gives {e}"
            );
        }
        for r in 0..rows {
            assert_eq!(w.row_f32(r).unwrap(), got[r * cols..(r + 1) * cols]);
        }
    }
}

/// Products against the exact product of the dequantized weights with the unquantized
/// activations. Per activation block of B values (32, or 256 for the K-quants) with
/// scale `d = amax/127`, each activation is off by at most `d/2` (plus the f16 rounding
/// of `d` for 32-value blocks, `127·2⁻¹¹·d`); the integer sums are exact and only a few
/// f32 operations per block follow, bounded by a relative `2⁻²⁰` of `Σ|w|·(|x| + d)`.
#[test]
fn products_stay_within_the_activation_quantization_bound() {
    let (rows, cols, t) = (37, 512, 5);
    for (bt, gt) in BLOCK_TYPES {
        let w = QMatrix::from_qtensor(&random_qtensor(gt, rows, cols, 3)).unwrap();
        assert_eq!(w.dtype(), QDtype::Blocks(bt));
        let wf = dense(&w);
        let x = TestRng::new(9).activations(t * cols);
        let refs = reference(&wf, &x, t, rows, cols);
        let bv = bt.block_values();
        for path in paths() {
            let out = run(path, &w, &x, t);
            for i in 0..t {
                let xr = &x[i * cols..(i + 1) * cols];
                for n in 0..rows {
                    let mut bound = 1e-6;
                    for (b, xs) in xr.chunks_exact(bv).enumerate() {
                        let d = xs.iter().fold(0f32, |a, v| a.max(v.abs())) as f64 / 127.0;
                        let ws = &wf[n * cols + bv * b..n * cols + bv * (b + 1)];
                        let wabs: f64 = ws.iter().map(|w| w.abs() as f64).sum();
                        let wx: f64 = ws
                            .iter()
                            .zip(xs)
                            .map(|(w, x)| (*w as f64 * *x as f64).abs())
                            .sum();
                        let f16 = if bv == 32 { 0.063 } else { 0.0 };
                        bound += (0.5 + f16) * d * wabs + 2f64.powi(-20) * (wx + d * wabs);
                        if bt == BlockType::Q5_1 {
                            // The min term uses the Q8_1 sum `fp16(d·Σq)`.
                            bound += 2f64.powi(-10)
                                * 0.5
                                * (xs.iter().map(|v| v.abs() as f64).sum::<f64>() + 16.0 * d);
                        }
                    }
                    let (exact, _) = refs[i * rows + n];
                    let got = out[i * rows + n] as f64;
                    assert!(
                        (got - exact).abs() <= bound,
                        "{bt:?} {path:?} [{i},{n}]: got {got}, exact {exact}, bound {bound}"
                    );
                }
            }
        }
    }
}

/// Every row of a batch is the row computed alone, on one thread or two. Where the
/// block kernel runs (Q5_1, the K-quants) the integer sums are exact on both paths and
/// the float steps the same, so the AVX2 path gives the scalar path's bits; Q4_0 and
/// Q5_0 take the Q8_0 kernel's float steps (fused on AVX2, not on the scalar path), so
/// there the scalar path differs in f32 rounding only, and the VNNI path gives AVX2's bits.
#[test]
fn paths_agree_bitwise_and_rows_are_independent_of_their_batch() {
    let (rows, cols) = (203, 512);
    for (bt, gt) in BLOCK_TYPES {
        let w = QMatrix::from_qtensor(&random_qtensor(gt, rows, cols, 11)).unwrap();
        for t in [1usize, 3, 37] {
            let x = TestRng::new(t as u64).activations(t * cols);
            let mut all = Vec::new();
            for path in paths() {
                for threads in [1, 2] {
                    let pool = pool(threads);
                    let batch = pool.install(|| run(path, &w, &x, t));
                    for i in [0, t / 2, t - 1] {
                        let alone = pool.install(|| run(path, &w, &x[i * cols..(i + 1) * cols], 1));
                        assert!(
                            bits_eq(&batch[i * rows..(i + 1) * rows], &alone),
                            "{bt:?} {path:?} t={t} threads={threads} row {i}"
                        );
                    }
                    all.push(batch);
                }
            }
            let per_path = all.len() / paths().len();
            for (p, path_runs) in all.chunks(per_path).enumerate() {
                for other in &path_runs[1..] {
                    assert!(
                        bits_eq(&path_runs[0], other),
                        "{bt:?} t={t} path {p}: pools differ"
                    );
                }
            }
            // The SIMD paths (AVX2, AVX-512 VNNI) agree bit for bit on every format.
            let firsts: Vec<&Vec<f32>> = all.chunks(per_path).map(|c| &c[0]).collect();
            for (p, other) in firsts.iter().enumerate().skip(2) {
                assert!(
                    bits_eq(firsts[1], other),
                    "{bt:?} t={t}: SIMD path {p} differs"
                );
            }
            let on_q8_0 = matches!(bt, BlockType::Q4_0 | BlockType::Q5_0);
            let last = &all[all.len() - 1];
            if on_q8_0 {
                let scale = all[0].iter().fold(0f32, |m, v| m.max(v.abs()));
                for (a, b) in all[0].iter().zip(last) {
                    assert!((a - b).abs() <= 1e-5 * scale, "{bt:?} t={t}: {a} vs {b}");
                }
            } else {
                assert!(bits_eq(&all[0], last), "{bt:?} t={t}: paths differ");
            }
        }
    }
}

/// The same values as Q8_0 blocks: `d` and `q − offset` (Q4_0: 8, Q5_0: 16).
fn legacy_as_q8_0(bt: BlockType, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in bytes.chunks_exact(bt.block_bytes()) {
        let (qh, qs, offset) = match bt {
            BlockType::Q4_0 => (0u32, &b[2..18], 8i32),
            _ => (u32::from_le_bytes([b[2], b[3], b[4], b[5]]), &b[6..22], 16),
        };
        let q = |k: usize| {
            let nibble = if k < 16 {
                qs[k] & 0x0f
            } else {
                qs[k - 16] >> 4
            };
            i32::from(nibble) | (((qh >> k) & 1) as i32) << 4
        };
        out.extend_from_slice(&b[..2]);
        out.extend((0..32).map(|k| (q(k) - offset) as i8 as u8));
    }
    out
}

/// Q4_0 and Q5_0 are held in their own tiles (18 and 22 bytes per 32 weights) and give,
/// on each path and at every batch size, the bits of the same values held as Q8_0.
#[test]
fn q4_0_and_q5_0_give_the_bits_of_their_values_as_q8_0() {
    let (rows, cols) = (203, 512);
    for (bt, gt) in &BLOCK_TYPES[..2] {
        let w = QMatrix::from_qtensor(&random_qtensor(*gt, rows, cols, 5)).unwrap();
        assert_eq!(
            w.byte_size(),
            rows.div_ceil(8) * 8 * cols / 32 * bt.block_bytes()
        );
        let q8 = legacy_as_q8_0(*bt, &w.to_ggml_bytes());
        let w8 = QMatrix::from_ggml_bytes(QDtype::Q8_0, &q8, rows, cols).unwrap();
        for t in [1usize, 4, 7, 70] {
            let x = TestRng::new(40 + t as u64).activations(t * cols);
            for path in paths() {
                assert!(
                    bits_eq(&run(path, &w, &x, t), &run(path, &w8, &x, t)),
                    "{bt:?} {path:?} t={t}"
                );
            }
        }
    }
}

#[test]
fn non_finite_activations_propagate_to_their_row_only() {
    let (rows, cols, t) = (9, 256, 3);
    for (bt, gt) in BLOCK_TYPES {
        let w = QMatrix::from_qtensor(&random_qtensor(gt, rows, cols, 2)).unwrap();
        let mut x = TestRng::new(4).activations(t * cols);
        x[cols + 7] = f32::INFINITY;
        for path in paths() {
            let out = run(path, &w, &x, t);
            assert!(
                out[rows..2 * rows].iter().all(|v| v.is_nan()),
                "{bt:?} {path:?}"
            );
            assert!(
                out[..rows]
                    .iter()
                    .chain(&out[2 * rows..])
                    .all(|v| v.is_finite())
            );
        }
    }
}

#[test]
fn garbage_blocks_and_bad_shapes_are_handled() {
    let mut rng = TestRng::new(5);
    for (bt, _) in BLOCK_TYPES {
        let cols = if bt.block_values() == 256 { 512 } else { 96 };
        let rows = 11;
        let bytes: Vec<u8> = (0..rows * cols / bt.block_values() * bt.block_bytes())
            .map(|_| (rng.uniform() * 128.0 + 128.0) as u8)
            .collect();
        let w = QMatrix::from_ggml_bytes(QDtype::Blocks(bt), &bytes, rows, cols).unwrap();
        assert_eq!(w.to_ggml_bytes(), bytes);
        let x = rng.activations(2 * cols);
        for path in paths() {
            assert_eq!(run(path, &w, &x, 2).len(), 2 * rows);
        }
        assert!(QMatrix::from_ggml_bytes(QDtype::Blocks(bt), &bytes[1..], rows, cols).is_err());
        if bt.block_values() == 256 {
            assert!(matches!(
                QMatrix::from_ggml_bytes(QDtype::Blocks(bt), &bytes, rows, 96),
                Err(
                    stoker_executor::kernels::KernelError::ColsNotMultipleOfBlock {
                        block: 256,
                        ..
                    }
                )
            ));
        }
    }
}
