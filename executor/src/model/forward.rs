//! Our forward pass over a batch of sequence chunks at different positions.
//!
//! All tokens of the step are flattened into rows. Matrix products go through
//! our kernels (one call per fused weight for the whole batch, so each weight
//! block is read once per step); norms, rope and attention are computed row by
//! row. Every row's arithmetic depends only on its own token, position and KV
//! history, so the result for a sequence is identical whatever shares the step
//! (the batch-invariance test holds us to that, bit for bit).
//!
//! The architecture's features ([`ModelConfig`](crate::model::ModelConfig))
//! switch steps on or off: q/k/v biases, per-head q/k RMSNorm before rope,
//! the rope style and partial rotary, post-attention and post-feed-forward
//! norms, SwiGLU or GeGLU, embedding scaling, attention and final-logit
//! soft-capping, and sliding-window layers. A sliding-window layer masks the
//! positions older than its window; the KV blocks behind the window are not
//! reclaimed early (every layer keeps the whole history in the paged cache,
//! as full-attention layers need it anyway).

use rayon::prelude::*;

use crate::ids::{BLOCK_SIZE, BlockId};
use crate::kernels::{self, QMatrix};
use crate::limits::MAX_HEAD_DIM;
use crate::logprobs::{TokenLogprob, token_logprob};
use crate::model::Model;
use crate::model::attention::{RowKv, Scoring, attend_one_with};
use crate::model::config::Activation;
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
    /// Rows to score against the tokens that follow them (prompt scoring).
    pub score: Option<ScoreRows<'a>>,
    /// Positions before this one are computed in the order of a whole-prompt
    /// call, later ones in that of a one-token call ([`RowOrder`]), however
    /// the scheduler splits them: the sequence's original prompt length in
    /// reference order, 0 in position order (`AttentionOrder`).
    pub prompt_len: usize,
}

/// Rows of a chunk scored against the tokens that follow them: row
/// `first + j` (position `start_pos + first + j`) against `next[j]`. Their
/// logits are reduced to a [`TokenLogprob`] inside the pass, so a long
/// prompt never holds a vocabulary row per token.
#[derive(Clone, Copy, Debug)]
pub struct ScoreRows<'a> {
    pub first: usize,
    pub next: &'a [u32],
    /// Most likely alternatives to report per row.
    pub top: usize,
}

/// What one step computed: the logits of each chunk that asked for them, in
/// order, and the scores of each chunk that had [`ScoreRows`], by chunk
/// index.
#[derive(Debug, Default)]
pub struct ForwardOutput {
    pub logits: Vec<Vec<f32>>,
    pub scores: Vec<(usize, Vec<TokenLogprob>)>,
}

/// Scored rows per language-model-head product: bounds the logits held at
/// once (64 rows of a 150k vocabulary is 38 MB).
const SCORE_ROWS: usize = 64;

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
    part: Vec<f32>,
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
    #[error("chunk {0}: scores {1} rows of a {2}-token chunk")]
    BadScoreRows(usize, usize, usize),
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
        Ok(self.forward_scored(chunks, kv, ws)?.logits)
    }

    /// Runs one step: [`Model::forward`]'s logits, and the scores of the
    /// rows each chunk's [`ScoreRows`] names.
    pub fn forward_scored(
        &self,
        chunks: &[ForwardChunk<'_>],
        kv: &mut KvStorage,
        ws: &mut Workspace,
    ) -> Result<ForwardOutput, ForwardError> {
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
            if let Some(sc) = ch.score {
                if sc.first + sc.next.len() > ch.tokens.len() {
                    return Err(ForwardError::BadScoreRows(
                        c,
                        sc.first + sc.next.len(),
                        ch.tokens.len(),
                    ));
                }
                if let Some(&t) = sc.next.iter().find(|&&t| t as usize >= vocab) {
                    return Err(ForwardError::BadToken(c, t));
                }
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
            return Ok(ForwardOutput::default());
        }
        let qkv_w = cfg.qkv_width();
        let qw = cfg.q_width();
        resize(&mut ws.x, t * h);
        resize(&mut ws.h, t * h);
        resize(&mut ws.qkv, t * qkv_w);
        resize(&mut ws.attn, t * qw);
        resize(&mut ws.tmp, t * h);
        resize(&mut ws.gu, t * 2 * cfg.ffn);
        resize(&mut ws.act, t * cfg.ffn);

        // Embeddings.
        let mut r = 0;
        for ch in chunks {
            for &tok in ch.tokens {
                let x = &mut ws.x[r * h..(r + 1) * h];
                self.weights
                    .embed
                    .row_f32_into(tok as usize, x)
                    .map_err(|e| ForwardError::Kernel(e.to_string()))?;
                if let Some(s) = cfg.embed_scale {
                    x.iter_mut().for_each(|v| *v *= s);
                }
                r += 1;
            }
        }

        let rows = &ws.rows;
        for (li, layer) in self.weights.layers.iter().enumerate() {
            let sliding = cfg.is_sliding(li);
            let rope = match (&self.rope_local, sliding) {
                (Some(local), true) => local,
                _ => &self.rope,
            };
            let scoring = Scoring {
                scale: cfg.attn_scale,
                softcap: cfg.attn_softcap,
                window: if sliding { cfg.sliding_window } else { None },
            };
            rms_norm_rows(&ws.x, &layer.attn_norm, cfg.rms_eps, &mut ws.h, h);
            layer
                .qkv
                .matmul(&ws.h, t, &mut ws.qkv, &mut ws.part)
                .map_err(|e| ForwardError::Kernel(e.to_string()))?;

            // Bias, q/k norms and rope on q and k (rows in parallel: each row's
            // arithmetic is its own), then write k and v into the paged cache.
            ws.qkv[..t * qkv_w]
                .par_chunks_mut(qkv_w)
                .with_min_len(ROWS_PER_TASK)
                .zip(rows.par_iter())
                .for_each(|(qkv_row, row)| {
                    if let Some(b) = &layer.qkv_bias {
                        add_in_place(qkv_row, b);
                    }
                    for hd in 0..nh + nkv {
                        let x = &mut qkv_row[hd * d..(hd + 1) * d];
                        let norm = if hd < nh {
                            &layer.q_norm
                        } else {
                            &layer.k_norm
                        };
                        if let Some(w) = norm {
                            let mut y = [0f32; MAX_HEAD_DIM];
                            rms_norm(x, w, cfg.rms_eps, &mut y[..d]);
                            x.copy_from_slice(&y[..d]);
                        }
                        rope.apply(x, row.pos);
                    }
                });
            for (qkv_row, row) in ws.qkv.chunks(qkv_w).zip(rows.iter()) {
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
                        attend_one_with(q, src, row.pos, row.order, scoring, out);
                    });
            }

            mm(&layer.wo, &ws.attn, t, &mut ws.tmp)?;
            if let Some(w) = &layer.post_attn_norm {
                rms_norm_rows_in_place(&mut ws.tmp, w, cfg.rms_eps, h);
            }
            add_in_place(&mut ws.x, &ws.tmp);

            rms_norm_rows(&ws.x, &layer.ffn_norm, cfg.rms_eps, &mut ws.h, h);
            layer
                .gate_up
                .matmul(&ws.h, t, &mut ws.gu, &mut ws.part)
                .map_err(|e| ForwardError::Kernel(e.to_string()))?;
            let f = cfg.ffn;
            let activation = cfg.activation;
            ws.act[..t * f]
                .par_chunks_mut(f)
                .with_min_len(ROWS_PER_TASK)
                .zip(ws.gu[..t * 2 * f].par_chunks(2 * f))
                .for_each(|(act, gu)| match activation {
                    Activation::Silu => {
                        for j in 0..f {
                            let g = gu[j];
                            act[j] = (g / ((-g).exp() + 1.0)) * gu[f + j];
                        }
                    }
                    Activation::GeluTanh => {
                        for j in 0..f {
                            act[j] = gelu_tanh(gu[j]) * gu[f + j];
                        }
                    }
                });
            mm(&layer.down, &ws.act, t, &mut ws.tmp)?;
            if let Some(w) = &layer.post_ffn_norm {
                rms_norm_rows_in_place(&mut ws.tmp, w, cfg.rms_eps, h);
            }
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
        let mut out = ForwardOutput::default();
        if !want.is_empty() {
            let vocab_rows = self.weights.lm_head().rows();
            let logits = self.head_logits(&ws.x, &want)?;
            out.logits = logits.chunks(vocab_rows).map(|c| c.to_vec()).collect();
        }
        let mut r = 0;
        for (c, ch) in chunks.iter().enumerate() {
            if let Some(sc) = ch.score {
                out.scores
                    .push((c, self.score_rows(&ws.x, r + sc.first, sc)?));
            }
            r += ch.tokens.len();
        }
        Ok(out)
    }

    /// The final norm and the language-model head over rows `rows` of the
    /// hidden states `x`: one vocabulary row of logits per row, in order.
    fn head_logits(&self, x: &[f32], rows: &[usize]) -> Result<Vec<f32>, ForwardError> {
        let cfg = &self.config;
        let h = cfg.hidden;
        let n = rows.len();
        let mut last = vec![0f32; n * h];
        for (i, &ri) in rows.iter().enumerate() {
            rms_norm(
                &x[ri * h..(ri + 1) * h],
                &self.weights.norm,
                cfg.rms_eps,
                &mut last[i * h..(i + 1) * h],
            );
        }
        let head = self.weights.lm_head();
        let mut logits = vec![0f32; n * head.rows()];
        mm(head, &last, n, &mut logits)?;
        if let Some(cap) = cfg.final_softcap {
            for l in &mut logits {
                *l = (*l / cap).tanh() * cap;
            }
        }
        Ok(logits)
    }

    /// Scores rows `first..first + sc.next.len()` of `x` against the
    /// tokens that follow them, [`SCORE_ROWS`] at a time.
    fn score_rows(
        &self,
        x: &[f32],
        first: usize,
        sc: ScoreRows<'_>,
    ) -> Result<Vec<TokenLogprob>, ForwardError> {
        let vocab_rows = self.weights.lm_head().rows();
        let mut out = Vec::with_capacity(sc.next.len());
        for (g, next) in sc.next.chunks(SCORE_ROWS).enumerate() {
            let start = first + g * SCORE_ROWS;
            let rows: Vec<usize> = (start..start + next.len()).collect();
            let logits = self.head_logits(x, &rows)?;
            let scored: Vec<TokenLogprob> = logits
                .par_chunks(vocab_rows)
                .zip(next.par_iter())
                .map_init(Vec::new, |scratch, (row, &tok)| {
                    token_logprob(row, tok, sc.top, scratch)
                })
                .collect();
            out.extend(scored);
        }
        Ok(out)
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

fn rms_norm_rows_in_place(x: &mut [f32], w: &[f32], eps: f32, h: usize) {
    let mut y = vec![0f32; h];
    for xr in x.chunks_mut(h) {
        rms_norm(xr, w, eps, &mut y);
        xr.copy_from_slice(&y);
    }
}

/// GELU, tanh approximation, as candle's `gelu` computes it.
fn gelu_tanh(x: f32) -> f32 {
    const SQRT_TWO_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_TWO_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh())
}

/// Rows per parallel task in the row-wise steps (rope, activation): below this a
/// step's rows stay on one thread, as a decode step's do.
const ROWS_PER_TASK: usize = 16;

fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32], h: usize) {
    for (xr, or) in x.chunks(h).zip(out.chunks_mut(h)) {
        rms_norm(xr, w, eps, or);
    }
}
