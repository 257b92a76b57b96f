//! What summing attention in the reference's order costs: our paged attention
//! (`model::attention`, three passes in candle's order, keys stored
//! dimension-major) against the single-pass online-softmax attention it
//! replaced (keys token-major, 8-accumulator dots), on the same data, side by
//! side in one process, one thread, SmolLM2's head shapes.
//!
//! Cases: one generated token against `L` cached positions (all 9 heads), and
//! every row of a `P`-token prompt (all 9 heads). Prints the median time per
//! case over interleaved rounds and the ratio new / old.
//!
//! Run with `cargo bench -p stoker-executor --bench attention`;
//! `STOKER_BENCH_QUICK=1` shortens it.

use std::hint::black_box;
use std::time::Instant;

use stoker_executor::ids::{BLOCK_SIZE, BlockId};
use stoker_executor::model::attention::{RowKv, attend_one};
use stoker_executor::model::row_order::RowOrder;
use stoker_executor::model::{KvStorage, ModelConfig};
use stoker_test_support::{TestRng, median};

const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const DIM: usize = 64;

fn config() -> ModelConfig {
    ModelConfig::llama(1, HEADS, KV_HEADS, DIM, 1536, 8192)
}

/// One sequence's cache in both layouts.
struct Cache {
    kv: KvStorage,
    table: Vec<BlockId>,
    /// The old layout: `[pos][kv_head][dim]` for keys and values.
    k_old: Vec<f32>,
    v_old: Vec<f32>,
}

fn cache(len: usize, rng: &mut TestRng) -> Cache {
    let blocks = len.div_ceil(BLOCK_SIZE);
    let mut kv = KvStorage::new(&config(), blocks);
    let table: Vec<BlockId> = (0..blocks as u32).map(BlockId).collect();
    let k_old = rng.uniform_vec(len * KV_HEADS * DIM);
    let v_old = rng.uniform_vec(len * KV_HEADS * DIM);
    for pos in 0..len {
        for h in 0..KV_HEADS {
            let at = (pos * KV_HEADS + h) * DIM;
            kv.write_token(
                0,
                table[pos / BLOCK_SIZE],
                h,
                pos % BLOCK_SIZE,
                &k_old[at..at + DIM],
                &v_old[at..at + DIM],
            );
        }
    }
    Cache {
        kv,
        table,
        k_old,
        v_old,
    }
}

/// The attention this crate used before: one pass with a running max and sum.
fn attend_online(c: &Cache, q: &[f32], kv_head: usize, pos: usize, out: &mut [f32]) {
    out.fill(0.0);
    let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
    for p in 0..=pos {
        let at = (p * KV_HEADS + kv_head) * DIM;
        let k = &c.k_old[at..at + DIM];
        let v = &c.v_old[at..at + DIM];
        let score = dot8(q, k) * 0.125;
        if score > max {
            let correction = (max - score).exp();
            sum *= correction;
            for o in out.iter_mut() {
                *o *= correction;
            }
            max = score;
        }
        let w = (score - max).exp();
        sum += w;
        for (o, &vv) in out.iter_mut().zip(v) {
            *o += w * vv;
        }
    }
    let inv = 1.0 / sum;
    for o in out.iter_mut() {
        *o *= inv;
    }
}

fn dot8(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    for c in 0..a.len() / 8 {
        for j in 0..8 {
            acc[j] += a[c * 8 + j] * b[c * 8 + j];
        }
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))
}

fn attend_new(c: &Cache, q: &[f32], kv_head: usize, pos: usize, prompt: usize, out: &mut [f32]) {
    let (k_cache, v_cache) = c.kv.layer(0);
    let src = RowKv {
        k_cache,
        v_cache,
        kv: &c.kv,
        block_table: &c.table,
        kv_head,
    };
    attend_one(q, src, pos, RowOrder::for_row(pos, prompt), 0.125, out);
}

/// Runs `rows` (positions) × all heads once with either implementation.
fn run(c: &Cache, q: &[f32], rows: &[usize], prompt: usize, new: bool) {
    let mut out = [0f32; DIM];
    for &pos in rows {
        for h in 0..HEADS {
            let qh = &q[h * DIM..(h + 1) * DIM];
            if new {
                attend_new(c, qh, h / 3, pos, prompt, &mut out);
            } else {
                attend_online(c, qh, h / 3, pos, &mut out);
            }
            black_box(&out);
        }
    }
}

fn main() {
    let quick = std::env::var("STOKER_BENCH_QUICK").is_ok();
    let rounds = if quick { 5 } else { 21 };
    let mut rng = TestRng::new(0x5eed);
    let q = rng.uniform_vec(HEADS * DIM);
    println!("attention, one thread, 9 heads per row; median of {rounds} interleaved rounds");
    println!("| case | new (reference order) | old (online softmax) | new / old |");
    println!("|---|---|---|---|");
    let mut cases: Vec<(String, usize, Vec<usize>, usize)> = Vec::new();
    for len in [128, 512, 2048] {
        // A generated token: the prompt ended before it.
        cases.push((
            format!("1 generated token, L={len}"),
            len,
            vec![len - 1],
            len / 2,
        ));
    }
    for p in [128, 512] {
        cases.push((
            format!("{p}-token prompt, all rows"),
            p,
            (0..p).collect(),
            p,
        ));
    }
    for (name, len, rows, prompt) in cases {
        let c = cache(len, &mut rng);
        let (mut new, mut old) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            run(&c, &q, &rows, prompt, true);
            new.push(t.elapsed().as_secs_f64() * 1e6);
            let t = Instant::now();
            run(&c, &q, &rows, prompt, false);
            old.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let (n, o) = (median(new), median(old));
        println!("| {name} | {n:.1} µs | {o:.1} µs | {:.2}x |", n / o);
    }
}
