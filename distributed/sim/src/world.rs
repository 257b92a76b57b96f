//! The simulation loop: API instances route arriving requests with their
//! own views, jobs and capacity reports travel with delays, executors step,
//! and every change is accounted for the metrics. The omniscient baseline
//! runs the same loop with one router that sees every change at once.

use std::rc::Rc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::events::{Clock, Event, MS, Micros, SECOND};
use super::executor::free_blocks_wanted;
use super::executor::{Executor, StepEnd};
use super::stats::{Outcome, summarise};
use super::workload::{Request, Workload};
use super::{Policy, SHA, SimConfig};
use stoker_executor::BLOCK_SIZE;
use stoker_routing::{CapacityView, Demand, InFlight, PrefixIndex, RoutingPolicy, block_hashes};

/// How often an executor reports (`kafka.capacity_interval_ms`).
const REPORT_INTERVAL: Micros = 500 * MS;
/// A report reaches an API instance this long after it is published.
const REPORT_DELAY: (Micros, Micros) = (5 * MS, 20 * MS);
/// Offers of one request before a refusal stands (`MAX_ATTEMPTS`).
const MAX_ATTEMPTS: usize = 3;
/// `kafka.executor_timeout_ms`.
const EXECUTOR_TIMEOUT: Duration = Duration::from_millis(1500);
/// A run that has not drained this long after the last arrival stops;
/// what is still unfinished misses the SLO.
const DRAIN_LIMIT: Micros = 300 * SECOND;

struct Router {
    view: CapacityView,
    prefixes: PrefixIndex,
}

pub(super) struct World {
    clock: Clock,
    routers: Vec<Router>,
    execs: Vec<Executor>,
    reqs: Vec<Request>,
    /// Each request's count in its router's view, until it ends or is
    /// refused.
    held: Vec<Option<InFlight>>,
    workload: Workload,
    rng: SmallRng,
    base: Instant,
    omniscient: bool,
    per_token_ms: f64,
    affinity: bool,
    own_accounting: bool,
    job_delay: (Micros, Micros),
    reply_delay: (Micros, Micros),
    apis: u32,
    /// Executors with a free slot and an empty queue.
    free_execs: usize,
    misrouted: usize,
    /// Requests neither finished nor refused.
    outstanding: usize,
    from: Micros,
    to: Micros,
    events: u64,
}

impl World {
    pub(super) fn new(c: &SimConfig) -> Self {
        let omniscient = c.policy == Policy::Omniscient;
        let (routers, policy) = match c.policy {
            Policy::Omniscient => (1, RoutingPolicy::MaxHeadroom),
            Policy::Routed(p) => (c.apis.max(1), p),
        };
        let routers = (0..routers)
            .map(|i| Router {
                view: CapacityView::with_policy(
                    EXECUTOR_TIMEOUT,
                    policy,
                    c.seed.wrapping_mul(1_000_003) + i as u64,
                ),
                prefixes: PrefixIndex::new(c.prefix_capacity),
            })
            .collect();
        let wanted = free_blocks_wanted(&c.mix);
        let execs: Vec<Executor> = (0..c.executors)
            .map(|i| Executor::new(i, c.cost, wanted))
            .collect();
        World {
            clock: Clock::default(),
            routers,
            free_execs: execs.len(),
            execs,
            reqs: Vec::new(),
            held: Vec::new(),
            workload: match &c.arrival_trace {
                None => Workload::new(c.rate(), c.arrivals, c.mix, c.seed),
                Some(t) => Workload::new(1.0, c.arrivals, c.mix, c.seed).replaying(t.clone()),
            },
            rng: SmallRng::seed_from_u64(c.seed ^ 0x5eed),
            base: Instant::now(),
            omniscient,
            per_token_ms: c.cost.per_token_ms,
            affinity: c.affinity,
            own_accounting: c.own_accounting && !omniscient,
            job_delay: c.job_delay,
            reply_delay: c.reply_delay,
            apis: if omniscient { 1 } else { c.apis.max(1) },
            misrouted: 0,
            outstanding: 0,
            from: (c.warmup_s * SECOND as f64) as Micros,
            to: ((c.warmup_s + c.measure_s) * SECOND as f64) as Micros,
            events: 0,
        }
    }

    fn instant(&self) -> Instant {
        self.base + Duration::from_micros(self.clock.now())
    }

    fn delay(&mut self, (lo, hi): (Micros, Micros)) -> Micros {
        // A fixed delay draws nothing, so runs without one keep their
        // random sequence.
        if lo == hi {
            return lo;
        }
        self.rng.random_range(lo..=hi)
    }

    pub(super) fn run(mut self) -> Outcome {
        // Every router knows every executor before the first request.
        let now = self.instant();
        for e in 0..self.execs.len() {
            let report = self.execs[e].report(0);
            for r in &mut self.routers {
                r.view.observe(report.clone(), now);
            }
            let phase = self.delay((0, REPORT_INTERVAL));
            self.clock.after(phase, Event::Report { exec: e as u32 });
        }
        if let Some(gap) = self.workload.gap() {
            self.clock.after(gap, Event::Arrival);
        }
        if let Some(p) = self.workload.phase() {
            self.clock.after(p, Event::Phase);
        }
        while let Some(event) = self.clock.pop() {
            self.events += 1;
            let now = self.clock.now();
            if now >= self.to && (self.outstanding == 0 || now >= self.to + DRAIN_LIMIT) {
                break;
            }
            match event {
                Event::Arrival => self.arrival(),
                Event::Phase => {
                    if let Some(p) = self.workload.phase() {
                        self.clock.after(p, Event::Phase);
                    }
                }
                Event::JobArrives { exec, req } => self.job_arrives(exec, req),
                Event::Refused { req } => self.refused(req),
                Event::StepEnds { exec } => self.step_ends(exec),
                Event::Report { exec } => self.report(exec),
                Event::Deliver { api, report } => {
                    let now = self.instant();
                    let own = if self.own_accounting {
                        report.held_for(api as i32)
                    } else {
                        None
                    };
                    self.routers[api as usize]
                        .view
                        .observe_own((*report).clone(), own, now);
                }
            }
        }
        let now = self.clock.now();
        let (from, to) = (self.from, self.to);
        for e in &mut self.execs {
            e.touch(now, from, to);
        }
        let areas: Vec<f64> = self.execs.iter().map(Executor::load_area).collect();
        let mut out = summarise(&self.reqs, from, to, &areas, self.per_token_ms);
        out.misrouted = self.misrouted;
        out.prefix_hits = self.execs.iter().map(|e| e.prefix_hits).sum();
        let busy: Micros = self.execs.iter().map(|e| e.busy_time).sum();
        let finished: u64 = self.execs.iter().map(|e| e.finished).sum();
        out.busy_ms_per_request = busy as f64 / MS as f64 / finished.max(1) as f64;
        out.events = self.events;
        out
    }

    fn arrival(&mut self) {
        let now = self.clock.now();
        if now >= self.to {
            return;
        }
        let api = self.rng.random_range(0..self.apis);
        let req = self.reqs.len() as u32;
        self.reqs.push(self.workload.request(api, now));
        self.held.push(None);
        self.outstanding += 1;
        self.offer(req);
        if let Some(gap) = self.workload.gap() {
            self.clock.after(gap, Event::Arrival);
        }
    }

    /// Routes `req` from its API instance: the first offer as `submit`
    /// does (prefix preference, then the policy), a re-offer as a refused
    /// job's (the policy among the executors not tried).
    fn offer(&mut self, req: u32) {
        let now = self.instant();
        let r = &self.reqs[req as usize];
        let demand = Demand {
            prompt: r.prompt_len() as usize,
            tokens: (r.prompt_len() + r.output) as usize,
        };
        let router = &mut self.routers[r.api as usize];
        let choice = if r.tried.is_empty() {
            let hashes = block_hashes(&r.tokens(req), BLOCK_SIZE);
            let preferred = self
                .affinity
                .then(|| router.prefixes.preferred(&hashes).map(str::to_string))
                .flatten();
            let c = router
                .view
                .pick_preferring(SHA, demand, now, preferred.as_deref());
            if let Some(c) = &c {
                router.prefixes.record(&hashes, &c.executor_id);
            }
            c
        } else {
            let tried: Vec<_> = r
                .tried
                .iter()
                .map(|&e| self.execs[e as usize].id.clone())
                .collect();
            router.view.pick_excluding(SHA, demand, now, &tried)
        };
        let Some(c) = choice else {
            self.reqs[req as usize].refused = true;
            self.outstanding -= 1;
            return;
        };
        let exec = c.slot as u32;
        self.held[req as usize] = Some(c.held);
        self.reqs[req as usize].tried.push(exec);
        if self.omniscient {
            self.job_arrives(exec, req);
        } else {
            let d = self.delay(self.job_delay);
            self.clock.after(d, Event::JobArrives { exec, req });
        }
    }

    fn refused(&mut self, req: u32) {
        self.held[req as usize] = None;
        if self.reqs[req as usize].tried.len() < MAX_ATTEMPTS {
            self.offer(req);
        } else {
            self.reqs[req as usize].refused = true;
            self.outstanding -= 1;
        }
    }

    /// Applies `f` to executor `exec`, keeping the load integral and the
    /// count of free executors right.
    fn change<R>(&mut self, exec: u32, f: impl FnOnce(&mut Executor, &[Request]) -> R) -> R {
        let now = self.clock.now();
        let e = &mut self.execs[exec as usize];
        e.touch(now, self.from, self.to);
        let was = e.has_free_slot();
        let out = f(e, &self.reqs);
        let is = e.has_free_slot();
        if was && !is {
            self.free_execs -= 1;
        } else if is && !was {
            self.free_execs += 1;
        }
        out
    }

    /// The omniscient router sees the executor's state at once.
    fn reveal(&mut self, exec: u32) {
        if self.omniscient {
            let now = self.instant();
            let report = self.execs[exec as usize].report(self.clock.now());
            self.routers[0].view.observe(report, now);
        }
    }

    fn job_arrives(&mut self, exec: u32, req: u32) {
        let now = self.clock.now();
        let e = &self.execs[exec as usize];
        if e.refuses() {
            if self.omniscient {
                self.refused(req);
            } else {
                let d = self.delay(self.job_delay);
                self.clock.after(d, Event::Refused { req });
            }
            return;
        }
        let r = &self.reqs[req as usize];
        if !e.would_start(r) && now >= self.from && now < self.to {
            let others = self.free_execs - usize::from(e.has_free_slot());
            if others > 0 {
                self.misrouted += 1;
            }
        }
        self.change(exec, |e, reqs| e.enqueue(req, &reqs[req as usize]));
        self.kick(exec);
        self.reveal(exec);
    }

    /// Starts a step on an idle executor with work.
    fn kick(&mut self, exec: u32) {
        if let Some(d) = self.change(exec, |e, reqs| e.start_step(reqs)) {
            self.clock.after(d, Event::StepEnds { exec });
        }
    }

    fn step_ends(&mut self, exec: u32) {
        let now = self.clock.now();
        let StepEnd {
            first_tokens,
            finished,
        } = self.change(exec, |e, _| e.end_step());
        // What the client sees, a reply's trip after the executor.
        let seen = now
            + if self.omniscient {
                0
            } else {
                self.delay(self.reply_delay)
            };
        for r in first_tokens {
            self.reqs[r as usize].first_token = Some(seen);
        }
        for r in finished {
            self.reqs[r as usize].finished = Some(seen);
            self.held[r as usize] = None;
            self.outstanding -= 1;
        }
        self.kick(exec);
        self.reveal(exec);
    }

    fn report(&mut self, exec: u32) {
        let now = self.clock.now();
        let report = self.execs[exec as usize].report(now);
        if self.omniscient {
            let at = self.instant();
            self.routers[0].view.observe(report, at);
        } else {
            let report = Rc::new(report);
            for api in 0..self.apis {
                let d = self.delay(REPORT_DELAY);
                self.clock.after(
                    d,
                    Event::Deliver {
                        api,
                        report: report.clone(),
                    },
                );
            }
        }
        self.clock.after(REPORT_INTERVAL, Event::Report { exec });
    }
}
