//! Microbenchmark of the quantized matmul kernels against candle's `QMatMul` on the
//! SmolLM2-135M weights, side by side in one process.
//!
//! Prints (1) this machine's memory bandwidth (read-sum and memcpy over buffers far larger
//! than L3), (2) per shape and batch size the median time, GFLOP/s and effective weight
//! GB/s of ours and candle's product on the same weights and inputs, with the ratio, and
//! (3) a sweep over all 30 layers' four products plus the output head per step, the
//! matmul-only ceiling on tokens/s, against the decode floor (weight bytes / bandwidth).
//!
//! Run with `cargo bench -p stoker-executor --bench kernels`. Needs the model at
//! `$STOKER_MODEL` or `models/SmolLM2-135M-Instruct.Q4_1.gguf`; `STOKER_BENCH_QUICK=1`
//! shortens it. Timings are medians of interleaved rounds; the machine is shared, so
//! compare ratios from one run rather than absolute numbers across runs. candle's CPU
//! pool waits at a barrier for all its threads, so under load from other processes it
//! can lose whole scheduler slices; `CANDLE_NUM_THREADS=1` shows its single-thread speed.

use std::borrow::Cow;
use std::hint::black_box;
use std::time::{Duration, Instant};

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor, gguf_file};
use candle_core::{Device, Module, Tensor};
use rayon::prelude::*;
use stoker_executor::kernels::{MatmulScratch, QMatrix, kernel_path, matmul_on_path};
use stoker_test_support::{TestRng, median, model_path};

type BoxError = Box<dyn std::error::Error>;

/// Memory bandwidth in GB/s: (read-sum on one thread, read-sum on the pool, memcpy
/// counting bytes read + written), best of a few passes.
fn memory_bandwidth() -> (f64, f64, f64) {
    const BYTES: usize = 512 << 20;
    let src: Vec<u64> = (0..BYTES / 8).map(|i| i as u64).collect();
    let mut dst = vec![0u64; BYTES / 8];
    let gbs = |bytes: usize, d: Duration| bytes as f64 / d.as_secs_f64() / 1e9;
    let (mut one, mut all, mut copy) = (0f64, 0f64, 0f64);
    for _ in 0..4 {
        let t0 = Instant::now();
        let s = src.iter().fold(0u64, |a, &b| a.wrapping_add(b));
        black_box(s);
        one = one.max(gbs(BYTES, t0.elapsed()));
        let t0 = Instant::now();
        let s: u64 = src
            .par_chunks(1 << 20)
            .map(|c| c.iter().fold(0u64, |a, &b| a.wrapping_add(b)))
            .reduce(|| 0, u64::wrapping_add);
        black_box(s);
        all = all.max(gbs(BYTES, t0.elapsed()));
        let t0 = Instant::now();
        dst.copy_from_slice(&src);
        black_box(&dst);
        copy = copy.max(gbs(2 * BYTES, t0.elapsed()));
    }
    (one, all, copy)
}

/// Ours and candle's view of one weight matrix.
struct Pair {
    ours: QMatrix,
    candle: QMatMul,
}

impl Pair {
    fn new(parts: &[&QTensor]) -> Result<Self, BoxError> {
        let ours_parts: Vec<QMatrix> = parts
            .iter()
            .map(|t| QMatrix::from_qtensor(t))
            .collect::<Result<_, _>>()?;
        let ours = QMatrix::concat_rows(&ours_parts.iter().collect::<Vec<_>>())?;
        let dtype = parts[0].dtype();
        let storage = QStorage::from_data(Cow::Owned(ours.to_ggml_bytes()), &Device::Cpu, dtype)?;
        let qt = QTensor::new(storage, (ours.rows(), ours.cols()))?;
        Ok(Pair {
            ours,
            candle: QMatMul::from_qtensor(qt)?,
        })
    }
}

/// Per-call state for one implementation on one input.
struct Inputs {
    x: Vec<f32>,
    xt: Tensor,
    out: Vec<f32>,
    scratch: MatmulScratch,
}

impl Inputs {
    fn new(t: usize, cols: usize, rows: usize, seed: u64) -> Result<Self, BoxError> {
        let x = TestRng::new(seed).uniform_vec(t * cols);
        let xt = Tensor::from_vec(x.clone(), (t, cols), &Device::Cpu)?;
        Ok(Inputs {
            x,
            xt,
            out: vec![0f32; t * rows],
            scratch: MatmulScratch::new(),
        })
    }
}

fn ours(p: &Pair, inp: &mut Inputs, t: usize) {
    matmul_on_path(
        kernel_path(),
        &p.ours,
        &inp.x,
        t,
        &mut inp.out,
        &mut inp.scratch,
    )
    .expect("valid shapes");
}

fn candle(p: &Pair, inp: &Inputs) {
    black_box(p.candle.forward(&inp.xt).expect("valid shapes"));
}

/// Median seconds per call of `f_ours` and `f_candle`, timed in interleaved rounds.
fn time_pair(budget: Duration, mut f_ours: impl FnMut(), mut f_candle: impl FnMut()) -> (f64, f64) {
    f_ours();
    f_candle();
    let calib = |f: &mut dyn FnMut()| {
        let t0 = Instant::now();
        f();
        t0.elapsed().as_secs_f64().max(1e-7)
    };
    let (c_o, c_c) = (calib(&mut f_ours), calib(&mut f_candle));
    let slow = c_o.max(c_c) * 7.0 > budget.as_secs_f64() * 3.0;
    let rounds = if slow { 3 } else { 7 };
    let per_round = budget.as_secs_f64() / rounds as f64;
    let n_o = ((per_round / c_o) as usize).clamp(1, 10_000);
    let n_c = ((per_round / c_c) as usize).clamp(1, 10_000);
    let (mut v_o, mut v_c) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t0 = Instant::now();
        for _ in 0..n_o {
            f_ours();
        }
        v_o.push(t0.elapsed().as_secs_f64() / n_o as f64);
        let t0 = Instant::now();
        for _ in 0..n_c {
            f_candle();
        }
        v_c.push(t0.elapsed().as_secs_f64() / n_c as f64);
    }
    (median(v_o), median(v_c))
}

fn main() -> Result<(), BoxError> {
    let path = model_path();
    let quick = std::env::var_os("STOKER_BENCH_QUICK").is_some();
    let budget = Duration::from_millis(if quick { 150 } else { 600 });
    println!(
        "kernel path: {}, rayon threads: {}",
        kernel_path().name(),
        rayon::current_num_threads()
    );

    print_load();
    let (one, all, copy) = memory_bandwidth();
    println!(
        "memory bandwidth (512 MiB buffers, best of 4): read-sum 1 thread {one:.1} GB/s, \
         read-sum {} threads {all:.1} GB/s, memcpy (read+write) {copy:.1} GB/s",
        rayon::current_num_threads()
    );

    let mut file = std::fs::File::open(&path)?;
    let content = gguf_file::Content::read(&mut file)?;
    let mut tensor = |name: &str| content.tensor(&mut file, name, &Device::Cpu);
    let layers = 30;
    let mut stack = Vec::new();
    for l in 0..layers {
        let t = |s: &str| format!("blk.{l}.{s}.weight");
        let (q, k, v) = (
            tensor(&t("attn_q"))?,
            tensor(&t("attn_k"))?,
            tensor(&t("attn_v"))?,
        );
        let o = tensor(&t("attn_output"))?;
        let (g, u) = (tensor(&t("ffn_gate"))?, tensor(&t("ffn_up"))?);
        let d = tensor(&t("ffn_down"))?;
        stack.push([
            Pair::new(&[&q, &k, &v])?,
            Pair::new(&[&o])?,
            Pair::new(&[&g, &u])?,
            Pair::new(&[&d])?,
        ]);
    }
    let head = Pair::new(&[&tensor("token_embd.weight")?])?;
    let names = ["qkv", "attn_out", "gate_up", "down"];

    println!();
    println!("per matrix (layer 0; weights hot in cache for small t), median per call:");
    println!(
        "{:<9} {:>12} {:>4} | {:>10} {:>8} {:>8} | {:>10} {:>8} {:>8} | {:>7}",
        "matrix",
        "rows×cols",
        "t",
        "ours µs",
        "GFLOP/s",
        "w GB/s",
        "candle µs",
        "GFLOP/s",
        "w GB/s",
        "speedup"
    );
    let ts_small: &[usize] = &[1, 4, 16, 32, 64];
    let ts_prefill: &[usize] = if quick { &[256] } else { &[256, 512] };
    let mut cases: Vec<(&str, &Pair, usize)> = Vec::new();
    for (name, p) in names.iter().zip(&stack[0]) {
        for &t in ts_small.iter().chain(ts_prefill) {
            cases.push((name, p, t));
        }
    }
    for &t in ts_small {
        cases.push(("lm_head", &head, t));
    }
    for (name, p, t) in cases {
        let (rows, cols) = (p.ours.rows(), p.ours.cols());
        let mut inp = Inputs::new(t, cols, rows, 42 + t as u64)?;
        let cand = Inputs::new(t, cols, rows, 42 + t as u64)?;
        let b = if t >= 256 { budget * 2 } else { budget };
        let (so, sc) = time_pair(b, || ours(p, &mut inp, t), || candle(p, &cand));
        let flops = 2.0 * (t * rows * cols) as f64;
        let wb = p.ours.byte_size() as f64;
        println!(
            "{:<9} {:>12} {:>4} | {:>10.1} {:>8.1} {:>8.1} | {:>10.1} {:>8.1} {:>8.1} | {:>6.2}x",
            name,
            format!("{rows}×{cols}"),
            t,
            so * 1e6,
            flops / so / 1e9,
            wb / so / 1e9,
            sc * 1e6,
            flops / sc / 1e9,
            wb / sc / 1e9,
            sc / so
        );
    }

    println!();
    println!(
        "every tensor type: synthetic weights quantized by candle to the type, SmolLM2's \
         ffn_down shape (576×1536) and its gate|up shape (3072×576; not for the K-quants, \
         whose rows must be multiples of 256), median per call:"
    );
    println!(
        "{:<6} {:>10} {:>4} | {:>10} {:>8} {:>8} | {:>10} {:>8} | {:>7}",
        "type", "rows×cols", "t", "ours µs", "GFLOP/s", "w GB/s", "candle µs", "GFLOP/s", "speedup"
    );
    let types = [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
        GgmlDType::Q2K,
        GgmlDType::Q3K,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
    ];
    for dtype in types {
        let k = matches!(
            dtype,
            GgmlDType::Q2K | GgmlDType::Q3K | GgmlDType::Q4K | GgmlDType::Q5K | GgmlDType::Q6K
        );
        let shapes: &[(usize, usize)] = if k {
            &[(576, 1536)]
        } else {
            &[(576, 1536), (3072, 576)]
        };
        for &(rows, cols) in shapes {
            let w = Tensor::from_vec(
                TestRng::new(7).uniform_vec(rows * cols),
                (rows, cols),
                &Device::Cpu,
            )?;
            let p = Pair::new(&[&QTensor::quantize(&(w * 0.1)?, dtype)?])?;
            for t in [1usize, 16, 128] {
                let mut inp = Inputs::new(t, cols, rows, 3 + t as u64)?;
                let cand = Inputs::new(t, cols, rows, 3 + t as u64)?;
                let (so, sc) = time_pair(budget, || ours(&p, &mut inp, t), || candle(&p, &cand));
                let flops = 2.0 * (t * rows * cols) as f64;
                println!(
                    "{:<6} {:>10} {:>4} | {:>10.1} {:>8.1} {:>8.1} | {:>10.1} {:>8.1} | {:>6.2}x",
                    format!("{dtype:?}"),
                    format!("{rows}×{cols}"),
                    t,
                    so * 1e6,
                    flops / so / 1e9,
                    p.ours.byte_size() as f64 / so / 1e9,
                    sc * 1e6,
                    flops / sc / 1e9,
                    sc / so
                );
            }
        }
    }

    println!();
    println!("model sweep: 30 layers × (qkv, attn_out, gate_up, down) + lm_head per step");
    let weight_bytes: usize = stack
        .iter()
        .flat_map(|l| l.iter())
        .chain([&head])
        .map(|p| p.ours.byte_size())
        .sum();
    println!(
        "weights streamed per step: {:.1} MB; decode floor at {all:.1} GB/s: {:.2} ms = {:.0} tok/s",
        weight_bytes as f64 / 1e6,
        weight_bytes as f64 / all / 1e6,
        all * 1e9 / weight_bytes as f64
    );
    println!(
        "{:>4} | {:>10} {:>9} | {:>10} {:>9} | {:>7}",
        "t", "ours ms", "tok/s", "candle ms", "tok/s", "speedup"
    );
    for &t in ts_small {
        let mut ours_in: Vec<Inputs> = Vec::new();
        let mut cand_in: Vec<Inputs> = Vec::new();
        for p in stack[0].iter().chain([&head]) {
            ours_in.push(Inputs::new(t, p.ours.cols(), p.ours.rows(), 7)?);
            cand_in.push(Inputs::new(t, p.ours.cols(), p.ours.rows(), 7)?);
        }
        let step_ours = |ins: &mut [Inputs]| {
            for layer in &stack {
                for (p, inp) in layer.iter().zip(ins.iter_mut()) {
                    ours(p, inp, t);
                }
            }
            ours(&head, &mut ins[4], t);
        };
        let step_candle = |ins: &[Inputs]| {
            for layer in &stack {
                for (p, inp) in layer.iter().zip(ins.iter()) {
                    candle(p, inp);
                }
            }
            candle(&head, &ins[4]);
        };
        let (so, sc) = time_pair(
            budget * 3,
            || step_ours(&mut ours_in),
            || step_candle(&cand_in),
        );
        println!(
            "{:>4} | {:>10.2} {:>9.1} | {:>10.2} {:>9.1} | {:>6.2}x",
            t,
            so * 1e3,
            t as f64 / so,
            sc * 1e3,
            t as f64 / sc,
            sc / so
        );
    }
    print_load();
    Ok(())
}

/// The machine is shared: show how busy it was (Linux load average), where available.
fn print_load() {
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average: {}", l.trim());
    }
}
