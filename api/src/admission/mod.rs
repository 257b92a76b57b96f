//! Admission at the edge: refuse before any model work when the server cannot
//! take the request in reasonable time.
//!
//! The API counts what it has handed to the engine: requests waiting (not yet
//! scheduled) and running, and the tokens of the waiting ones. A request is
//! refused with `server_overloaded` when the running slots plus the waiting
//! queue are full, when the waiting tokens would pass their bound, or when the
//! prompts already waiting plus this one need more KV blocks than are free.
//! It is refused with `server_overloaded` too when its estimated time to
//! first token ([`estimate`]) passes the server's objective
//! (`admission.max_ttft_ms`) while something is ahead of it, and with
//! `deadline_infeasible` when the estimate passes the client's
//! `x-stoker-deadline-ms`. `Retry-After` is the time the measured drain rate
//! needs to make room, or the estimate's excess over the objective.
//!
//! When a capacity profile was recorded for the served revision (see
//! [`crate::admission::envelope`]), its envelope bounds the outstanding requests and
//! their active tokens too, and its measured rates stand in for live rates
//! until the server has measured its own.
//!
//! The counters live behind one short mutex; a [`Ticket`] returns its share in
//! `Drop`, so a cancelled or failed request can never leak capacity.

pub mod envelope;
pub mod estimate;
pub mod share;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use stoker_executor::BLOCK_SIZE;
use stoker_executor::engine::EngineStats;

use crate::admission::envelope::{EnvelopeLimits, OutOfEnvelope};
use crate::admission::estimate::{QueueView, Speed, TtftEstimate};
pub use crate::admission::share::TenantKey;
use crate::admission::share::{Ahead, Tenants};
use crate::error::{ApiError, RetryAfter};

#[derive(Clone, Copy, Debug)]
pub struct AdmissionLimits {
    pub max_num_seqs: usize,
    pub max_waiting_requests: usize,
    pub max_waiting_tokens: usize,
    pub max_retry_after: Duration,
    /// A request whose prompt or output passes this many times the profile's
    /// p95 counts as out of envelope.
    pub out_of_envelope_factor: f64,
    /// The time-to-first-token objective an admitted request must be
    /// estimated to meet when anything is ahead of it; `None` turns it off.
    pub max_ttft: Option<Duration>,
}

#[derive(Debug, Default)]
struct Inner {
    waiting: usize,
    waiting_tokens: usize,
    waiting_prompt_tokens: usize,
    running: usize,
    running_prompt_tokens: usize,
    /// Prompt tokens of running requests that have no first token yet:
    /// the engine admitted them, and their prefill still stands ahead of
    /// any request arriving now (a burst fills every slot at once, and the
    /// last of those waits for all their prefills).
    prefilling_prompt_tokens: usize,
    /// Prompt + max_tokens of every outstanding request, waiting or running.
    active_tokens: usize,
    /// Smoothed output tokens of the requests that finished.
    output_tokens_ewma: Option<f64>,
    /// How much longer than estimated requests waited for their first
    /// token, as a high quantile of actual / estimated (see
    /// [`Inner::calibrate`]); 0 until the first observation, read as
    /// [`UNMEASURED_FACTOR`].
    calibration: f64,
    /// Recent finish times, for the drain rate.
    finishes: VecDeque<Instant>,
    /// The envelope in force, if a profile was recorded for this revision.
    profile: Option<Arc<EnvelopeLimits>>,
    /// Each tenant's part of the counters above (see [`share`]).
    tenants: Tenants,
    /// When the last refused request was told to come back (see
    /// [`Admission::spread`]).
    retry_slot: Option<Instant>,
}

const RATE_WINDOW: Duration = Duration::from_secs(30);
const RATE_SAMPLES: usize = 256;

impl Inner {
    /// Requests finished per second over the recent window; 0 when unknown.
    fn drain_rate(&mut self, now: Instant) -> f64 {
        while let Some(&t) = self.finishes.front() {
            if now.duration_since(t) > RATE_WINDOW {
                self.finishes.pop_front();
            } else {
                break;
            }
        }
        let Some(&first) = self.finishes.front() else {
            return 0.0;
        };
        let span = now.duration_since(first).as_secs_f64().max(0.05);
        self.finishes.len() as f64 / span
    }

    /// The queue as a request sees it that has `ahead` waiting before it.
    fn queue_view(&mut self, max_num_seqs: usize, ahead: Ahead, now: Instant) -> QueueView {
        QueueView {
            max_num_seqs,
            running: self.running,
            waiting: ahead.waiting,
            waiting_prompt_tokens: ahead.prefill_tokens,
            running_prompt_tokens: self.running_prompt_tokens,
            outstanding_max_tokens: self
                .active_tokens
                .saturating_sub(self.waiting_prompt_tokens + self.running_prompt_tokens),
            recent_output_tokens: self.output_tokens_ewma,
            drain_rps: self.drain_rate(now),
        }
    }
}

/// Weight of a finished request's output in the smoothed mean.
const OUTPUT_EWMA: f64 = 0.1;

/// Estimated waits shorter than this teach calibration nothing (a few
/// milliseconds of scheduling noise would read as a large ratio).
const CALIBRATE_FROM: Duration = Duration::from_millis(200);
/// The calibration factor stays within these bounds.
const CALIBRATION: (f64, f64) = (0.5, 4.0);
/// The factor before any request was measured: a fresh server's estimate
/// runs on the step-cost model's prior and has nothing to check it against,
/// and a burst on a fresh server admits its whole first wave on it, so it is
/// read as late rather than early until the first first token says.
pub const UNMEASURED_FACTOR: f64 = 1.5;
/// Steps toward a ratio above and below the factor (see [`Inner::calibrate`]).
const CALIBRATE_UP: f64 = 0.25;
const CALIBRATE_DOWN: f64 = 0.0025;

impl Inner {
    /// The factor estimates are scaled by now.
    fn factor(&self) -> f64 {
        if self.calibration > 0.0 {
            self.calibration
        } else {
            UNMEASURED_FACTOR
        }
    }

    /// Learns from a request whose first token came `actual` after its
    /// admission where the uncalibrated estimate said `estimated`: the
    /// factor moves up fast and down slowly (steps of 0.25 and 0.0025 of the
    /// gap), so it settles high in the ratio's spread (1.41 for ratios even
    /// over 0.5-1.5) and the objective holds for the tail of admitted
    /// requests. Down steps of 0.01 and 0.005 left `overload-16x`'s accepted
    /// TTFT p99 past the objective in some runs (BENCHMARKS.md). The first
    /// observation replaces the unmeasured factor outright.
    fn calibrate(&mut self, estimated: Duration, actual: Duration) {
        if estimated < CALIBRATE_FROM {
            return;
        }
        let ratio =
            (actual.as_secs_f64() / estimated.as_secs_f64()).clamp(CALIBRATION.0, CALIBRATION.1);
        if self.calibration <= 0.0 {
            self.calibration = ratio;
            return;
        }
        let c = self.calibration;
        let step = if ratio > c {
            CALIBRATE_UP
        } else {
            CALIBRATE_DOWN
        };
        self.calibration = (c + step * (ratio - c)).clamp(CALIBRATION.0, CALIBRATION.1);
    }
}

#[derive(Debug)]
pub struct Admission {
    limits: AdmissionLimits,
    inner: Mutex<Inner>,
}

/// What the admission decision needs to know about a request.
#[derive(Clone, Debug)]
pub struct Demand {
    pub prompt_tokens: usize,
    pub max_tokens: usize,
    pub deadline: Option<Duration>,
    /// Whose request: the queue ahead of it and its part of each limit
    /// follow the tenants' weights (see [`share`]).
    pub tenant: TenantKey,
}

/// Counters as seen by the edge, for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AdmissionSnapshot {
    pub waiting: usize,
    pub waiting_tokens: usize,
    pub running: usize,
    pub active_tokens: usize,
}

/// What admission enforces now and where each figure comes from, for
/// `GET /admin/v1/admission`.
#[derive(Clone, Debug, Serialize)]
pub struct AdmissionReport {
    /// `profile` when a capacity profile bounds admission, else `static`.
    pub source: &'static str,
    pub profile: Option<EnvelopeLimits>,
    /// Requests running plus waiting that are admitted at most.
    pub max_outstanding: usize,
    /// Prompt + max_tokens of outstanding requests, when a profile bounds it.
    pub max_active_tokens: Option<usize>,
    pub max_waiting_tokens: usize,
    pub running: usize,
    pub waiting: usize,
    pub active_tokens: usize,
    /// Requests finished per second over the last 30 s.
    pub drain_rate_rps: f64,
    /// Where the deadline estimate's prefill rate comes from: `live`,
    /// `profile` or `none`.
    pub prefill_rate_source: &'static str,
    pub prefill_tok_s: Option<f64>,
    /// The time-to-first-token objective (`admission.max_ttft_ms`); `null`
    /// when off.
    pub max_ttft_ms: Option<u64>,
    /// The estimated time to first token of a 1-token prompt arriving now.
    pub ttft_estimate_ms: u64,
    /// The factor the estimate's wait is scaled by, learned from how long
    /// admitted requests actually waited (1 before any was measured).
    pub ttft_estimate_calibration: f64,
    /// The engine's step planner: the latency targets it packs steps to.
    pub planner: PlannerReport,
}

/// The step planner's targets and its step-cost model, as the engine last
/// published them (in front of remote executors: the defaults, with no
/// observations; each executor plans its own steps).
#[derive(Clone, Debug, Serialize)]
pub struct PlannerReport {
    /// `absolute` (`engine.itl_target_ms`), `relative` (a factor of the
    /// interactive decodes' own predicted cost) or `off` (tokens only).
    pub interactive_itl_mode: &'static str,
    pub interactive_itl_target_ms: Option<f64>,
    pub interactive_itl_factor: Option<f64>,
    /// The limit the last step packed interactive prefills to; `null` when
    /// no interactive sequence was decoding in it.
    pub interactive_itl_in_force_ms: Option<f64>,
    pub batch_step_target_ms: Option<f64>,
    /// The limit on a step of batch work alone while chat is about.
    pub batch_step_beside_chat_ms: Option<f64>,
    /// The limit the last step packed batch work to.
    pub batch_limit_in_force_ms: Option<f64>,
    pub min_prefill_chunk: usize,
    /// The online step-cost model: predicted ms = fixed + per token ×
    /// tokens + per sampled row × rows + per 1k attention pairs × pairs /
    /// 1000, with its smoothed relative error on recent steps.
    pub step_cost: stoker_executor::scheduler::CostSnapshot,
}

impl PlannerReport {
    fn of(p: &stoker_executor::scheduler::PlannerSnapshot) -> Self {
        let c = &p.config;
        let positive = |v: f64| (v > 0.0).then_some(v);
        PlannerReport {
            interactive_itl_mode: if c.interactive_itl_ms > 0.0 {
                "absolute"
            } else if c.interactive_itl_factor > 0.0 {
                "relative"
            } else {
                "off"
            },
            interactive_itl_target_ms: positive(c.interactive_itl_ms),
            interactive_itl_factor: positive(c.interactive_itl_factor),
            interactive_itl_in_force_ms: p.last.interactive_ms,
            batch_step_target_ms: positive(c.batch_step_ms),
            batch_step_beside_chat_ms: positive(c.batch_step_beside_chat_ms),
            batch_limit_in_force_ms: p.last.batch_ms,
            min_prefill_chunk: c.min_prefill_chunk,
            step_cost: p.cost,
        }
    }
}

impl Admission {
    pub fn new(limits: AdmissionLimits) -> Arc<Self> {
        Arc::new(Admission {
            limits,
            inner: Mutex::new(Inner::default()),
        })
    }

    pub fn snapshot(&self) -> AdmissionSnapshot {
        let g = self.inner.lock().unwrap();
        AdmissionSnapshot {
            waiting: g.waiting,
            waiting_tokens: g.waiting_tokens,
            running: g.running,
            active_tokens: g.active_tokens,
        }
    }

    /// Puts a capacity profile's envelope in force, or (with `None`) goes
    /// back to the static limits. Requests already admitted keep their share.
    pub fn set_profile(&self, p: Option<EnvelopeLimits>) {
        let mut g = self.inner.lock().unwrap();
        if g.profile.as_deref() != p.as_ref() {
            match &p {
                Some(p) => tracing::info!(
                    deployment = %p.deployment_id,
                    revision = %p.revision_id,
                    workload = %p.workload,
                    concurrency = p.concurrency,
                    active_tokens = p.active_tokens,
                    "admission follows the capacity profile"
                ),
                None => tracing::info!("admission follows the static limits"),
            }
            g.profile = p.map(Arc::new);
        }
    }

    /// Whether this request lies outside the profile's measured workload.
    pub fn out_of_envelope(&self, d: &Demand) -> Option<OutOfEnvelope> {
        let profile = self.inner.lock().unwrap().profile.clone()?;
        profile.classify(
            d.prompt_tokens,
            d.max_tokens,
            self.limits.out_of_envelope_factor,
        )
    }

    /// The limits in force and the live counters.
    pub fn report(&self, engine: &EngineStats) -> AdmissionReport {
        let mut g = self.inner.lock().unwrap();
        let drain_rate_rps = g.drain_rate(Instant::now());
        let l = &self.limits;
        let profile = g.profile.as_deref().cloned();
        let (prefill_rate_source, prefill_tok_s) = prefill_rate(engine, profile.as_ref());
        let whole = Ahead {
            waiting: g.waiting,
            waiting_prompt_tokens: g.waiting_prompt_tokens,
            waiting_tokens: g.waiting_tokens,
            prefill_tokens: g.waiting_prompt_tokens + g.prefilling_prompt_tokens,
        };
        let ttft = estimate::estimate(
            &g.queue_view(l.max_num_seqs, whole, Instant::now()),
            &speed(engine, profile.as_ref()),
            1,
        )
        .calibrated(g.factor());
        AdmissionReport {
            source: if profile.is_some() {
                "profile"
            } else {
                "static"
            },
            max_outstanding: max_outstanding(l, profile.as_ref()),
            max_active_tokens: profile.as_ref().map(|p| p.active_tokens),
            max_waiting_tokens: l.max_waiting_tokens,
            running: g.running,
            waiting: g.waiting,
            active_tokens: g.active_tokens,
            drain_rate_rps,
            prefill_rate_source,
            prefill_tok_s,
            max_ttft_ms: l.max_ttft.map(|d| d.as_millis() as u64),
            ttft_estimate_ms: ttft.total().as_millis() as u64,
            ttft_estimate_calibration: g.factor(),
            profile,
            planner: PlannerReport::of(&engine.planner),
        }
    }

    /// A retry hint for refusals that do not come from a full queue (engine
    /// refusals, not ready): the time to finish one request at the measured rate.
    pub fn retry_hint(&self) -> RetryAfter {
        let mut g = self.inner.lock().unwrap();
        let rate = g.drain_rate(Instant::now());
        self.clamp(if rate > 0.0 {
            Duration::from_secs_f64(1.0 / rate)
        } else {
            Duration::from_secs(1)
        })
    }

    /// The `Retry-After` of an overload refusal: at least `base` (when this
    /// request would fit, were nothing else to arrive), and after the
    /// requests refused before it, spaced at the measured drain rate. Every
    /// refused client told the same short wait comes back at the same
    /// moment and meets the same full queue (in a burst of 256 clients, 21
    /// of 3,076 retries got in); spaced, each retry comes when a request has
    /// finished since the one before it. Capped at `max_retry_after`.
    fn spread(&self, g: &mut Inner, base: Duration, rate: f64, now: Instant) -> RetryAfter {
        let gap = if rate > 0.0 {
            Duration::from_secs_f64((1.0 / rate).min(60.0))
        } else {
            Duration::from_secs(1)
        };
        let slot = g.retry_slot.filter(|s| *s > now).unwrap_or(now);
        let at = slot.max(now + base);
        let after = self.clamp(at - now);
        g.retry_slot = Some(now + after.0 + gap);
        after
    }

    fn clamp(&self, d: Duration) -> RetryAfter {
        RetryAfter(d.clamp(Duration::from_millis(100), self.limits.max_retry_after))
    }

    /// Admits the request or refuses it with a typed error and a Retry-After
    /// from the measured drain rate.
    pub fn admit(self: &Arc<Self>, d: Demand, engine: &EngineStats) -> Result<Ticket, ApiError> {
        let now = Instant::now();
        let mut g = self.inner.lock().unwrap();
        let (raw, ttft) = self.check(&mut g, &d, engine, now)?;
        let tokens = d.prompt_tokens + d.max_tokens;
        g.waiting += 1;
        g.waiting_tokens += tokens;
        g.waiting_prompt_tokens += d.prompt_tokens;
        g.active_tokens += tokens;
        g.tenants.update(&d.tenant, |c| {
            c.waiting += 1;
            c.waiting_tokens += tokens;
            c.waiting_prompt_tokens += d.prompt_tokens;
            c.prefill_tokens += d.prompt_tokens;
            c.outstanding += 1;
            c.active_tokens += tokens;
        });
        Ok(Ticket {
            adm: self.clone(),
            tenant: d.tenant,
            tokens,
            prompt_tokens: d.prompt_tokens,
            state: TicketState::Waiting,
            prefilled: false,
            generated: None,
            admitted_at: now,
            raw_ttft: raw.total(),
            estimated_ttft: ttft.total(),
        })
    }

    /// Refuses at once what any request would be refused now (the queue is
    /// full, or the wait ahead passes the objective), before the request is
    /// tokenized: under overload most arrivals are refused, and refusing
    /// them must not take the CPU the admitted ones run on. Every check here
    /// only grows with the request, so what passes may still be refused by
    /// [`Admission::admit`], never the other way round.
    /// A client's deadline is checked first, as `admit` checks it, so the
    /// refusal says `deadline_infeasible` when that is what fails.
    pub fn shed(
        &self,
        engine: &EngineStats,
        tenant: &TenantKey,
        deadline: Option<Duration>,
    ) -> Result<(), ApiError> {
        let empty = Demand {
            prompt_tokens: 0,
            max_tokens: 0,
            deadline,
            tenant: tenant.clone(),
        };
        let mut g = self.inner.lock().unwrap();
        self.check(&mut g, &empty, engine, Instant::now())
            .map(|_| ())
    }

    /// Every admission check; the estimate of the request's wait when it
    /// passes them.
    fn check(
        &self,
        g: &mut Inner,
        d: &Demand,
        engine: &EngineStats,
        now: Instant,
    ) -> Result<(TtftEstimate, TtftEstimate), ApiError> {
        let rate = g.drain_rate(now);
        let tokens = d.prompt_tokens + d.max_tokens;
        let l = &self.limits;
        let profile = g.profile.clone();
        let outstanding = g.waiting + g.running;
        let capacity = max_outstanding(l, profile.as_deref());
        // This tenant's part: a limit full of other tenants' work does not
        // refuse a tenant still within its weighted share of it.
        let own = g.tenants.of(&d.tenant);
        let share = g.tenants.share(&d.tenant);
        let within = |mine: usize, limit: usize| (mine as f64) <= share * limit as f64;
        let ahead = g.tenants.ahead(&d.tenant, d.prompt_tokens, tokens);
        // The output rate to drain by when the engine has measured none yet:
        // the profile's, else nothing known.
        let token_rate = if engine.tokens_per_second_ewma > 0.0 {
            engine.tokens_per_second_ewma
        } else {
            profile.as_ref().map_or(0.0, |p| p.throughput_tok_s)
        };
        // Time for `n` requests to finish at the measured rate, falling back to
        // the engine's token rate over the waiting tokens when no request has
        // finished recently.
        let drain = |n: usize, g: &Inner| -> Duration {
            if rate > 0.0 {
                Duration::from_secs_f64(n as f64 / rate)
            } else if token_rate > 0.0 {
                Duration::from_secs_f64((g.waiting_tokens + tokens) as f64 / token_rate)
            } else {
                Duration::from_secs(1)
            }
        };
        if outstanding >= capacity && !within(own.outstanding + 1, capacity) {
            let excess = outstanding + 1 - capacity;
            let message = match profile.as_deref() {
                Some(p) if p.concurrency <= l.max_num_seqs + l.max_waiting_requests => format!(
                    "the server is at its measured envelope of {} outstanding requests \
                     (capacity profile `{}`; {} running, {} waiting); retry later",
                    p.concurrency, p.workload, g.running, g.waiting
                ),
                _ => format!(
                    "the server is at capacity ({} running, {} waiting); retry later",
                    g.running, g.waiting
                ),
            };
            return Err(ApiError::Overloaded {
                message,
                retry_after: {
                    let base = drain(excess, g);
                    self.spread(g, base, rate, now)
                },
            });
        }
        if let Some(p) = profile.as_deref()
            && outstanding > 0
            && g.active_tokens + tokens > p.active_tokens
            && !within(own.active_tokens + tokens, p.active_tokens)
        {
            return Err(ApiError::Overloaded {
                message: format!(
                    "outstanding requests hold {} tokens; this request's {} would pass the \
                     measured envelope of {} (capacity profile `{}`); retry later",
                    g.active_tokens, tokens, p.active_tokens, p.workload
                ),
                retry_after: {
                    let base = drain(outstanding.max(1), g);
                    self.spread(g, base, rate, now)
                },
            });
        }
        if g.waiting > 0
            && g.waiting_tokens + tokens > l.max_waiting_tokens
            && !within(own.waiting_tokens + tokens, l.max_waiting_tokens)
        {
            return Err(ApiError::Overloaded {
                message: format!(
                    "the waiting queue holds {} tokens; this request's {} would pass the bound of {}",
                    g.waiting_tokens, tokens, l.max_waiting_tokens
                ),
                retry_after: {
                    let base = drain(g.waiting.max(1), g);
                    self.spread(g, base, rate, now)
                },
            });
        }
        let blocks = |t: usize| t.div_ceil(BLOCK_SIZE);
        // The prompts served before this one must find free blocks, unless
        // other tenants hold more than their share of the outstanding
        // tokens: the engine then takes blocks back from them for this
        // tenant (it preempts the tenant furthest over its share first).
        let preempts_others = g.tenants.others_active(&d.tenant)
            && within(own.active_tokens + tokens, g.active_tokens + tokens);
        if ahead.waiting > 0
            && !preempts_others
            && blocks(ahead.waiting_prompt_tokens) + blocks(d.prompt_tokens) > engine.kv_blocks_free
        {
            return Err(ApiError::Overloaded {
                message: "the KV cache has no headroom for more waiting prompts; retry later"
                    .into(),
                retry_after: {
                    let base = drain(g.waiting.max(1), g);
                    self.spread(g, base, rate, now)
                },
            });
        }
        let raw = estimate::estimate(
            &g.queue_view(l.max_num_seqs, ahead, now),
            &speed(engine, profile.as_deref()),
            d.prompt_tokens,
        );
        let ttft = raw.calibrated(g.factor());
        if let Some(deadline) = d.deadline
            && ttft.total() > deadline
        {
            return Err(ApiError::DeadlineInfeasible {
                message: format!(
                    "estimated queue and prefill time is {} ms, past the deadline of {} ms",
                    ttft.total().as_millis(),
                    deadline.as_millis()
                ),
                retry_after: self.clamp(ttft.total() - deadline),
            });
        }
        if let Some(objective) = l.max_ttft
            && ttft.ahead() > Duration::ZERO
            && ttft.total() > objective
        {
            return Err(ApiError::Overloaded {
                message: objective_message(&ttft, objective, g.running, ahead.waiting),
                retry_after: self.spread(g, ttft.total() - objective, rate, now),
            });
        }
        Ok((raw, ttft))
    }
}

fn objective_message(
    e: &TtftEstimate,
    objective: Duration,
    running: usize,
    waiting: usize,
) -> String {
    format!(
        "the estimated time to first token is {} ms ({} running, {} waiting ahead), past the \
         server's objective of {} ms (admission.max_ttft_ms); retry later",
        e.total().as_millis(),
        running,
        waiting,
        objective.as_millis()
    )
}

/// What the estimate needs of the engine's speed: the prefill rate (see
/// [`prefill_rate`], falling back to the step-cost model's per-token cost),
/// its cost model and its step time.
fn speed(engine: &EngineStats, profile: Option<&EnvelopeLimits>) -> Speed {
    let cost = engine.planner.cost;
    let prefill_tok_s = prefill_rate(engine, profile)
        .1
        .unwrap_or(1000.0 / cost.per_token_ms.max(1e-3));
    Speed {
        prefill_tok_s,
        cost,
        step_time: engine.step_time_ewma,
    }
}

/// Outstanding requests admitted at most: the running slots plus the waiting
/// queue, or the profile's envelope when that is smaller.
fn max_outstanding(l: &AdmissionLimits, profile: Option<&EnvelopeLimits>) -> usize {
    let statics = l.max_num_seqs + l.max_waiting_requests;
    profile.map_or(statics, |p| p.concurrency.min(statics))
}

/// The prefill rate for deadline estimates: the engine's live figure once it
/// has one, else the profile's measured one.
fn prefill_rate(
    engine: &EngineStats,
    profile: Option<&EnvelopeLimits>,
) -> (&'static str, Option<f64>) {
    if engine.prefill_tokens_per_second_ewma > 0.0 {
        ("live", Some(engine.prefill_tokens_per_second_ewma))
    } else if let Some(r) = profile.and_then(|p| p.prefill_tok_s).filter(|r| *r > 0.0) {
        ("profile", Some(r))
    } else {
        ("none", None)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TicketState {
    Waiting,
    Running,
}

/// One admitted request's share of the edge's capacity; returned on drop.
#[derive(Debug)]
pub struct Ticket {
    adm: Arc<Admission>,
    tenant: TenantKey,
    tokens: usize,
    prompt_tokens: usize,
    state: TicketState,
    /// Its first token came: its prompt no longer stands ahead of others.
    prefilled: bool,
    /// Output tokens the request made, once it finished.
    generated: Option<usize>,
    admitted_at: Instant,
    /// The time to first token estimated when it was admitted, before
    /// calibration: what calibration compares the observed one with.
    raw_ttft: Duration,
    /// The same, calibrated: what admission held to the objective.
    estimated_ttft: Duration,
}

impl Ticket {
    /// The time to first token admission estimated for it: what
    /// `x-stoker-ttft-estimate-ms` says and the prediction-ratio histogram
    /// divides by.
    pub fn estimated_ttft(&self) -> Duration {
        self.estimated_ttft
    }

    /// Its first token came (of any choice): its prefill is done.
    pub fn first_token(&mut self) {
        if self.prefilled {
            return;
        }
        self.prefilled = true;
        let mut g = self.adm.inner.lock().unwrap();
        g.calibrate(self.raw_ttft, self.admitted_at.elapsed());
        let prompt = self.prompt_tokens;
        if self.state == TicketState::Running {
            g.prefilling_prompt_tokens -= prompt;
        }
        g.tenants
            .update(&self.tenant, |c| c.prefill_tokens -= prompt);
    }

    /// The request finished with this many output tokens (over its choices):
    /// what the estimate takes as the usual output.
    pub fn finished(&mut self, output_tokens: usize) {
        self.generated = Some(output_tokens);
    }

    /// The engine scheduled the request: it leaves the waiting queue.
    pub fn started(&mut self) {
        if self.state == TicketState::Waiting {
            let mut g = self.adm.inner.lock().unwrap();
            g.waiting -= 1;
            g.waiting_tokens -= self.tokens;
            g.waiting_prompt_tokens -= self.prompt_tokens;
            g.running += 1;
            g.running_prompt_tokens += self.prompt_tokens;
            g.prefilling_prompt_tokens += self.prompt_tokens;
            let (tokens, prompt) = (self.tokens, self.prompt_tokens);
            g.tenants.update(&self.tenant, |c| {
                c.waiting -= 1;
                c.waiting_tokens -= tokens;
                c.waiting_prompt_tokens -= prompt;
            });
            self.state = TicketState::Running;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut g = self.adm.inner.lock().unwrap();
        let (tokens, prompt, waiting, prefilling) = (
            self.tokens,
            self.prompt_tokens,
            self.state == TicketState::Waiting,
            !self.prefilled,
        );
        if prefilling && !waiting {
            g.prefilling_prompt_tokens -= prompt;
        }
        g.tenants.update(&self.tenant, |c| {
            if prefilling {
                c.prefill_tokens -= prompt;
            }
            if waiting {
                c.waiting -= 1;
                c.waiting_tokens -= tokens;
                c.waiting_prompt_tokens -= prompt;
            }
            c.outstanding -= 1;
            c.active_tokens -= tokens;
        });
        match self.state {
            TicketState::Waiting => {
                g.waiting -= 1;
                g.waiting_tokens -= self.tokens;
                g.waiting_prompt_tokens -= self.prompt_tokens;
                g.active_tokens -= self.tokens;
            }
            TicketState::Running => {
                g.running -= 1;
                g.running_prompt_tokens -= self.prompt_tokens;
                g.active_tokens -= self.tokens;
                if let Some(n) = self.generated {
                    let n = n as f64;
                    g.output_tokens_ewma = Some(
                        g.output_tokens_ewma
                            .map_or(n, |m| m * (1.0 - OUTPUT_EWMA) + n * OUTPUT_EWMA),
                    );
                }
                let now = Instant::now();
                g.finishes.push_back(now);
                if g.finishes.len() > RATE_SAMPLES {
                    g.finishes.pop_front();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
