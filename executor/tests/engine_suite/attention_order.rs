//! Our paged attention against the candle ops that candle-transformers'
//! quantized Llama runs (`matmul` of q and kᵀ, scale, causal mask,
//! `softmax_last_dim`, `matmul` with v), bit for bit, on random data shaped
//! like SmolLM2's (9 query heads, 3 KV heads, 64 dims), with the value
//! outliers that make its residual stream sensitive to summation order.
//!
//! Both call patterns of the reference are covered: a whole prompt of `P`
//! rows in one call (every row compared) and one generated token against `L`
//! cached positions. The lengths cross every kernel switch candle makes:
//! gemm's horizontal kernel up to 16×16 and 256 scores, `vec_sum`'s 32-wide
//! steps, and gemv above 256 positions.

use candle_core::{DType, Device, Tensor};
use stoker_executor::ids::{BLOCK_SIZE, BlockId};
use stoker_executor::model::attention::{RowKv, attend_one};
use stoker_executor::model::row_order::RowOrder;
use stoker_executor::model::{KvStorage, ModelConfig};
use stoker_test_support::TestRng;

const HEADS: usize = 9;
const KV_HEADS: usize = 3;
const DIM: usize = 64;

fn config() -> ModelConfig {
    ModelConfig::llama(1, HEADS, KV_HEADS, DIM, 1536, 4096)
}

/// Activation-like values in [-3, 3) from the shared seeded generator, with one in 64
/// an outlier twenty times larger, as in SmolLM2's activations.
fn values(rng: &mut TestRng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let x = rng.uniform() * 3.0;
            if rng.below(64) == 0 { x * 20.0 } else { x }
        })
        .collect()
}

/// What the reference computes for `rows` query rows (`[row][head][dim]`)
/// against `len` positions of keys and values (`[pos][kv_head][dim]`), as
/// `[head][row][dim]`. A multi-row call is causally masked, as the prompt
/// call is (the query rows are the last `rows` positions).
fn candle_attention(q: &[f32], k: &[f32], v: &[f32], rows: usize, len: usize) -> Vec<f32> {
    let dev = Device::Cpu;
    let q = Tensor::from_slice(q, (1, rows, HEADS, DIM), &dev)
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .contiguous()
        .unwrap();
    let to_kv = |x: &[f32]| {
        let t = Tensor::from_slice(x, (1, len, KV_HEADS, DIM), &dev)
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap();
        candle_transformers::utils::repeat_kv(t, HEADS / KV_HEADS).unwrap()
    };
    let (k, v) = (to_kv(k), to_kv(v));
    let att = (q.matmul(&k.t().unwrap()).unwrap() / (DIM as f64).sqrt()).unwrap();
    let att = if rows > 1 {
        let offset = len - rows;
        let mask: Vec<u8> = (0..rows)
            .flat_map(|i| (0..len).map(move |j| u8::from(j > i + offset)))
            .collect();
        let mask = Tensor::from_slice(&mask, (rows, len), &dev)
            .unwrap()
            .broadcast_as(att.shape())
            .unwrap();
        let neg_inf = Tensor::new(f32::NEG_INFINITY, &dev)
            .unwrap()
            .broadcast_as(att.shape())
            .unwrap();
        mask.where_cond(&neg_inf, &att).unwrap()
    } else {
        att
    };
    let att = candle_nn::ops::softmax_last_dim(&att).unwrap();
    let y = att.matmul(&v.contiguous().unwrap()).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    y.flatten_all().unwrap().to_vec1().unwrap()
}

/// Our attention for the rows at positions `first..len` of a sequence whose
/// prompt is `prompt_len` tokens, as `[head][row][dim]`.
fn ours(q: &[f32], k: &[f32], v: &[f32], first: usize, len: usize, prompt_len: usize) -> Vec<f32> {
    let rows = len - first;
    let blocks = len.div_ceil(BLOCK_SIZE);
    let mut kv = KvStorage::new(&config(), blocks + 1);
    // Reverse order, so a block id is not its position.
    let table: Vec<BlockId> = (0..blocks as u32).rev().map(|b| BlockId(b + 1)).collect();
    for pos in 0..len {
        for h in 0..KV_HEADS {
            let at = (pos * KV_HEADS + h) * DIM;
            kv.write_token(
                0,
                table[pos / BLOCK_SIZE],
                h,
                pos % BLOCK_SIZE,
                &k[at..at + DIM],
                &v[at..at + DIM],
            );
        }
    }
    let (k_cache, v_cache) = kv.layer(0);
    let mut out = vec![0f32; HEADS * rows * DIM];
    for r in 0..rows {
        let pos = first + r;
        for h in 0..HEADS {
            let src = RowKv {
                k_cache,
                v_cache,
                kv: &kv,
                block_table: &table,
                kv_head: h / (HEADS / KV_HEADS),
            };
            let qv = &q[(r * HEADS + h) * DIM..(r * HEADS + h + 1) * DIM];
            let o = &mut out[(h * rows + r) * DIM..(h * rows + r + 1) * DIM];
            attend_one(qv, src, pos, RowOrder::for_row(pos, prompt_len), 0.125, o);
        }
    }
    out
}

fn first_difference(a: &[f32], b: &[f32]) -> Option<(usize, f32, f32)> {
    a.iter()
        .zip(b)
        .enumerate()
        .find(|(_, (x, y))| x.to_bits() != y.to_bits())
        .map(|(i, (x, y))| (i, *x, *y))
}

#[test]
fn a_whole_prompt_matches_candle_bit_for_bit() {
    let mut rng = TestRng::new(1);
    let mut failures = Vec::new();
    for p in [
        1, 2, 3, 4, 5, 8, 15, 16, 17, 31, 32, 33, 40, 47, 63, 64, 65, 100, 129, 200, 300, 512,
    ] {
        let q = values(&mut rng, p * HEADS * DIM);
        let k = values(&mut rng, p * KV_HEADS * DIM);
        let v = values(&mut rng, p * KV_HEADS * DIM);
        let theirs = candle_attention(&q, &k, &v, p, p);
        let mine = ours(&q, &k, &v, 0, p, p);
        if let Some((i, a, b)) = first_difference(&mine, &theirs) {
            let (h, r) = (i / DIM / p, i / DIM % p);
            failures.push(format!("P={p}: head {h} row {r}: ours {a:e}, candle {b:e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_generated_token_matches_candle_bit_for_bit() {
    let mut rng = TestRng::new(2);
    let mut failures = Vec::new();
    for len in [
        2, 3, 5, 16, 17, 31, 32, 33, 63, 64, 65, 96, 100, 255, 256, 257, 300, 513, 700,
    ] {
        let q = values(&mut rng, HEADS * DIM);
        let k = values(&mut rng, len * KV_HEADS * DIM);
        let v = values(&mut rng, len * KV_HEADS * DIM);
        let theirs = candle_attention(&q, &k, &v, 1, len);
        // Any prompt shorter than `len` makes the last position a generated one.
        let mine = ours(&q, &k, &v, len - 1, len, len / 2);
        if let Some((i, a, b)) = first_difference(&mine, &theirs) {
            failures.push(format!(
                "L={len}: head {}: ours {a:e}, candle {b:e}",
                i / DIM
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
