//! The engine: one thread that owns the model, the KV cache and the scheduler,
//! fed by a closed [`Command`] enum.
//!
//! Callers never touch engine state. [`Engine::submit`] sends a validated
//! request and returns a [`RequestHandle`] whose events arrive on a channel;
//! dropping the handle sends `Cancel`, and the loop frees the sequence's KV
//! blocks before its next step. Everything mutable (scheduler, block manager,
//! KV memory, per-sequence sampling state) lives on the engine thread, so none
//! of it needs a lock.

mod core;
pub mod events;
mod masks;
mod rate;
pub mod stats;
pub mod step_stats;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::mpsc as tmpsc;

use crate::error::{EngineError, ModelError, ValidationError};
use crate::ids::{Lane, SeqId, TenantId};
use crate::model::Model;
pub use crate::model::row_order::AttentionOrder;
use crate::request::{RequestLimits, SamplingParams, ValidRequest};

pub use events::{EngineEvent, FinishReason, Timings, Usage};
pub use stats::{EngineStats, LaneStats};

/// Knobs of the engine. Defaults suit the small CPU model in CI.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Bytes of memory planned for the KV cache.
    pub kv_cache_bytes: usize,
    /// Share of `kv_cache_bytes` never planned (0..1).
    pub kv_headroom: f32,
    /// Running sequences at once.
    pub max_num_seqs: usize,
    /// Tokens computed per step (decode tokens plus prefill chunks).
    pub max_batched_tokens: usize,
    pub max_waiting_requests: usize,
    pub max_waiting_tokens: usize,
    /// Share of blocks and sequence slots reserved for the interactive lane.
    pub interactive_reserve_share: f32,
    pub enable_prefix_caching: bool,
    /// Worker threads for the forward pass; 0 means one per core.
    pub threads: usize,
    /// Most tokens the batch lane computes per step (0: no cap).
    pub batch_max_step_tokens: usize,
    /// The batch lane pauses while interactive work waits or prefills.
    pub batch_yields_to_prefill: bool,
    /// Whose summation order attention follows (`model::row_order`).
    pub attention_order: AttentionOrder,
    /// The step planner's latency targets (`scheduler::step`).
    pub planner: crate::scheduler::PlannerConfig,
    /// Token-weighted fair share between the tenants of a lane
    /// (`scheduler::fair`); off: tenants take turns one request at a time.
    pub fair_share: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            kv_cache_bytes: 512 << 20,
            kv_headroom: 0.1,
            max_num_seqs: 64,
            max_batched_tokens: 512,
            max_waiting_requests: 1024,
            max_waiting_tokens: 1 << 20,
            interactive_reserve_share: 0.25,
            enable_prefix_caching: true,
            threads: 0,
            batch_max_step_tokens: 32,
            batch_yields_to_prefill: true,
            attention_order: AttentionOrder::Position,
            planner: crate::scheduler::PlannerConfig::default(),
            fair_share: true,
        }
    }
}

/// Messages into the engine thread. Closed: nothing else can reach its state.
pub(crate) enum Command {
    Submit {
        seq: SeqId,
        request: ValidRequest,
        events: tmpsc::UnboundedSender<EngineEvent>,
        submitted_at: Instant,
        /// A sibling choice waits for this sequence's prompt to be computed
        /// and then takes its KV blocks from the prefix cache.
        after: Option<SeqId>,
    },
    Cancel(SeqId),
    /// Test hook: preempt a running sequence as if memory ran out.
    Preempt(SeqId),
    /// New step-planner targets (a capacity profile came into force).
    SetPlanner(crate::scheduler::PlannerConfig),
    /// Drops what the steps so far measured (see [`Forget`]; the warm-up
    /// sends it); the sender hears once the published stats show it.
    ForgetSpeed(Forget, std::sync::mpsc::Sender<()>),
    Shutdown,
}

struct Shared {
    stats: Mutex<EngineStats>,
    alive: AtomicBool,
}

/// Static facts about the loaded model, readable without the engine thread.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    pub identity: crate::model::ModelIdentity,
    pub context_window: usize,
    pub vocab_size: usize,
    pub num_kv_blocks: usize,
    /// The model's own sampling defaults (a directory's generation config).
    pub generation: crate::model::GenerationDefaults,
}

pub struct Engine {
    tx: mpsc::Sender<Command>,
    shared: Arc<Shared>,
    next_seq: AtomicU64,
    thread: Option<JoinHandle<()>>,
    info: ModelInfo,
    tokenizer: crate::tokenizer::ModelTokenizer,
    chat_template: crate::chat_template::ChatTemplate,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("info", &self.info).finish()
    }
}

impl Engine {
    /// Starts the engine thread over a loaded model.
    pub fn start(model: Model, config: EngineConfig) -> Result<Self, ModelError> {
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            stats: Mutex::new(EngineStats::default()),
            alive: AtomicBool::new(true),
        });
        let tokenizer = model.tokenizer.clone();
        let chat_template = model.chat_template.clone();
        // The grammar compiler's token trie, built in the background so the
        // first structured request does not wait for it (it blocks on the
        // same cell if it comes first).
        let t = tokenizer.clone();
        let _ = std::thread::Builder::new()
            .name("stoker-grammars".into())
            .spawn(move || {
                let started = Instant::now();
                match t.grammars() {
                    Ok(_) => tracing::debug!(
                        ms = started.elapsed().as_millis() as u64,
                        "grammar vocabulary ready"
                    ),
                    Err(e) => tracing::warn!(error = %e, "structured outputs unavailable"),
                }
            });
        let mut core = core::EngineCore::new(model, &config)?;
        let info = core.info();
        *shared.stats.lock().unwrap() = core.stats();
        let threads = if config.threads == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            config.threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("stoker-compute-{i}"))
            .build()
            .map_err(|e| ModelError::Config(e.to_string()))?;
        let shared2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name("stoker-engine".into())
            .spawn(move || {
                pool.install(|| core.run(rx, &shared2.stats));
                shared2.alive.store(false, Ordering::SeqCst);
            })
            .map_err(|e| ModelError::Config(e.to_string()))?;
        Ok(Engine {
            tx,
            shared,
            next_seq: AtomicU64::new(1),
            thread: Some(thread),
            info,
            tokenizer,
            chat_template,
        })
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn tokenizer(&self) -> &crate::tokenizer::ModelTokenizer {
        &self.tokenizer
    }

    pub fn chat_template(&self) -> &crate::chat_template::ChatTemplate {
        &self.chat_template
    }

    /// Limits from the model alone; deployments narrow them.
    pub fn model_limits(&self) -> RequestLimits {
        RequestLimits {
            context_window: self.info.context_window,
            max_input_tokens: self.info.context_window,
            max_output_tokens: self.info.context_window,
            vocab_size: self.info.vocab_size,
        }
    }

    pub fn stats(&self) -> EngineStats {
        self.shared.stats.lock().unwrap().clone()
    }

    pub fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }

    /// Hands a validated request to the engine. Refusals that depend on the
    /// engine's state (queue full, cannot fit) arrive as the first event.
    pub fn submit(&self, request: ValidRequest) -> Result<RequestHandle, EngineError> {
        let mut handles = self.submit_n(request, 1)?;
        Ok(handles.remove(0))
    }

    /// Submits `n` choices of one request (OpenAI's `n`), each with its own
    /// seed ([`ValidRequest::choice`]). The prompt is computed once: the
    /// siblings wait for the first choice's prefill and take its blocks from
    /// the prefix cache (all but a last partial block).
    pub fn submit_n(
        &self,
        mut request: ValidRequest,
        n: usize,
    ) -> Result<Vec<RequestHandle>, EngineError> {
        if request.needs_constraint() {
            // Compiled here, on the caller's thread, never on the engine's.
            let grammars = self.tokenizer.grammars().map_err(ValidationError::from)?;
            request.compile_constraint(grammars)?;
        }
        let mut handles = Vec::with_capacity(n);
        let mut leader = None;
        for i in 0..n.max(1) {
            let seq = SeqId(self.next_seq.fetch_add(1, Ordering::Relaxed));
            let (events_tx, events_rx) = tmpsc::unbounded_channel();
            let request = if i == 0 {
                request.clone()
            } else {
                request.choice(i as u64)
            };
            self.tx
                .send(Command::Submit {
                    seq,
                    request,
                    events: events_tx,
                    submitted_at: Instant::now(),
                    after: leader,
                })
                .map_err(|_| EngineError::Stopped("engine thread has exited".into()))?;
            leader = leader.or(Some(seq));
            handles.push(self.handle(seq, events_rx));
        }
        Ok(handles)
    }

    fn handle(
        &self,
        seq: SeqId,
        events_rx: tmpsc::UnboundedReceiver<EngineEvent>,
    ) -> RequestHandle {
        RequestHandle {
            seq,
            events: events_rx,
            cancel: self.tx.clone(),
            done: false,
        }
    }

    /// Puts new step-planner targets in force from the next step. Targets the
    /// scheduler refuses (see `PlannerConfig`) are logged and ignored.
    pub fn set_planner(&self, planner: crate::scheduler::PlannerConfig) {
        let _ = self.tx.send(Command::SetPlanner(planner));
    }

    /// Test hook: preempts a running sequence (recompute) as memory pressure would.
    pub fn preempt_for_test(&self, seq: SeqId) {
        let _ = self.tx.send(Command::Preempt(seq));
    }

    /// Runs one short greedy generation end to end, then calibration
    /// prompts until two in a row agree; readiness waits on all of them.
    ///
    /// The first generation's steps paid for first touches of the weights and
    /// its one-token prompt is all fixed cost, so they are forgotten. A
    /// calibration prompt ([`CALIBRATION_TOKENS`]) is then prefilled on warm
    /// weights, and the prefill rate and step-cost model it measured are kept:
    /// a fresh server otherwise estimates its first burst from the cost
    /// model's prior, which a machine twice as slow as the prior's makes
    /// admit twice what it can start within the objective. Its step time is
    /// forgotten (a long prefill step is not a decode step).
    ///
    /// One sample is not enough: a prefill that met a busy moment of the
    /// machine (548 prompt tokens a second, where a quiet warm-up measured
    /// about 860) made a server refuse 81 of 96 requests at 16 clients. So
    /// each sample replaces the one before, and the warm-up stops once two
    /// in a row agree within [`CALIBRATION_AGREEMENT`] (at most one sample
    /// per text of [`CALIBRATION_TEXTS`], each prose of its own so that none
    /// is a prefix-cache hit).
    pub fn warm_up(&self) -> Result<(), EngineError> {
        let hello = self
            .tokenizer
            .encode("Hello")
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        self.generate_quietly(hello, 2)?;
        self.forget(Forget::Everything);
        let mut last: Option<f64> = None;
        for text in CALIBRATION_TEXTS {
            let Some(prompt) = self.calibration_prompt(text)? else {
                break;
            };
            if last.is_some() {
                self.forget(Forget::Everything);
            }
            self.generate_quietly(prompt, 1)?;
            // Publishes the sample's stats before they are read.
            self.forget(Forget::StepTime);
            let rate = self.stats().prefill_tokens_per_second_ewma;
            if let Some(prev) = last.filter(|&p| p > 0.0 && rate > 0.0) {
                let ratio = rate.max(prev) / rate.min(prev);
                if ratio <= CALIBRATION_AGREEMENT {
                    tracing::debug!(rate, prev, "calibration settled");
                    return Ok(());
                }
                tracing::info!(rate, prev, "calibration samples disagree; sampling again");
            }
            last = Some(rate);
        }
        if last.is_some() {
            tracing::warn!(
                rate = last,
                "calibration did not settle; admission starts from the last sample"
            );
        }
        Ok(())
    }

    /// A greedy generation on the interactive lane whose output is dropped.
    fn generate_quietly(&self, prompt: Vec<u32>, max_tokens: usize) -> Result<(), EngineError> {
        let req = ValidRequest::new(
            prompt,
            SamplingParams::greedy(max_tokens),
            Lane::Interactive,
            TenantId::default(),
            &self.model_limits(),
        )?;
        let mut h = self.submit(req)?;
        match h.collect_blocking().error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `text` repeated to [`CALIBRATION_TOKENS`] tokens, or as long as the
    /// context allows beside one output token; None when the context is too
    /// short to measure anything.
    fn calibration_prompt(&self, text: &str) -> Result<Option<Vec<u32>>, EngineError> {
        let len = CALIBRATION_TOKENS.min(self.info.context_window.saturating_sub(2));
        if len < 16 {
            return Ok(None);
        }
        let text = text.repeat(len / 8 + 1);
        let mut ids = self
            .tokenizer
            .encode(&text)
            .map_err(|e| EngineError::Internal(e.to_string()))?;
        ids.truncate(len);
        Ok((ids.len() >= 16).then_some(ids))
    }

    /// Drops what the steps so far measured; returns once the published
    /// stats show it.
    fn forget(&self, what: Forget) {
        let (done, forgotten) = std::sync::mpsc::channel();
        if self.tx.send(Command::ForgetSpeed(what, done)).is_ok() {
            let _ = forgotten.recv();
        }
    }
}

/// Prompt tokens of the warm-up's calibration prefill: above the prefill
/// rate's publication floor (`rate::MIN_PREFILL_TOKENS`) however the planner
/// chunks it, and a fraction of a second on a slow CPU.
pub const CALIBRATION_TOKENS: usize = 160;

/// The calibration samples' prose, one text per sample: distinct from the
/// first token on, so no sample reuses another's cached prefix.
const CALIBRATION_TEXTS: [&str; 4] = [
    "The river runs past the old mill and under the stone bridge. ",
    "Every morning the baker opens her shop before the sun is up. ",
    "A small boat drifts across the lake while the gulls call overhead. ",
    "On the hill above town stands a lighthouse that no ship needs now. ",
];

/// How far apart two calibration samples' prefill rates may be (the faster
/// over the slower) and still be taken as the machine's speed.
const CALIBRATION_AGREEMENT: f64 = 1.25;

/// What [`Command::ForgetSpeed`] drops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Forget {
    /// The step time, the token rates and the step-cost model.
    Everything,
    /// The step time and the overall and decode rates; the prefill rate and
    /// the step-cost model stand.
    StepTime,
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How a handle cancels its request: through this engine's command channel,
/// or through whatever another process's transport gave it.
/// The caller's side of one request. Dropping it cancels the request.
pub struct RequestHandle {
    seq: SeqId,
    events: tmpsc::UnboundedReceiver<EngineEvent>,
    /// Where `cancel` goes: the engine thread's command queue.
    cancel: mpsc::Sender<Command>,
    done: bool,
}

impl std::fmt::Debug for RequestHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestHandle")
            .field("seq", &self.seq)
            .finish()
    }
}

/// Everything a request produced, gathered by [`RequestHandle::collect_blocking`].
#[derive(Clone, Debug, Default)]
pub struct Collected {
    pub text: String,
    pub token_ids: Vec<u32>,
    /// One per token id when the request asked for log probabilities.
    pub logprobs: Vec<crate::TokenLogprob>,
    /// The prompt's scores, when the request asked for them.
    pub prompt_logprobs: Option<Vec<crate::TokenLogprob>>,
    pub finish: Option<FinishReason>,
    pub usage: Usage,
    pub timings: Timings,
    pub error: Option<EngineError>,
}

impl RequestHandle {
    pub fn seq(&self) -> SeqId {
        self.seq
    }

    /// Next event, or `None` once the request has ended.
    pub async fn next(&mut self) -> Option<EngineEvent> {
        if self.done {
            return None;
        }
        let ev = self.events.recv().await;
        self.note(&ev);
        ev
    }

    /// Next `Delta`, `Finished` or `Error`, skipping `Started` and
    /// `PromptLogprobs`.
    pub fn next_output_blocking(&mut self) -> Option<EngineEvent> {
        loop {
            match self.next_blocking() {
                Some(EngineEvent::Started { .. } | EngineEvent::PromptLogprobs(_)) => continue,
                other => return other,
            }
        }
    }

    /// Blocking variant for synchronous callers (tests, benchmarks, CLI).
    pub fn next_blocking(&mut self) -> Option<EngineEvent> {
        if self.done {
            return None;
        }
        let ev = self.events.blocking_recv();
        self.note(&ev);
        ev
    }

    fn note(&mut self, ev: &Option<EngineEvent>) {
        if matches!(
            ev,
            None | Some(EngineEvent::Finished { .. }) | Some(EngineEvent::Error(_))
        ) {
            self.done = true;
        }
    }

    /// Cancels now; the handle then reports `Finished { Cancelled }`.
    pub fn cancel(&self) {
        let _ = self.cancel.send(Command::Cancel(self.seq));
    }

    pub fn collect_blocking(&mut self) -> Collected {
        let mut c = Collected::default();
        while let Some(ev) = self.next_blocking() {
            match ev {
                EngineEvent::Delta {
                    text,
                    token_ids,
                    logprobs,
                } => {
                    c.text.push_str(&text);
                    c.token_ids.extend(token_ids);
                    c.logprobs.extend(logprobs);
                }
                EngineEvent::Finished {
                    reason,
                    usage,
                    timings,
                } => {
                    c.finish = Some(reason);
                    c.usage = usage;
                    c.timings = timings;
                }
                EngineEvent::Error(e) => c.error = Some(e),
                EngineEvent::PromptLogprobs(p) => c.prompt_logprobs = Some(p),
                EngineEvent::Started { .. } => {}
            }
        }
        c
    }
}

impl Drop for RequestHandle {
    fn drop(&mut self) {
        if !self.done {
            self.cancel();
        }
    }
}
