//! Tests of the ggml quantizers (`stoker_executor::quantize`):
//!
//! * bit-exactness against llama.cpp's compiled quantizers (`ggml_quantize_chunk` of
//!   libggml-base, fixture made by `scripts/make_ggml_quantize_fixtures.py`) for every
//!   type stoker writes, on rows with NaN and ±inf too;
//! * bit-exactness against the `gguf` Python package's numpy quantizers (gguf-py 0.19.0,
//!   llama.cpp's independent reimplementation) for every type it can quantize: Q4_0,
//!   Q4_1, Q5_0, Q5_1, Q8_0, BF16 and F16 (fixture made by
//!   `scripts/make_quantize_fixtures.py`);
//! * round trips through the kernels' own decoders (`QMatrix::row_f32`) for every type,
//!   within an error bound stated per format;
//! * typed errors on bad lengths and unknown types, and no panic on NaN or ±inf, with
//!   the bytes ggml writes for them.
//!
//! Whole-model requantization against `llama-quantize`'s tensor hashes is in
//! `quantize_llama_cpp.rs`.

use std::collections::BTreeMap;

use stoker_executor::kernels::{QDtype, QMatrix};
use stoker_executor::quantize::{
    QuantizeError, SUPPORTED_TYPES, parse_type, quantize_row, quantized_len,
};
use stoker_test_support::TestRng;

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).expect("fixture hex")
}

fn dequantize(ty: QDtype, bytes: &[u8], n: usize) -> Vec<f32> {
    QMatrix::from_ggml_bytes(ty, bytes, 1, n)
        .unwrap()
        .row_f32(0)
        .unwrap()
}

/// Quantizes every case of a fixture (`{"cases": [{"type", "name", "input" (f32 hex),
/// "expected" (hex)}]}`) and requires identical bytes; returns the cases per type.
fn check_vectors(file: &str) -> BTreeMap<String, usize> {
    let path = format!("{}/tests/fixtures/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut checked: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for case in json["cases"].as_array().unwrap() {
        let (ty_name, name) = (
            case["type"].as_str().unwrap(),
            case["name"].as_str().unwrap(),
        );
        let ty = parse_type(ty_name).unwrap();
        let x: Vec<f32> = unhex(case["input"].as_str().unwrap())
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let expected = unhex(case["expected"].as_str().unwrap());
        let got = quantize_row(ty, &x).unwrap();
        if got != expected {
            let bb = quantized_len(ty, ty.block_values()).unwrap();
            let first = got
                .iter()
                .zip(&expected)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            let blk = first / bb * bb..(first / bb + 1) * bb;
            failures.push(format!(
                "{ty_name} {name}: first difference at byte {first} (block {}):\n  ours {}\n  ref  {}",
                first / bb,
                hex::encode(&got[blk.clone()]),
                hex::encode(&expected[blk]),
            ));
        }
        *checked.entry(ty_name.to_string()).or_default() += 1;
    }
    assert!(failures.is_empty(), "{file}:\n{}", failures.join("\n"));
    checked
}

#[test]
fn matches_gguf_py_quantizers_bit_for_bit() {
    let checked = check_vectors("quantize_vectors.json");
    for ty in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16", "F16"] {
        assert!(
            checked.get(ty).copied().unwrap_or(0) >= 15,
            "{ty}: {checked:?}"
        );
    }
}

#[test]
fn matches_llama_cpps_compiled_quantizers_bit_for_bit() {
    // Made by scripts/make_ggml_quantize_fixtures.py from libggml-base's
    // ggml_quantize_chunk (no imatrix): the K-quants' ground truth, NaN and inf included.
    let checked = check_vectors("quantize_ggml_vectors.json");
    for &ty in SUPPORTED_TYPES.iter().filter(|&&t| t != "F32") {
        assert!(
            checked.get(ty).copied().unwrap_or(0) >= 20,
            "{ty}: {checked:?}"
        );
    }
}

/// Test rows of `n` values: normal values at several scales, outliers, per-block scale
/// changes, zeros, tiny values, all-equal values.
fn test_rows(n: usize) -> Vec<(&'static str, Vec<f32>)> {
    let mut rng = TestRng::new(7);
    let mut rows = vec![];
    for (name, scale) in [("normal", 1.0f32), ("small", 0.01), ("large", 500.0)] {
        rows.push((name, (0..n).map(|_| rng.normal() * scale).collect()));
    }
    let mut x: Vec<f32> = (0..n).map(|_| rng.normal() * 0.05).collect();
    for i in (0..n).step_by(37) {
        x[i] = rng.normal() * 6.0;
    }
    rows.push(("outliers", x));
    rows.push((
        "block_scales",
        (0..n)
            .map(|i| rng.normal() * [1e-3f32, 1.0, 30.0, 0.2, 5.0][(i / 48) % 5])
            .collect(),
    ));
    rows.push((
        "positive",
        (0..n).map(|_| rng.normal().abs() + 0.5).collect(),
    ));
    rows.push((
        "negative",
        (0..n).map(|_| -rng.normal().abs() - 0.5).collect(),
    ));
    rows.push(("zeros", vec![0.0; n]));
    rows.push(("tiny", (0..n).map(|_| rng.normal() * 1e-9).collect()));
    rows.push(("all_equal", vec![0.37; n]));
    rows.push(("all_equal_neg", vec![-3.0; n]));
    rows
}

/// The error bound of one value of `ty`, given the values of its block (or, for the
/// K-quants, super-block) `b`. With `amax` the block's largest magnitude,
/// `range = max − min` (min and max including 0 for the K-quants, which fit
/// `x ≈ d·q − m` with `m ≥ 0`) and `h(s)` the f16 rounding error of a scale `s`
/// (`max(|s|·2⁻¹¹, 2⁻²⁵)`: relative half-ulp, or half the subnormal step below f16's
/// normal range):
///
/// * Q8_0: half a step of `d = amax/127`, plus the error of the stored `d` times
///   |q| ≤ 127: `amax/254 + 127·h(d)`.
/// * Q4_0 / Q5_0: `d = amax/8` (`/16`); the extreme's own side is exact, the other
///   side's extreme is clipped one full level (`+8d` has no code): `d + 8·h(d)`
///   (`+16·h(d)`).
/// * Q4_1 / Q5_1: half a step of `d = range/15` (`/31`), plus the stored `d` times
///   q ≤ 15 (31) and the stored minimum: `d/2 + 15·h(d) + h(min)`.
/// * K-quants: one full step of the super-block's largest scale. Rounding costs half a
///   step; the sub-block scales are integers (4 bits for Q2_K, 6 for Q3_K/Q4_K/Q5_K, 8
///   for Q6_K) times one f16 super-scale, and the fit may clip the extremes of a
///   sub-block to improve the rest, which together cost at most another half step in
///   these rows. Steps: Q2_K `range/3`, Q3_K `amax/4`, Q4_K `range/15`, Q5_K
///   `range/31`, Q6_K `amax/32`. (Measured on these rows: at most 0.6–0.75 of the
///   bound.) Plus the f16 floor of
///   the super-scales, `2⁻²⁵·(largest sub-scale·largest quant + largest minimum)`,
///   which matters only for blocks whose scales underflow f16 (values below ~1e-6).
/// * F16 / BF16: relative half-ulp: `|x|·2⁻¹¹` (or the subnormal `2⁻²⁵`) / `|x|·2⁻⁸`.
fn bound(ty: &str, x: f32, b: &[f32]) -> f32 {
    let amax = b.iter().fold(0f32, |a, v| a.max(v.abs()));
    let max = b.iter().fold(f32::MIN, |a, &v| a.max(v));
    let min = b.iter().fold(f32::MAX, |a, &v| a.min(v));
    let tiny = 2f32.powi(-25);
    let h = |s: f32| (s.abs() / 2048.0).max(tiny);
    let eps = amax * 1e-6;
    let k_range = max.max(0.0) - min.min(0.0);
    eps + match ty {
        "Q8_0" => amax / 254.0 + 127.0 * h(amax / 127.0),
        "Q4_0" => amax / 8.0 + 8.0 * h(amax / 8.0),
        "Q5_0" => amax / 16.0 + 16.0 * h(amax / 16.0),
        "Q4_1" => (max - min) / 30.0 + 15.0 * h((max - min) / 15.0) + h(min),
        "Q5_1" => (max - min) / 62.0 + 31.0 * h((max - min) / 31.0) + h(min),
        "Q2_K" => k_range / 3.0 + tiny * (15.0 * 3.0 + 15.0),
        "Q3_K" => amax / 4.0 + tiny * 32.0 * 4.0,
        "Q4_K" => k_range / 15.0 + tiny * (63.0 * 15.0 + 63.0),
        "Q5_K" => k_range / 31.0 + tiny * (63.0 * 31.0 + 63.0),
        "Q6_K" => amax / 32.0 + tiny * 128.0 * 32.0,
        "F16" => h(x),
        "BF16" => x.abs() / 256.0,
        "F32" => 0.0,
        other => panic!("no bound for {other}"),
    }
}

#[test]
fn round_trip_through_the_kernel_decoders_stays_within_each_formats_bound() {
    let n = 1024;
    for &ty_name in SUPPORTED_TYPES {
        let ty = parse_type(ty_name).unwrap();
        let block = ty.block_values().max(32);
        // The K-quants' bound is per super-block; the legacy ones' per block of 32.
        let span = if block == 256 { 256 } else { 32 };
        for (row, x) in test_rows(n) {
            let bytes = quantize_row(ty, &x).unwrap();
            let y = dequantize(ty, &bytes, n);
            for (bi, (xb, yb)) in x.chunks(span).zip(y.chunks(span)).enumerate() {
                for (j, (&a, &b)) in xb.iter().zip(yb).enumerate() {
                    let err = (a - b).abs();
                    let lim = bound(ty_name, a, xb);
                    assert!(
                        err <= lim,
                        "{ty_name} {row}: value {} = {a} decoded as {b}, error {err} > bound {lim}",
                        bi * span + j
                    );
                }
            }
            if matches!(row, "zeros") {
                assert!(
                    y.iter().all(|&v| v == 0.0),
                    "{ty_name}: zeros decode to zeros"
                );
            }
            if matches!(row, "all_equal" | "all_equal_neg") && !ty_name.ends_with("_K") {
                // The legacy formats and floats reproduce a constant block within
                // f16 precision of its scale (bf16 precision for BF16).
                let tol = x[0].abs() / if ty_name == "BF16" { 256.0 } else { 1024.0 };
                assert!(
                    y.iter().all(|&v| (v - x[0]).abs() <= tol),
                    "{ty_name} {row}: {:?}",
                    &y[..4]
                );
            }
        }
    }
}

#[test]
fn rms_error_is_well_under_the_worst_case_for_normal_rows() {
    // Root-mean-square error relative to the row's RMS, for normally distributed
    // values: a sanity check that the searches find good scales, not only bounded ones.
    // Limits are about 1.5× the error of a uniform quantizer with as many levels over
    // ±3σ (step 6σ/levels, RMS step/√12), looser for Q2_K.
    let n = 4096;
    let mut rng = TestRng::new(99);
    let x: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
    let rms = (x.iter().map(|v| v * v).sum::<f32>() / n as f32).sqrt();
    for (ty_name, limit) in [
        ("Q8_0", 0.01),
        ("Q6_K", 0.03),
        ("Q5_K", 0.05),
        ("Q5_1", 0.05),
        ("Q5_0", 0.06),
        ("Q4_K", 0.10),
        ("Q4_1", 0.10),
        ("Q4_0", 0.12),
        ("Q3_K", 0.22),
        ("Q2_K", 0.45),
    ] {
        let ty = parse_type(ty_name).unwrap();
        let y = dequantize(ty, &quantize_row(ty, &x).unwrap(), n);
        let err = (x
            .iter()
            .zip(&y)
            .map(|(a, b)| (a - b) * (a - b))
            .sum::<f32>()
            / n as f32)
            .sqrt()
            / rms;
        assert!(err < limit, "{ty_name}: relative RMS error {err} ≥ {limit}");
    }
}

#[test]
fn bad_lengths_and_unknown_types_are_typed_errors() {
    for (ty_name, len) in [
        ("Q8_0", 33),
        ("Q4_0", 16),
        ("Q4_1", 31),
        ("Q5_1", 48),
        ("Q4_K", 255),
        ("Q6_K", 32),
        ("Q2_K", 512 + 32),
    ] {
        let ty = parse_type(ty_name).unwrap();
        let err = quantize_row(ty, &vec![1.0; len]).unwrap_err();
        assert_eq!(
            err,
            QuantizeError::Length {
                ty: ty.name(),
                len,
                block: ty.block_values()
            }
        );
        assert!(err.to_string().contains(ty_name), "{err}");
    }
    // Whole blocks of any count, and the empty row, are fine.
    assert_eq!(
        quantize_row(parse_type("Q8_0").unwrap(), &[]).unwrap(),
        Vec::<u8>::new()
    );
    assert_eq!(
        quantize_row(parse_type("F16").unwrap(), &[1.0; 3])
            .unwrap()
            .len(),
        6
    );
    for name in ["IQ4_NL", "Q8_1", "TQ1_0", "Q4_K_M", "q4_0", ""] {
        let err = parse_type(name).unwrap_err();
        assert_eq!(err, QuantizeError::UnsupportedType(name.to_string()));
        assert!(err.to_string().contains("Q6_K"), "{err}");
    }
}

#[test]
fn non_finite_input_gives_ggmls_bytes_and_never_panics() {
    let nan = f32::NAN;
    let inf = f32::INFINITY;
    // Every type, every mix: no panic, right length.
    for &ty_name in SUPPORTED_TYPES {
        let ty = parse_type(ty_name).unwrap();
        for special in [
            nan,
            -nan,
            inf,
            -inf,
            f32::MAX,
            f32::MIN_POSITIVE / 4.0,
            1e30,
        ] {
            for every in [1, 3, 256] {
                let mut x: Vec<f32> = (0..512)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                    .collect();
                for v in x.iter_mut().step_by(every) {
                    *v = special;
                }
                let q = quantize_row(ty, &x).unwrap();
                assert_eq!(q.len(), quantized_len(ty, x.len()).unwrap(), "{ty_name}");
                assert_eq!(q, quantize_row(ty, &x).unwrap(), "{ty_name}: deterministic");
            }
        }
    }

    // Q8_0: ggml's MAX(amax, |v|) (`a > b ? a : b`) takes the NaN, then replaces it
    // with the next value, forgetting the maximum before it: here amax is 0.5, so 1.0
    // quantizes to 254, which the int8 store wraps to −2. The NaN's own quant is the C
    // cast of NaN (0 on x86-64).
    let mut x = [0.5f32; 32];
    x[0] = 1.0;
    x[5] = nan;
    let q = quantize_row(QDtype::Q8_0, &x).unwrap();
    let d = half::f16::from_le_bytes([q[0], q[1]]).to_f32();
    assert_eq!(d, half::f16::from_f32(0.5 / 127.0).to_f32());
    assert_eq!(q[2] as i8, -2);
    assert_eq!(q[2 + 5], 0);
    assert_eq!(q[2 + 6], 127);
    // A NaN last in the block leaves amax NaN: d is f16 NaN (0x7e00), every quant 0.
    let mut x = [0.5f32; 32];
    x[31] = nan;
    let q = quantize_row(QDtype::Q8_0, &x).unwrap();
    assert_eq!(&q[..2], &[0x00, 0x7e]);
    assert!(q[2..].iter().all(|&b| b == 0));

    // Q4_0: +inf is the extreme, d = −inf (f16 0xfc00), inverse scale −0: finite values
    // land on code 8 (zero), inf·(−0) is NaN and casts to 0.
    let mut x = [0.25f32; 32];
    x[3] = inf;
    let q = quantize_row(parse_type("Q4_0").unwrap(), &x).unwrap();
    assert_eq!(&q[..2], &[0x00, 0xfc]);
    assert_eq!(q[2 + 3], 0x80); // code 0 for value 3, code 8 for value 19
    assert_eq!(q[2], 0x88);

    // F16 and BF16 quiet every NaN the way ggml does.
    let q = quantize_row(QDtype::F16, &[f32::from_bits(0xff80_0001), inf]).unwrap();
    assert_eq!(q, [0x00, 0xfe, 0x00, 0x7c]);
    let q = quantize_row(QDtype::BF16, &[f32::from_bits(0x7f80_0001), -inf]).unwrap();
    assert_eq!(q, [0xc0, 0x7f, 0x80, 0xff]);
}

#[test]
fn rows_quantize_blockwise() {
    // ggml quantizes a tensor as one long row: blocks are independent, so splitting a
    // row at block boundaries changes nothing.
    let mut rng = TestRng::new(3);
    let x: Vec<f32> = (0..1024).map(|_| rng.normal()).collect();
    for &ty_name in SUPPORTED_TYPES {
        let ty = parse_type(ty_name).unwrap();
        let whole = quantize_row(ty, &x).unwrap();
        let b = 256;
        let parts: Vec<u8> = x
            .chunks(b)
            .flat_map(|c| quantize_row(ty, c).unwrap())
            .collect();
        assert_eq!(whole, parts, "{ty_name}");
    }
}
