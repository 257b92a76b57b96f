//! The engine loop: drain commands, schedule a step, run the forward pass,
//! sample, stream, finish. Runs on the engine thread and owns all its state.

use std::collections::HashMap;
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::mpsc as tmpsc;

use super::events::{EngineEvent, FinishReason, Timings, Usage};
use super::rate::Rate;
use super::stats::EngineStats;
use super::{Command, EngineConfig, Forget, ModelInfo};
use crate::detokenize::IncrementalDetokenizer;
use crate::error::{EngineError, ModelError};
use crate::ids::{Lane, SeqId};
use crate::logit_processing::LogitState;
use crate::logprobs::{TokenLogprob, token_logprob};
use crate::model::row_order::AttentionOrder;
use crate::model::{ForwardChunk, ForwardOutput, KvStorage, Model, ScoreRows, Workspace};
use crate::request::SamplingParams;
use crate::sampling::{SeqRng, sample};
use crate::scheduler::{
    PerLane, ScheduledChunk, Scheduler, SchedulerConfig, SchedulerError, SeqSpec,
};
use crate::stop::{StopMatcher, StopOutcome};
use crate::structured::Mask;

use super::masks::MaskAhead;

/// Per-sequence state that is not the scheduler's business.
struct SeqState {
    events: tmpsc::UnboundedSender<EngineEvent>,
    params: SamplingParams,
    rng: SeqRng,
    /// Token history for penalties, bias and min_tokens.
    logit_state: LogitState,
    detok: IncrementalDetokenizer,
    stop: StopMatcher,
    stop_ids: Vec<u32>,
    prompt_len: usize,
    generated: usize,
    pending_ids: Vec<u32>,
    /// Log probabilities of `pending_ids`, when the request asked for them.
    pending_logprobs: Vec<TokenLogprob>,
    /// The prompt's scores so far (entry `k` scores token `k + 1`), when
    /// the request asked for them; appended only, so rows a preemption
    /// recomputes are not scored twice. Sent whole before the first token.
    prompt_scores: Option<Vec<TokenLogprob>>,
    submitted_at: Instant,
    first_scheduled_at: Option<Instant>,
    first_token_at: Option<Instant>,
    preemptions: u32,
    cached_prompt_tokens: usize,
}

/// A sibling choice not yet admitted.
struct Parked {
    seq: SeqId,
    request: crate::request::ValidRequest,
    events: tmpsc::UnboundedSender<EngineEvent>,
    submitted_at: Instant,
}

pub(super) struct EngineCore {
    model: Model,
    kv: KvStorage,
    sched: Scheduler,
    ws: Workspace,
    seqs: HashMap<SeqId, SeqState>,
    stats: EngineStats,
    sample_scratch: Vec<(f32, u32)>,
    /// A row's logits after the request's bias, penalties and grammar.
    processed_logits: Vec<f32>,
    /// The grammars of sequences with a response format, each next mask
    /// computed ahead on the mask thread.
    constraints: MaskAhead,
    /// Sibling choices (`n`) waiting for their first choice's prefill, by
    /// that choice's id.
    parked: HashMap<SeqId, Vec<Parked>>,
    attention_order: AttentionOrder,
    rates: Rates,
}

/// The token rates behind the stats' `*_tokens_per_second_ewma` figures.
struct Rates {
    all: Rate,
    prefill: Rate,
    decode: Rate,
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            all: Rate::default(),
            prefill: Rate::published_from(super::rate::MIN_PREFILL_TOKENS),
            decode: Rate::default(),
        }
    }
}

const EWMA: f64 = 0.1;

impl EngineCore {
    pub(super) fn new(model: Model, config: &EngineConfig) -> Result<Self, ModelError> {
        let num_blocks =
            KvStorage::blocks_for_budget(&model.config, config.kv_cache_bytes, config.kv_headroom);
        let needed = model
            .config
            .context_length
            .min(4096)
            .div_ceil(crate::ids::BLOCK_SIZE);
        if num_blocks < needed.min(64) {
            return Err(ModelError::KvBudgetTooSmall {
                budget: config.kv_cache_bytes,
                blocks: num_blocks,
                needed: needed.min(64),
            });
        }
        let salt = revision_salt(&model.identity.sha256);
        let sched = Scheduler::new(SchedulerConfig {
            num_blocks,
            max_num_seqs: config.max_num_seqs,
            max_batched_tokens: config.max_batched_tokens,
            max_waiting_requests: config.max_waiting_requests,
            max_waiting_tokens: config.max_waiting_tokens,
            interactive_reserve_share: config.interactive_reserve_share,
            enable_prefix_caching: config.enable_prefix_caching,
            revision_salt: salt,
            batch_max_step_tokens: config.batch_max_step_tokens,
            batch_yields_to_prefill: config.batch_yields_to_prefill,
            fair_share: config.fair_share,
            planner: config.planner,
        })
        .map_err(|e| ModelError::Config(e.to_string()))?;
        let kv = KvStorage::new(&model.config, num_blocks);
        let mut core = EngineCore {
            model,
            kv,
            sched,
            ws: Workspace::default(),
            seqs: HashMap::new(),
            stats: EngineStats::default(),
            sample_scratch: Vec::new(),
            processed_logits: Vec::new(),
            constraints: MaskAhead::default(),
            parked: HashMap::new(),
            attention_order: config.attention_order,
            rates: Rates::default(),
        };
        core.refresh_gauges();
        Ok(core)
    }

    pub(super) fn info(&self) -> ModelInfo {
        ModelInfo {
            identity: self.model.identity.clone(),
            context_window: self.model.config.context_length,
            vocab_size: self.model.config.vocab_size,
            num_kv_blocks: self.kv.num_blocks(),
            generation: self.model.generation.clone(),
        }
    }

    pub(super) fn stats(&self) -> EngineStats {
        self.stats.clone()
    }

    pub(super) fn run(&mut self, rx: mpsc::Receiver<Command>, shared: &Mutex<EngineStats>) {
        loop {
            // Block while idle; otherwise take whatever has arrived.
            if self.seqs.is_empty() {
                match rx.recv() {
                    Ok(cmd) => {
                        if !self.handle(cmd, shared) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
            let mut shutdown = false;
            loop {
                match rx.try_recv() {
                    Ok(cmd) => {
                        if !self.handle(cmd, shared) {
                            shutdown = true;
                            break;
                        }
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        shutdown = true;
                        break;
                    }
                }
            }
            if shutdown {
                break;
            }
            let progressed = if self.seqs.is_empty() {
                false
            } else {
                self.step()
            };
            *shared.lock().unwrap() = self.stats.clone();
            if !progressed && !self.seqs.is_empty() {
                // Nothing could run (should be rare): wait for a command
                // rather than spin.
                if let Ok(cmd) = rx.recv_timeout(Duration::from_millis(5))
                    && !self.handle(cmd, shared)
                {
                    break;
                }
            }
        }
        let ids: Vec<SeqId> = self.seqs.keys().copied().collect();
        for id in ids {
            self.fail(id, EngineError::ShuttingDown);
        }
        *shared.lock().unwrap() = self.stats.clone();
    }

    /// Returns false on shutdown.
    fn handle(&mut self, cmd: Command, shared: &Mutex<EngineStats>) -> bool {
        match cmd {
            Command::Submit {
                seq,
                request,
                events,
                submitted_at,
                after,
            } => {
                let prefilling = after
                    .and_then(|l| self.seqs.get(&l))
                    .is_some_and(|l| l.first_token_at.is_none());
                match after {
                    Some(leader) if prefilling => {
                        self.parked.entry(leader).or_default().push(Parked {
                            seq,
                            request,
                            events,
                            submitted_at,
                        });
                    }
                    _ => self.admit(seq, request, events, submitted_at),
                }
            }
            Command::Cancel(seq) => self.finish(seq, FinishReason::Cancelled),
            Command::Preempt(seq) => {
                if self.sched.preempt_now(seq).is_ok() {
                    self.note_preempted(seq);
                }
            }
            Command::SetPlanner(planner) => {
                if self.sched.planner().config != planner {
                    match self.sched.set_planner(planner) {
                        Ok(()) => tracing::info!(?planner, "step planner targets changed"),
                        Err(e) => tracing::warn!(error = %e, "step planner targets refused"),
                    }
                    self.stats.planner = self.sched.planner();
                }
            }
            Command::ForgetSpeed(what, done) => {
                // The warm-up's first steps paid for first touches of the
                // weights and the KV pool, and its one-token prompt is all
                // fixed cost: they say nothing of how fast requests will be
                // served. The step-cost model forgets them too: one-token
                // steps cannot tell fixed from per-token cost, so the fit
                // spread a cold step's time over every coefficient and read
                // a prompt token at 25 ms (admission then refused the first
                // burst of short chats on a fresh revision as seconds of
                // prefill). Its calibration prompt's prefill rate and costs
                // stand; its step time, a long prefill's, is not a decode
                // step's.
                if what == Forget::Everything {
                    self.rates.prefill = Rates::default().prefill;
                    self.sched.forget_step_costs();
                    self.stats.planner = self.sched.planner();
                    self.stats.prefill_tokens_per_second_ewma = 0.0;
                }
                self.rates.all = Rate::default();
                self.rates.decode = Rate::default();
                self.stats.step_time_ewma = Duration::ZERO;
                self.stats.tokens_per_second_ewma = 0.0;
                self.stats.decode_tokens_per_second_ewma = 0.0;
                self.refresh_gauges();
                *shared.lock().unwrap() = self.stats.clone();
                let _ = done.send(());
            }
            Command::Shutdown => return false,
        }
        true
    }

    fn admit(
        &mut self,
        seq: SeqId,
        mut request: crate::request::ValidRequest,
        events: tmpsc::UnboundedSender<EngineEvent>,
        submitted_at: Instant,
    ) {
        let params = request.params().clone();
        let constraint = request.take_constraint();
        if params.structured.is_some() && constraint.is_none() {
            let _ = events.send(EngineEvent::Error(EngineError::Internal(
                "a response format reached the engine uncompiled".into(),
            )));
            return;
        }
        let spec = SeqSpec {
            id: seq,
            lane: request.lane(),
            tenant: request.tenant().clone(),
            tenant_weight: request.tenant_weight(),
            prompt: request.prompt().to_vec(),
            // A scoring request with max_tokens 0 still computes the last
            // prompt row (and samples nothing from it).
            max_new_tokens: params.max_tokens.max(1),
            ordered_prompt_len: self
                .attention_order
                .ordered_prompt_len(request.prompt().len()),
            compute_whole_prompt: params.prompt_logprobs.is_some(),
        };
        if let Err(e) = self.sched.add(spec) {
            let err = match e {
                SchedulerError::CannotFit { .. } => EngineError::CannotFit,
                SchedulerError::QueueFull { .. } | SchedulerError::TooManyWaitingTokens { .. } => {
                    EngineError::QueueFull {
                        lane: request.lane(),
                    }
                }
                other => EngineError::Internal(other.to_string()),
            };
            let _ = events.send(EngineEvent::Error(err));
            return;
        }
        let mut stop_ids = params.stop_token_ids.clone();
        if params.stop_at_eos {
            stop_ids.extend(self.model.tokenizer.stop_token_ids());
        }
        let seed = params.seed.unwrap_or_else(|| {
            // Unseeded requests still get an independent stream.
            let t = submitted_at.elapsed().as_nanos() as u64;
            seq.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ t ^ std::process::id() as u64
        });
        self.stats.prompt_tokens_total += request.prompt().len() as u64;
        if let Some(c) = constraint {
            self.constraints.insert(seq, c);
        }
        self.seqs.insert(
            seq,
            SeqState {
                events,
                rng: SeqRng::new(seed),
                logit_state: LogitState::new(&params, request.prompt()),
                detok: IncrementalDetokenizer::after_prompt(true, request.prompt()),
                stop: StopMatcher::new(params.stop.clone())
                    .including_stop(params.include_stop_str_in_output),
                stop_ids,
                prompt_len: request.prompt().len(),
                generated: 0,
                pending_ids: Vec::new(),
                pending_logprobs: Vec::new(),
                prompt_scores: params
                    .prompt_logprobs
                    .map(|_| Vec::with_capacity(request.prompt().len().saturating_sub(1))),
                submitted_at,
                first_scheduled_at: None,
                first_token_at: None,
                preemptions: 0,
                cached_prompt_tokens: 0,
                params,
            },
        );
    }

    fn note_preempted(&mut self, seq: SeqId) {
        if let Some(s) = self.seqs.get_mut(&seq) {
            s.preemptions += 1;
        }
    }

    /// One continuous-batching step. Returns whether any work was done.
    fn step(&mut self) -> bool {
        let started = Instant::now();
        let plan = self.sched.schedule();
        for &seq in &plan.preempted {
            self.note_preempted(seq);
        }
        for (seq, reason) in &plan.aborted {
            self.fail(
                *seq,
                EngineError::Internal(format!("aborted by the scheduler: {reason}")),
            );
        }
        if plan.chunks.is_empty() {
            self.refresh_gauges();
            return !plan.aborted.is_empty();
        }
        let now = Instant::now();
        let mut prefill_tokens = 0usize;
        let mut decode_tokens = 0usize;
        let mut lane_prefill = PerLane::<usize>::default();
        let mut lane_decode = PerLane::<usize>::default();
        for c in &plan.chunks {
            if let Some(s) = self.seqs.get_mut(&c.seq) {
                if s.first_scheduled_at.is_none() {
                    s.first_scheduled_at = Some(now);
                    s.cached_prompt_tokens = c.start;
                    let _ = s.events.send(EngineEvent::Started {
                        queue: now.saturating_duration_since(s.submitted_at),
                    });
                }
                if c.start + c.len <= s.prompt_len || s.first_token_at.is_none() {
                    prefill_tokens += c.len;
                    lane_prefill[c.lane] += c.len;
                } else {
                    decode_tokens += c.len;
                    lane_decode[c.lane] += 1;
                }
            }
        }
        let chunks: Vec<ForwardChunk<'_>> = plan
            .chunks
            .iter()
            .map(|c| ForwardChunk {
                tokens: self.sched.chunk_tokens(c).unwrap_or(&[]),
                start_pos: c.start,
                block_table: self.sched.block_table(c.seq).unwrap_or(&[]),
                logits: c.sample,
                score: score_rows(&self.seqs, &self.sched, c),
                prompt_len: self
                    .sched
                    .sequence(c.seq)
                    .map_or(0, |s| s.ordered_prompt_len()),
            })
            .collect();
        // The grammar masks of this step's sampled rows are being computed
        // meanwhile, on the mask thread (`MaskAhead`).
        let result = self
            .model
            .forward_scored(&chunks, &mut self.kv, &mut self.ws);
        drop(chunks);
        let ForwardOutput { logits, scores } = match result {
            Ok(out) => out,
            Err(e) => {
                // A forward error is a bug or corrupt state: fail the step's
                // sequences loudly rather than stream garbage.
                tracing::error!(error = %e, "forward pass failed");
                let ids: Vec<SeqId> = plan.chunks.iter().map(|c| c.seq).collect();
                for id in ids {
                    self.fail(id, EngineError::Internal(e.to_string()));
                }
                self.refresh_gauges();
                return true;
            }
        };
        self.sched.complete_step(&plan);
        for (ci, rows) in scores {
            if let Some(v) = self
                .seqs
                .get_mut(&plan.chunks[ci].seq)
                .and_then(|s| s.prompt_scores.as_mut())
            {
                v.extend(rows);
            }
        }
        let sampled: Vec<SeqId> = plan
            .chunks
            .iter()
            .filter(|c| c.sample)
            .map(|c| c.seq)
            .collect();
        for (seq, row) in sampled.into_iter().zip(logits) {
            let mask = self.constraints.take(seq);
            self.on_logits(seq, &row, mask);
        }
        self.stats.steps_total += 1;
        let dt = started.elapsed();
        let secs = dt.as_secs_f64().max(1e-9);
        self.sched.observe_step(&plan, secs * 1e3);
        self.stats.steps.record(secs, lane_prefill, lane_decode);
        self.stats.planner = self.sched.planner();
        let ewma = |old: f64, new: f64| {
            if old == 0.0 {
                new
            } else {
                old * (1.0 - EWMA) + new * EWMA
            }
        };
        self.stats.step_time_ewma =
            Duration::from_secs_f64(ewma(self.stats.step_time_ewma.as_secs_f64(), secs));
        self.rates.all.observe(prefill_tokens + decode_tokens, secs);
        self.rates.prefill.observe(prefill_tokens, secs);
        self.rates.decode.observe(decode_tokens, secs);
        self.stats.tokens_per_second_ewma = self.rates.all.per_second();
        self.stats.prefill_tokens_per_second_ewma = self.rates.prefill.per_second();
        self.stats.decode_tokens_per_second_ewma = self.rates.decode.per_second();
        self.refresh_gauges();
        true
    }

    fn on_logits(&mut self, seq: SeqId, logits: &[f32], mask: Option<Result<Mask, String>>) {
        let mask = match mask.transpose() {
            Ok(m) => m,
            Err(e) => {
                self.fail(seq, grammar_failed(e));
                return;
            }
        };
        let Some(s) = self.seqs.get_mut(&seq) else {
            return;
        };
        if let Some(scores) = s.prompt_scores.take() {
            debug_assert_eq!(scores.len() + 1, s.prompt_len);
            let _ = s.events.send(EngineEvent::PromptLogprobs(scores));
        }
        if s.params.max_tokens == 0 {
            // Scoring only: the prompt is in, nothing is generated.
            s.first_token_at = Some(Instant::now());
            self.finish(seq, FinishReason::Length);
            return;
        }
        let processes = s.params.processes_logits(s.generated);
        let tok = if processes || mask.is_some() {
            let row = &mut self.processed_logits;
            row.clear();
            row.extend_from_slice(logits);
            if processes {
                s.logit_state
                    .apply(&s.params, s.generated, &s.stop_ids, row);
            }
            if let Some(m) = &mask {
                m.apply(row);
                if !row.iter().any(|x| x.is_finite()) {
                    // The request's rules masked all the grammar allows
                    // (min_tokens against a finished grammar): the grammar wins.
                    row.clear();
                    row.extend_from_slice(logits);
                    m.apply(row);
                }
            }
            sample(row, &s.params, &mut s.rng, &mut self.sample_scratch)
        } else {
            sample(logits, &s.params, &mut s.rng, &mut self.sample_scratch)
        };
        s.logit_state.record(tok);
        let mut grammar_done = false;
        match self.constraints.consume(seq, tok) {
            Some(Err(e)) => {
                self.fail(seq, grammar_failed(e));
                return;
            }
            Some(Ok(done)) => grammar_done = done,
            None => {}
        }
        let Some(s) = self.seqs.get_mut(&seq) else {
            return;
        };
        // From the raw logits, whatever the request's rules changed.
        let logprob = s
            .params
            .logprobs
            .map(|n| token_logprob(logits, tok, n, &mut self.sample_scratch));
        s.generated += 1;
        self.stats.generation_tokens_total += 1;
        let first = s.first_token_at.is_none();
        if first {
            s.first_token_at = Some(Instant::now());
        }
        if first {
            // The prompt's blocks are in the prefix cache now.
            self.release_parked(seq);
        }
        let Some(s) = self.seqs.get_mut(&seq) else {
            return;
        };
        if s.stop_ids.contains(&tok) {
            let tail = s
                .detok
                .flush(&self.model.tokenizer)
                .ok()
                .flatten()
                .unwrap_or_default();
            let mut text = match s.stop.push(&tail) {
                StopOutcome::Continue(t) | StopOutcome::Stopped(t) => t,
            };
            text.push_str(&s.stop.flush());
            let ids = std::mem::take(&mut s.pending_ids);
            let logprobs = std::mem::take(&mut s.pending_logprobs);
            if !text.is_empty() || !ids.is_empty() {
                let _ = s.events.send(EngineEvent::Delta {
                    text,
                    token_ids: ids,
                    logprobs,
                });
            }
            self.finish(seq, FinishReason::Stop);
            return;
        }
        s.pending_ids.push(tok);
        s.pending_logprobs.extend(logprob);
        let mut stopped = false;
        let mut out = String::new();
        let match_stops = s.generated > s.params.min_tokens;
        match s.detok.push(&self.model.tokenizer, tok) {
            Ok(Some(delta)) if !match_stops => out = s.stop.push_unmatched(&delta),
            Ok(Some(delta)) => match s.stop.push(&delta) {
                StopOutcome::Continue(t) => out = t,
                StopOutcome::Stopped(t) => {
                    out = t;
                    stopped = true;
                }
            },
            Ok(None) => {}
            Err(e) => {
                self.fail(seq, EngineError::Internal(format!("detokenize: {e}")));
                return;
            }
        }
        let at_length = s.generated >= s.params.max_tokens;
        if (at_length || grammar_done) && !stopped {
            let tail = s
                .detok
                .flush(&self.model.tokenizer)
                .ok()
                .flatten()
                .unwrap_or_default();
            match s.stop.push(&tail) {
                StopOutcome::Continue(t) => {
                    out.push_str(&t);
                    out.push_str(&s.stop.flush());
                }
                StopOutcome::Stopped(t) => {
                    out.push_str(&t);
                    stopped = true;
                }
            }
        }
        if !out.is_empty() || stopped || at_length || grammar_done {
            let ids = std::mem::take(&mut s.pending_ids);
            let logprobs = std::mem::take(&mut s.pending_logprobs);
            if !out.is_empty() || !ids.is_empty() {
                let _ = s.events.send(EngineEvent::Delta {
                    text: out,
                    token_ids: ids,
                    logprobs,
                });
            }
        }
        if stopped || grammar_done {
            self.finish(seq, FinishReason::Stop);
        } else if at_length {
            self.finish(seq, FinishReason::Length);
        } else if self.sched.append_token(seq, tok).is_err() {
            self.fail(
                seq,
                EngineError::Internal("sequence vanished from the scheduler".into()),
            );
        } else if s.events.is_closed() {
            self.finish(seq, FinishReason::Cancelled);
        }
    }

    /// Admits the sibling choices that waited for `leader`'s prefill (or
    /// for its end, if it ended first); those whose caller left are dropped.
    fn release_parked(&mut self, leader: SeqId) {
        for p in self.parked.remove(&leader).unwrap_or_default() {
            if !p.events.is_closed() {
                self.admit(p.seq, p.request, p.events, p.submitted_at);
            }
        }
    }

    fn finish(&mut self, seq: SeqId, reason: FinishReason) {
        self.release_parked(seq);
        self.constraints.remove(seq);
        let Some(s) = self.seqs.remove(&seq) else {
            return;
        };
        let _ = self.sched.finish(seq);
        let now = Instant::now();
        let first_sched = s.first_scheduled_at.unwrap_or(now);
        let first_tok = s.first_token_at.unwrap_or(now);
        let timings = Timings {
            queue: first_sched - s.submitted_at,
            prefill: first_tok.saturating_duration_since(first_sched),
            ttft: first_tok - s.submitted_at,
            decode: now.saturating_duration_since(first_tok),
            total: now - s.submitted_at,
            preemptions: s.preemptions,
        };
        let usage = Usage {
            prompt_tokens: s.prompt_len,
            completion_tokens: s.generated,
            cached_prompt_tokens: s.cached_prompt_tokens,
        };
        let _ = s.events.send(EngineEvent::Finished {
            reason,
            usage,
            timings,
        });
        self.refresh_gauges();
    }

    fn fail(&mut self, seq: SeqId, err: EngineError) {
        self.release_parked(seq);
        self.constraints.remove(seq);
        if let Some(s) = self.seqs.remove(&seq) {
            let _ = self.sched.finish(seq);
            let _ = s.events.send(EngineEvent::Error(err));
        }
    }

    fn refresh_gauges(&mut self) {
        let g = self.sched.stats();
        for lane in Lane::ALL {
            let l = self.stats.lane_mut(lane);
            l.running = g.running[lane];
            l.waiting = g.waiting[lane];
            l.preemptions_total = g.preemptions[lane];
        }
        self.stats.waiting_tokens = g.waiting_tokens;
        self.stats.prefill_backlog_tokens = g.prefill_backlog_tokens;
        self.stats.kv_blocks_total = g.kv.total;
        self.stats.kv_blocks_used = g.kv.used;
        self.stats.kv_blocks_free = g.kv.free + g.kv.cached_evictable;
        self.stats.prefix_cache_queries = g.kv.prefix_queries;
        self.stats.prefix_cache_hits = g.kv.prefix_hits;
    }
}

/// The rows of chunk `c` that score prompt tokens not scored yet: row
/// `k` (a position) scores token `k + 1`, up to the prompt's last token.
fn score_rows<'a>(
    seqs: &HashMap<SeqId, SeqState>,
    sched: &'a Scheduler,
    c: &ScheduledChunk,
) -> Option<ScoreRows<'a>> {
    let s = seqs.get(&c.seq)?;
    let scored = s.prompt_scores.as_ref()?.len();
    let top = s.params.prompt_logprobs?;
    let tokens = sched.sequence(c.seq)?.tokens();
    let from = c.start.max(scored);
    let to = (c.start + c.len).min(s.prompt_len.saturating_sub(1));
    // A chunk that starts past the scored rows would leave a gap; the
    // scheduler never serves such a sequence from the prefix cache.
    (from == scored && from < to).then(|| ScoreRows {
        first: from - c.start,
        next: &tokens[from + 1..=to],
        top,
    })
}

/// The prefix-cache hash chain is seeded by the model's identity, so blocks of
/// one revision can never satisfy a lookup for another.
fn revision_salt(sha256_hex: &str) -> [u8; 32] {
    let mut salt = [0u8; 32];
    if let Ok(bytes) = hex::decode(sha256_hex) {
        for (dst, src) in salt.iter_mut().zip(bytes) {
            *dst = src;
        }
    }
    salt
}

/// A grammar that fails while decoding (no token can continue the output,
/// a lexer past its limits) fails its request with the response format's
/// typed error, as a refusal at submit would have: the grammar is the
/// client's, and the server is fine.
fn grammar_failed(e: String) -> EngineError {
    EngineError::Invalid(crate::ValidationError::ResponseFormat(
        crate::structured::GrammarError::Decoding(e),
    ))
}
