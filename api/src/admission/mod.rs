//! Admission at the edge: refuse before any model work when the server cannot
//! take the request in reasonable time.
//!
//! The API counts what it has handed to the engine: requests waiting (not yet
//! scheduled) and running, and the tokens of the waiting ones. A request is
//! refused with `server_overloaded` when the running slots plus the waiting
//! queue are full, when the waiting tokens would pass their bound, or when the
//! prompts already waiting plus this one need more KV blocks than are free. A
//! request with a deadline is refused with `deadline_infeasible` when the
//! estimated queue + prefill time (from measured rates) cannot meet it.
//! `Retry-After` is the time the measured drain rate needs to make room.
//!
//! When a capacity profile was recorded for the served revision (see
//! [`crate::admission::envelope`]), its envelope bounds the outstanding requests and
//! their active tokens too, and its measured rates stand in for live rates
//! until the server has measured its own.
//!
//! The counters live behind one short mutex; a [`Ticket`] returns its share in
//! `Drop`, so a cancelled or failed request can never leak capacity.

pub mod envelope;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use stoker_executor::BLOCK_SIZE;
use stoker_executor::engine::EngineStats;

use crate::admission::envelope::{EnvelopeLimits, OutOfEnvelope};
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
}

#[derive(Debug, Default)]
struct Inner {
    waiting: usize,
    waiting_tokens: usize,
    waiting_prompt_tokens: usize,
    running: usize,
    /// Prompt + max_tokens of every outstanding request, waiting or running.
    active_tokens: usize,
    /// Recent finish times, for the drain rate.
    finishes: VecDeque<Instant>,
    /// The envelope in force, if a profile was recorded for this revision.
    profile: Option<Arc<EnvelopeLimits>>,
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
}

#[derive(Debug)]
pub struct Admission {
    limits: AdmissionLimits,
    inner: Mutex<Inner>,
}

/// What the admission decision needs to know about a request.
#[derive(Clone, Copy, Debug)]
pub struct Demand {
    pub prompt_tokens: usize,
    pub max_tokens: usize,
    pub deadline: Option<Duration>,
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

    fn clamp(&self, d: Duration) -> RetryAfter {
        RetryAfter(d.clamp(Duration::from_millis(100), self.limits.max_retry_after))
    }

    /// Admits the request or refuses it with a typed error and a Retry-After
    /// from the measured drain rate.
    pub fn admit(self: &Arc<Self>, d: Demand, engine: &EngineStats) -> Result<Ticket, ApiError> {
        let now = Instant::now();
        let mut g = self.inner.lock().unwrap();
        let rate = g.drain_rate(now);
        let tokens = d.prompt_tokens + d.max_tokens;
        let l = &self.limits;
        let profile = g.profile.clone();
        let outstanding = g.waiting + g.running;
        let capacity = max_outstanding(l, profile.as_deref());
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
        if outstanding >= capacity {
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
                retry_after: self.clamp(drain(excess, &g)),
            });
        }
        if let Some(p) = profile.as_deref()
            && outstanding > 0
            && g.active_tokens + tokens > p.active_tokens
        {
            return Err(ApiError::Overloaded {
                message: format!(
                    "outstanding requests hold {} tokens; this request's {} would pass the \
                     measured envelope of {} (capacity profile `{}`); retry later",
                    g.active_tokens, tokens, p.active_tokens, p.workload
                ),
                retry_after: self.clamp(drain(outstanding.max(1), &g)),
            });
        }
        if g.waiting > 0 && g.waiting_tokens + tokens > l.max_waiting_tokens {
            return Err(ApiError::Overloaded {
                message: format!(
                    "the waiting queue holds {} tokens; this request's {} would pass the bound of {}",
                    g.waiting_tokens, tokens, l.max_waiting_tokens
                ),
                retry_after: self.clamp(drain(g.waiting.max(1), &g)),
            });
        }
        let blocks = |t: usize| t.div_ceil(BLOCK_SIZE);
        if g.waiting > 0
            && blocks(g.waiting_prompt_tokens) + blocks(d.prompt_tokens) > engine.kv_blocks_free
        {
            return Err(ApiError::Overloaded {
                message: "the KV cache has no headroom for more waiting prompts; retry later"
                    .into(),
                retry_after: self.clamp(drain(g.waiting.max(1), &g)),
            });
        }
        if let Some(deadline) = d.deadline {
            let queue = if outstanding >= l.max_num_seqs {
                drain(outstanding + 1 - l.max_num_seqs, &g)
            } else {
                Duration::ZERO
            };
            let prefill = match prefill_rate(engine, profile.as_deref()) {
                (_, Some(r)) => {
                    Duration::from_secs_f64((g.waiting_prompt_tokens + d.prompt_tokens) as f64 / r)
                }
                (_, None) => Duration::ZERO,
            };
            let estimate = queue + prefill;
            if estimate > deadline {
                return Err(ApiError::DeadlineInfeasible {
                    message: format!(
                        "estimated queue and prefill time is {} ms, past the deadline of {} ms",
                        estimate.as_millis(),
                        deadline.as_millis()
                    ),
                    retry_after: self.clamp(estimate - deadline),
                });
            }
        }
        g.waiting += 1;
        g.waiting_tokens += tokens;
        g.waiting_prompt_tokens += d.prompt_tokens;
        g.active_tokens += tokens;
        Ok(Ticket {
            adm: self.clone(),
            tokens,
            prompt_tokens: d.prompt_tokens,
            state: TicketState::Waiting,
        })
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
    tokens: usize,
    prompt_tokens: usize,
    state: TicketState,
}

impl Ticket {
    /// The engine scheduled the request: it leaves the waiting queue.
    pub fn started(&mut self) {
        if self.state == TicketState::Waiting {
            let mut g = self.adm.inner.lock().unwrap();
            g.waiting -= 1;
            g.waiting_tokens -= self.tokens;
            g.waiting_prompt_tokens -= self.prompt_tokens;
            g.running += 1;
            self.state = TicketState::Running;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut g = self.adm.inner.lock().unwrap();
        match self.state {
            TicketState::Waiting => {
                g.waiting -= 1;
                g.waiting_tokens -= self.tokens;
                g.waiting_prompt_tokens -= self.prompt_tokens;
                g.active_tokens -= self.tokens;
            }
            TicketState::Running => {
                g.running -= 1;
                g.active_tokens -= self.tokens;
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
mod tests {
    use super::*;
    use stoker_schemas::codes::ErrorCode;

    fn adm(seqs: usize, waiting: usize, tokens: usize) -> Arc<Admission> {
        Admission::new(AdmissionLimits {
            max_num_seqs: seqs,
            max_waiting_requests: waiting,
            max_waiting_tokens: tokens,
            max_retry_after: Duration::from_secs(60),
            out_of_envelope_factor: 4.0,
        })
    }

    fn stats() -> EngineStats {
        EngineStats {
            kv_blocks_free: 1000,
            kv_blocks_total: 1000,
            ..Default::default()
        }
    }

    fn demand(p: usize, m: usize) -> Demand {
        Demand {
            prompt_tokens: p,
            max_tokens: m,
            deadline: None,
        }
    }

    #[test]
    fn queue_bound_refuses_then_frees_on_drop() {
        let a = adm(1, 1, 10_000);
        let s = stats();
        let mut t1 = a.admit(demand(10, 10), &s).unwrap();
        t1.started();
        let t2 = a.admit(demand(10, 10), &s).unwrap();
        let e = a.admit(demand(10, 10), &s).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ServerOverloaded);
        assert!(e.retry_after().is_some());
        drop(t2);
        let t3 = a.admit(demand(10, 10), &s).unwrap();
        drop(t1);
        drop(t3);
        assert_eq!(a.snapshot(), AdmissionSnapshot::default());
    }

    #[test]
    fn waiting_token_bound() {
        let a = adm(8, 8, 100);
        let s = stats();
        let _t1 = a.admit(demand(40, 40), &s).unwrap();
        let e = a.admit(demand(10, 30), &s).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ServerOverloaded);
        let _t2 = a.admit(demand(10, 10), &s).unwrap();
    }

    #[test]
    fn kv_headroom_bound() {
        let a = adm(8, 8, 1 << 20);
        let s = EngineStats {
            kv_blocks_free: 4,
            ..stats()
        };
        let _t1 = a.admit(demand(48, 1), &s).unwrap();
        assert!(a.admit(demand(32, 1), &s).is_err());
        let _t2 = a.admit(demand(16, 1), &s).unwrap();
    }

    #[test]
    fn retry_after_follows_the_drain_rate() {
        let a = adm(1, 0, 1 << 20);
        let s = stats();
        // Ten requests finish in ~50 ms: a fast drain gives a short wait.
        for _ in 0..10 {
            let mut t = a.admit(demand(1, 1), &s).unwrap();
            t.started();
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut hold = a.admit(demand(1, 1), &s).unwrap();
        hold.started();
        let fast = a
            .admit(demand(1, 1), &s)
            .unwrap_err()
            .retry_after()
            .unwrap();
        assert!(fast.0 < Duration::from_secs(1), "{fast:?}");
        // No finishes measured: fall back to the engine's token rate.
        let b = adm(1, 0, 1 << 20);
        let slow = EngineStats {
            tokens_per_second_ewma: 2.0,
            ..stats()
        };
        let mut h = b.admit(demand(10, 10), &slow).unwrap();
        h.started();
        let r = b
            .admit(demand(10, 10), &slow)
            .unwrap_err()
            .retry_after()
            .unwrap();
        assert_eq!(r.0, Duration::from_secs(10));
    }

    fn profile(concurrency: usize, active_tokens: usize) -> EnvelopeLimits {
        EnvelopeLimits {
            concurrency,
            active_tokens,
            prefill_tok_s: Some(500.0),
            throughput_tok_s: 20.0,
            prompt_tokens_p95: Some(100),
            output_tokens_p95: Some(50),
            ..EnvelopeLimits::for_test()
        }
    }

    #[test]
    fn profile_bounds_outstanding_requests() {
        let a = adm(8, 8, 1 << 20);
        let s = stats();
        a.set_profile(Some(profile(2, 1 << 20)));
        let t1 = a.admit(demand(10, 10), &s).unwrap();
        let t2 = a.admit(demand(10, 10), &s).unwrap();
        let e = a.admit(demand(10, 10), &s).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ServerOverloaded);
        assert!(e.to_string().contains("envelope"), "{e}");
        // Nothing finished and no live rate: the profile's output rate drains
        // the 40 waiting tokens plus this request's 20 at 20 tok/s.
        assert_eq!(e.retry_after().unwrap().0, Duration::from_secs(3));
        let r = a.report(&s);
        assert_eq!((r.source, r.max_outstanding), ("profile", 2));
        drop(t1);
        let _t3 = a.admit(demand(10, 10), &s).unwrap();
        // Back to the static limits: eight slots plus eight waiting.
        a.set_profile(None);
        let _more: Vec<_> = (0..10)
            .map(|_| a.admit(demand(1, 1), &s).unwrap())
            .collect();
        assert_eq!(a.report(&s).source, "static");
        drop(t2);
    }

    #[test]
    fn profile_bounds_active_tokens_but_admits_a_lone_request() {
        let a = adm(8, 8, 1 << 20);
        let s = stats();
        a.set_profile(Some(profile(8, 100)));
        // Alone, even a request past the envelope runs: refusing it would be
        // a refusal it could never get past.
        let big = a.admit(demand(90, 60), &s).unwrap();
        assert!(a.admit(demand(1, 1), &s).is_err());
        drop(big);
        let _t1 = a.admit(demand(40, 20), &s).unwrap();
        let _t2 = a.admit(demand(20, 20), &s).unwrap();
        let e = a.admit(demand(1, 1), &s).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ServerOverloaded);
        assert_eq!(a.snapshot().active_tokens, 100);
    }

    #[test]
    fn profile_rates_until_live_rates_exist() {
        let a = adm(4, 4, 1 << 20);
        a.set_profile(Some(profile(8, 1 << 20)));
        let mut d = demand(1000, 1);
        d.deadline = Some(Duration::from_millis(500));
        // 1000 prompt tokens at the profile's 500 tok/s: 2 s, past 500 ms.
        let e = a.admit(d, &stats()).unwrap_err();
        assert_eq!(e.code(), ErrorCode::DeadlineInfeasible);
        assert_eq!(a.report(&stats()).prefill_rate_source, "profile");
        // A live rate takes over: 1000 tokens at 10,000 tok/s fit.
        let live = EngineStats {
            prefill_tokens_per_second_ewma: 10_000.0,
            ..stats()
        };
        a.admit(d, &live).unwrap();
        assert_eq!(a.report(&live).prefill_rate_source, "live");
    }

    #[test]
    fn out_of_envelope_needs_a_profile() {
        let a = adm(4, 4, 1 << 20);
        assert_eq!(a.out_of_envelope(&demand(10_000, 1)), None);
        a.set_profile(Some(profile(8, 1 << 20)));
        assert_eq!(
            a.out_of_envelope(&demand(401, 1)),
            Some(OutOfEnvelope::PromptLength)
        );
        assert_eq!(a.out_of_envelope(&demand(400, 200)), None);
    }

    #[test]
    fn infeasible_deadline_is_refused_at_once() {
        let a = adm(4, 4, 1 << 20);
        let s = EngineStats {
            prefill_tokens_per_second_ewma: 1000.0,
            ..stats()
        };
        let mut d = demand(2000, 1);
        d.deadline = Some(Duration::from_millis(500));
        let e = a.admit(d, &s).unwrap_err();
        assert_eq!(e.code(), ErrorCode::DeadlineInfeasible);
        assert_eq!(e.retry_after().unwrap().0, Duration::from_millis(1500));
        d.deadline = Some(Duration::from_secs(5));
        a.admit(d, &s).unwrap();
    }
}
