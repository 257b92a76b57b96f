//! Our forward pass over a batch of sequence chunks at different positions.
//!
//! All tokens of the step are flattened into rows. Matrix products go through
//! our kernels (one call per fused weight for the whole batch, so each weight
//! block is read once per step); norms, rope and attention are computed row by
//! row. Every row's arithmetic depends only on its own token, position and KV
//! history, so the result for a sequence is identical whatever shares the step
//! (the batch-invariance test holds us to that, bit for bit).

use rayon::prelude::*;

use crate::ids::{BLOCK_SIZE, BlockId};
use crate::kernels::{self, QMatrix};
use crate::model::Model;
use crate::model::attention::{RowKv, attend_one};
use crate::model::kv_storage::KvStorage;
use crate::model::row_order::RowOrder;

/// One sequence's slice of a step: `tokens` occupy positions
/// `start_pos..start_pos + tokens.len()`, and the block table covers them all.
#[derive(Clone, Copy, Debug)]
pub struct ForwardChunk<'a> {
    pub tokens: &'a [u32],
    pub start_pos: usize,
    pub block_table: &'a [BlockId],
    /// Whether to compute logits for the chunk's last token.
    pub logits: bool,
    /// Positions before this one are computed in the order of a whole-prompt
    /// call, later ones in that of a one-token call ([`RowOrder`]), however
    /// the scheduler splits them: the sequence's original prompt length in
    /// reference order, 0 in position order (`AttentionOrder`).
    pub prompt_len: usize,
}

/// Reusable activation buffers, grown to the largest step seen.
#[derive(Default)]
pub struct Workspace {
    x: Vec<f32>,
    h: Vec<f32>,
    qkv: Vec<f32>,
    attn: Vec<f32>,
    tmp: Vec<f32>,
    gu: Vec<f32>,
    act: Vec<f32>,
    rows: Vec<RowInfo>,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("rows", &self.rows.len())
            .finish()
    }
}

#[derive(Clone, Copy)]
struct RowInfo {
    chunk: usize,
    pos: usize,
    order: RowOrder,
}

fn resize(v: &mut Vec<f32>, n: usize) {
    v.clear();
    v.resize(n, 0.0);
}

#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("chunk {0}: position {1} is past the model's {2} positions")]
    PositionOutOfRange(usize, usize, usize),
    #[error("chunk {0}: block table covers {1} tokens, needs {2}")]
    BlockTableTooShort(usize, usize, usize),
    #[error("chunk {0}: block {1} is outside the KV pool")]
    BadBlock(usize, u32),
    #[error("chunk {0}: token {1} is outside the vocabulary")]
    BadToken(usize, u32),
    #[error("kernel: {0}")]
    Kernel(String),
}

impl Model {
    /// Runs one step. Returns, for each chunk with `logits: true` in order,
    /// the vocabulary logits of its last token.
    pub fn forward(
        &self,
        chunks: &[ForwardChunk<'_>],
        kv: &mut KvStorage,
        ws: &mut Workspace,
    ) -> Result<Vec<Vec<f32>>, ForwardError> {
        let cfg = &self.config;
        let (h, d) = (cfg.hidden, cfg.head_dim);
        let (nh, nkv) = (cfg.n_heads, cfg.n_kv_heads);
        let group = nh / nkv;
        let vocab = self.weights.embed.rows();
        let max_pos = self.rope.max_positions();

        ws.rows.clear();
        for (c, ch) in chunks.iter().enumerate() {
            let end = ch.start_pos + ch.tokens.len();
            if end > max_pos {
                return Err(ForwardError::PositionOutOfRange(c, end, max_pos));
            }
            if ch.block_table.len() * BLOCK_SIZE < end {
                return Err(ForwardError::BlockTableTooShort(
                    c,
                    ch.block_table.len() * BLOCK_SIZE,
                    end,
                ));
            }
            if let Some(b) = ch.block_table.iter().find(|b| b.index() >= kv.num_blocks()) {
                return Err(ForwardError::BadBlock(c, b.0));
            }
            if let Some(&t) = ch.tokens.iter().find(|&&t| t as usize >= vocab) {
                return Err(ForwardError::BadToken(c, t));
            }
            for i in 0..ch.tokens.len() {
                let pos = ch.start_pos + i;
                ws.rows.push(RowInfo {
                    chunk: c,
                    pos,
                    order: RowOrder::for_row(pos, ch.prompt_len),
                });
            }
        }
        let t = ws.rows.len();
        if t == 0 {
            return Ok(Vec::new());
        }
        let qkv_w = cfg.qkv_width();
        resize(&mut ws.x, t * h);
        resize(&mut ws.h, t * h);
        resize(&mut ws.qkv, t * qkv_w);
        resize(&mut ws.attn, t * h);
        resize(&mut ws.tmp, t * h);
        resize(&mut ws.gu, t * 2 * cfg.ffn);
        resize(&mut ws.act, t * cfg.ffn);

        // Embeddings.
        let mut r = 0;
        for ch in chunks {
            for &tok in ch.tokens {
                self.weights
                    .embed
                    .row_f32_into(tok as usize, &mut ws.x[r * h..(r + 1) * h])
                    .map_err(|e| ForwardError::Kernel(e.to_string()))?;
                r += 1;
            }
        }

        let scale = 1.0 / (d as f32).sqrt();
        let rows = &ws.rows;
        for (li, layer) in self.weights.layers.iter().enumerate() {
            rms_norm_rows(&ws.x, &layer.attn_norm, cfg.rms_eps, &mut ws.h, h);
            mm(&layer.qkv, &ws.h, t, &mut ws.qkv)?;

            // Rope on q and k, then write k and v into the paged cache.
            for (ri, row) in rows.iter().enumerate() {
                let base = ri * qkv_w;
                let qkv_row = &mut ws.qkv[base..base + qkv_w];
                for hd in 0..nh + nkv {
                    self.rope.apply(&mut qkv_row[hd * d..(hd + 1) * d], row.pos);
                }
                let ch = &chunks[row.chunk];
                let block = ch.block_table[row.pos / BLOCK_SIZE];
                let slot = row.pos % BLOCK_SIZE;
                for kh in 0..nkv {
                    let k = &qkv_row[(nh + kh) * d..(nh + kh + 1) * d];
                    let v = &qkv_row[(nh + nkv + kh) * d..(nh + nkv + kh + 1) * d];
                    kv.write_token(li, block, kh, slot, k, v);
                }
            }

            // Attention: one task per (row, head).
            {
                let (k_cache, v_cache) = kv.layer(li);
                let kv_ro: &KvStorage = kv;
                let qkv = &ws.qkv;
                ws.attn
                    .par_chunks_mut(d)
                    .with_min_len(4)
                    .enumerate()
                    .for_each(|(idx, out)| {
                        let (ri, head) = (idx / nh, idx % nh);
                        let row = rows[ri];
                        let q = &qkv[ri * qkv_w + head * d..ri * qkv_w + (head + 1) * d];
                        let ch = &chunks[row.chunk];
                        let src = RowKv {
                            k_cache,
                            v_cache,
                            kv: kv_ro,
                            block_table: ch.block_table,
                            kv_head: head / group,
                        };
                        attend_one(q, src, row.pos, row.order, scale, out);
                    });
            }

            mm(&layer.wo, &ws.attn, t, &mut ws.tmp)?;
            add_in_place(&mut ws.x, &ws.tmp);

            rms_norm_rows(&ws.x, &layer.ffn_norm, cfg.rms_eps, &mut ws.h, h);
            mm(&layer.gate_up, &ws.h, t, &mut ws.gu)?;
            let f = cfg.ffn;
            for ri in 0..t {
                let gu = &ws.gu[ri * 2 * f..(ri + 1) * 2 * f];
                let act = &mut ws.act[ri * f..(ri + 1) * f];
                for j in 0..f {
                    let g = gu[j];
                    act[j] = (g / ((-g).exp() + 1.0)) * gu[f + j];
                }
            }
            mm(&layer.down, &ws.act, t, &mut ws.tmp)?;
            add_in_place(&mut ws.x, &ws.tmp);
        }

        // Final norm and logits, only for the rows that need them.
        let mut want = Vec::new();
        let mut r = 0;
        for ch in chunks {
            r += ch.tokens.len();
            if ch.logits {
                want.push(r - 1);
            }
        }
        if want.is_empty() {
            return Ok(Vec::new());
        }
        let n = want.len();
        let mut last = vec![0f32; n * h];
        for (i, &ri) in want.iter().enumerate() {
            rms_norm(
                &ws.x[ri * h..(ri + 1) * h],
                &self.weights.norm,
                cfg.rms_eps,
                &mut last[i * h..(i + 1) * h],
            );
        }
        let head = self.weights.lm_head();
        let mut logits = vec![0f32; n * head.rows()];
        mm(head, &last, n, &mut logits)?;
        Ok(logits.chunks(head.rows()).map(|c| c.to_vec()).collect())
    }
}

fn mm(w: &QMatrix, x: &[f32], t: usize, out: &mut [f32]) -> Result<(), ForwardError> {
    kernels::matmul(w, x, t, out).map_err(|e| ForwardError::Kernel(e.to_string()))
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

/// RMSNorm as candle computes it: `x / sqrt(mean(x²) + eps) * w`.
fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let sum2: f32 = x.iter().map(|v| v * v).sum();
    let m = (sum2 / x.len() as f32 + eps).sqrt();
    for ((o, &xv), &wv) in out.iter_mut().zip(x).zip(w) {
        *o = xv / m * wv;
    }
}

fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32], h: usize) {
    for (xr, or) in x.chunks(h).zip(out.chunks_mut(h)) {
        rms_norm(xr, w, eps, or);
    }
}
