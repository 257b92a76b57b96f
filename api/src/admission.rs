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
//! The counters live behind one short mutex; a [`Ticket`] returns its share in
//! `Drop`, so a cancelled or failed request can never leak capacity.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stoker_executor::BLOCK_SIZE;
use stoker_executor::engine::EngineStats;

use crate::error::{ApiError, RetryAfter};

#[derive(Clone, Copy, Debug)]
pub struct AdmissionLimits {
    pub max_num_seqs: usize,
    pub max_waiting_requests: usize,
    pub max_waiting_tokens: usize,
    pub max_retry_after: Duration,
}

#[derive(Debug, Default)]
struct Inner {
    waiting: usize,
    waiting_tokens: usize,
    waiting_prompt_tokens: usize,
    running: usize,
    /// Recent finish times, for the drain rate.
    finishes: VecDeque<Instant>,
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
        let outstanding = g.waiting + g.running;
        let capacity = l.max_num_seqs + l.max_waiting_requests;
        // Time for `n` requests to finish at the measured rate, falling back to
        // the engine's token rate over the waiting tokens when no request has
        // finished recently.
        let drain = |n: usize, g: &Inner| -> Duration {
            if rate > 0.0 {
                Duration::from_secs_f64(n as f64 / rate)
            } else if engine.tokens_per_second_ewma > 0.0 {
                Duration::from_secs_f64(
                    (g.waiting_tokens + tokens) as f64 / engine.tokens_per_second_ewma,
                )
            } else {
                Duration::from_secs(1)
            }
        };
        if outstanding >= capacity {
            let excess = outstanding + 1 - capacity;
            return Err(ApiError::Overloaded {
                message: format!(
                    "the server is at capacity ({} running, {} waiting); retry later",
                    g.running, g.waiting
                ),
                retry_after: self.clamp(drain(excess, &g)),
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
            let prefill = if engine.prefill_tokens_per_second_ewma > 0.0 {
                Duration::from_secs_f64(
                    (g.waiting_prompt_tokens + d.prompt_tokens) as f64
                        / engine.prefill_tokens_per_second_ewma,
                )
            } else {
                Duration::ZERO
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
        Ok(Ticket {
            adm: self.clone(),
            tokens,
            prompt_tokens: d.prompt_tokens,
            state: TicketState::Waiting,
        })
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
            }
            TicketState::Running => {
                g.running -= 1;
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

    fn adm(seqs: usize, waiting: usize, tokens: usize) -> Arc<Admission> {
        Admission::new(AdmissionLimits {
            max_num_seqs: seqs,
            max_waiting_requests: waiting,
            max_waiting_tokens: tokens,
            max_retry_after: Duration::from_secs(60),
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
        assert_eq!(e.code(), "server_overloaded");
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
        assert_eq!(e.code(), "server_overloaded");
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
        assert_eq!(e.code(), "deadline_infeasible");
        assert_eq!(e.retry_after().unwrap().0, Duration::from_millis(1500));
        d.deadline = Some(Duration::from_secs(5));
        a.admit(d, &s).unwrap();
    }
}
