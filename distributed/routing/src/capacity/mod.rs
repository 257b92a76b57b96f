//! The API's live view of the executors, built from their capacity reports:
//! which are alive, which to route the next request to, and the summed load
//! that admission reads. Pure bookkeeping (the clock is passed in), so it is
//! tested without a broker.
//!
//! Routing ranks executors by headroom. Under [`RoutingPolicy::MaxHeadroom`]
//! every executor is ranked; with many API instances reading the same
//! reports, they all rank the same executor first between two reports and
//! herd onto it. [`RoutingPolicy::PowerOfChoices`] ranks only `d` executors
//! drawn at random per request, so instances disagree and the herd spreads
//! (the simulator, `stoker-sim`, measures both).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use stoker_schemas::ids::ExecutorId;
use stoker_schemas::transport::CapacityReport;

/// The summed load of the executors that take work for a model: the
/// reports' figures plus what this instance sent since each report.
/// Routing's own type, so the pure core needs nothing of the engine.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FleetLoad {
    /// Sequences running.
    pub running: usize,
    /// Requests waiting, with this instance's unreported ones.
    pub waiting: usize,
    /// Prompt + max tokens of every waiting request.
    pub waiting_tokens: usize,
    pub kv_blocks_total: usize,
    pub kv_blocks_free: usize,
    pub kv_blocks_used: usize,
    /// Summed rates (tokens a second).
    pub tokens_per_second: f64,
    pub prefill_tokens_per_second: f64,
    pub decode_tokens_per_second: f64,
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub report: CapacityReport,
    pub seen: Instant,
    /// Requests this instance sent since the last report: what routing
    /// adds to a report that does not say which requests are this
    /// instance's.
    pub sent_since_report: u32,
    /// Prompt tokens of the requests this instance sent since the last
    /// report: prefill the report's backlog does not hold yet.
    pub sent_prompt_since_report: u64,
    /// This instance's requests the report counts (its reply partition's
    /// entry in `by_reply_partition`); `None` when the executor does not say.
    pub own_in_report: Option<u32>,
    /// This instance's requests on the executor now: sent, not yet ended
    /// (each [`InFlight`] guard counts one).
    in_flight: Arc<AtomicU32>,
    pub lost: bool,
}

impl Entry {
    fn live(&self, now: Instant, timeout: Duration) -> bool {
        !self.lost && now.saturating_duration_since(self.seen) <= timeout
    }

    fn takes_work(&self, sha256: &str, now: Instant, timeout: Duration) -> bool {
        self.live(now, timeout)
            && self.report.ready
            && !self.report.draining
            && self.report.model_sha256 == sha256
    }

    fn new(report: CapacityReport, own_in_report: Option<u32>, now: Instant) -> Self {
        Entry {
            report,
            seen: now,
            sent_since_report: 0,
            sent_prompt_since_report: 0,
            own_in_report,
            in_flight: Arc::default(),
            lost: false,
        }
    }

    /// This instance's requests on the executor now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Free sequence slots, after this instance's sends.
    fn slots(&self) -> i64 {
        self.report.max_num_seqs as i64 - self.load()
    }

    /// Requests running or waiting. When the report says which are this
    /// instance's, the other instances' as reported plus this instance's
    /// in flight now: exact for its own, however old the report. Otherwise
    /// the report plus what this instance sent since, which counts a
    /// request twice when the report already shows it, and keeps counting
    /// one that ended until the next report.
    fn load(&self) -> i64 {
        let r = &self.report;
        let reported = r.running as i64 + r.waiting as i64;
        match self.own_in_report {
            Some(own) => (reported - own as i64).max(0) + self.in_flight() as i64,
            None => reported + self.sent_since_report as i64,
        }
    }

    /// What a new request would wait behind and share steps with, in
    /// prompt tokens: the prefill queued there (the report's backlog and
    /// what this instance sent since), plus [`REQUEST_WORK_TOKENS`] for each
    /// request held. Prefill dominates time to first token (a 1,500-token
    /// prompt is three full steps), so ranking by request count alone sent
    /// a short chat behind two long prompts while an executor with more but
    /// shorter requests would have started it a step sooner; ranking by
    /// backlog alone let executors full of long decodes pile up requests.
    fn work(&self) -> i64 {
        self.report.prefill_backlog_tokens.unwrap_or(0) as i64
            + self.sent_prompt_since_report as i64
            + self.load() * REQUEST_WORK_TOKENS
    }

    /// This instance's requests the report cannot count yet.
    fn unreported(&self) -> i64 {
        match self.own_in_report {
            Some(own) => (self.in_flight() as i64 - own as i64).max(0),
            None => self.sent_since_report as i64,
        }
    }

    /// Free KV tokens after the waiting work and what the report does not
    /// count yet.
    fn free_tokens(&self, demand: usize) -> i64 {
        let r = &self.report;
        (r.kv_blocks_free as i64) * (r.block_size as i64)
            - r.waiting_tokens as i64
            - self.unreported() * demand as i64
    }
}

/// What one request held by an executor weighs in [`Entry::work`], in
/// prompt tokens: a step's token budget (`engine.max_batched_tokens`'s
/// default), chosen in a one-off simulator experiment at 50 API instances
/// and 500 executors over 256 to 2,048 tokens, where it kept both load
/// max/mean and TTFT p99 near the scale issue's targets (`route_sim`
/// measures it, BENCHMARKS.md "Routing at scale").
pub const REQUEST_WORK_TOKENS: i64 = 512;

/// What a request asks of an executor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand {
    /// Prompt tokens: the prefill it adds.
    pub prompt: usize,
    /// Prompt plus `max_tokens`: the KV it may come to hold.
    pub tokens: usize,
}

/// One request of this instance in flight to an executor: the view counts
/// it in that executor's load until the guard drops (at the request's last
/// reply, its failure, or its move to another executor).
#[derive(Debug)]
pub struct InFlight(Arc<AtomicU32>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Where a request goes.
#[derive(Debug)]
pub struct Choice {
    pub executor_id: ExecutorId,
    /// The executor's slot: which partitions reach it.
    pub slot: i32,
    /// Counts the request in the executor's load: keep it while the
    /// request is there.
    pub held: InFlight,
}

impl PartialEq for Choice {
    fn eq(&self, other: &Self) -> bool {
        self.executor_id == other.executor_id && self.slot == other.slot
    }
}

/// How an API instance chooses among the executors that take work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoutingPolicy {
    /// Rank every executor; take the one with the most headroom.
    MaxHeadroom,
    /// Draw `d` distinct executors uniformly at random among those that take
    /// work; take the one of them with the most headroom. `d` at or above
    /// the number of such executors is [`RoutingPolicy::MaxHeadroom`].
    PowerOfChoices { d: usize },
}

impl Default for RoutingPolicy {
    /// Three choices: the simulator's best at many API instances (the only
    /// rule that meets both targets at 50 instances and 500 executors), and
    /// nearer the most headroom than two at one.
    fn default() -> Self {
        RoutingPolicy::PowerOfChoices { d: 3 }
    }
}

/// Draws before a sample of eligible executors falls back to listing them.
const SAMPLE_TRIES_PER_CHOICE: usize = 8;

#[derive(Debug)]
pub struct CapacityView {
    /// In arrival order; an executor is never removed (it is marked lost),
    /// so an index stays valid and a uniform draw is O(1).
    entries: Vec<Entry>,
    index: HashMap<ExecutorId, usize>,
    timeout: Duration,
    policy: RoutingPolicy,
    rng: SmallRng,
}

/// How many more requests than `least` (the alternative's load) an
/// executor holding a request's prefix may carry and still get it: a
/// quarter of `least`, at least one and at most a quarter of its slots.
/// Relative, because a fixed quarter of the slots let the few holders of a
/// popular system prompt run 16 above the rest with hundreds of executors
/// (load max/mean 2.42 against 1.51 in the simulator).
fn affinity_allowance(e: &Entry, least: i64) -> i64 {
    let cap = (e.report.max_num_seqs as i64 / 4).max(1);
    (least / 4).clamp(1, cap)
}

/// The ranking key: a free slot, KV room for the request, least work
/// ([`Entry::work`]), least load, most free KV (larger is better).
fn headroom(e: &Entry, demand: Demand) -> (bool, bool, i64, i64, i64) {
    let free = e.free_tokens(demand.tokens);
    (
        e.slots() > 0,
        free >= demand.tokens as i64,
        -e.work(),
        -e.load(),
        free,
    )
}

impl CapacityView {
    /// A view routing by [`RoutingPolicy::default`], its draws seeded from
    /// the clock.
    pub fn new(timeout: Duration) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Self::with_policy(timeout, RoutingPolicy::default(), seed)
    }

    /// A view routing by `policy`, its random draws seeded by `seed` (the
    /// same seed and the same calls give the same picks).
    pub fn with_policy(timeout: Duration, policy: RoutingPolicy, seed: u64) -> Self {
        CapacityView {
            entries: Vec::new(),
            index: HashMap::new(),
            timeout,
            policy,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    pub fn policy(&self) -> RoutingPolicy {
        self.policy
    }

    pub fn set_policy(&mut self, policy: RoutingPolicy) {
        self.policy = policy;
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Takes a report in that does not say which requests are this
    /// instance's ([`CapacityView::observe_own`] with `None`).
    pub fn observe(&mut self, report: CapacityReport, now: Instant) {
        self.observe_own(report, None, now)
    }

    /// Takes a report in, with the requests it counts for this instance
    /// (`report.held_for` this instance's reply partition there). A report
    /// from an executor that was declared lost makes it live again (it was
    /// slow, or it restarted).
    pub fn observe_own(&mut self, report: CapacityReport, own: Option<u32>, now: Instant) {
        match self.index.get(&report.executor_id) {
            Some(&i) => {
                let e = &mut self.entries[i];
                let id = &report.executor_id;
                if e.lost {
                    tracing::info!(executor = %id, "executor reports again");
                }
                e.report = report;
                e.seen = now;
                e.sent_since_report = 0;
                e.sent_prompt_since_report = 0;
                e.own_in_report = own;
                e.lost = false;
            }
            None => {
                tracing::info!(executor = %report.executor_id, slot = report.slot, "executor seen");
                self.index
                    .insert(report.executor_id.clone(), self.entries.len());
                self.entries.push(Entry::new(report, own, now));
            }
        }
    }

    /// Marks executors silent past the timeout as lost and returns them
    /// (each once).
    pub fn expire(&mut self, now: Instant) -> Vec<ExecutorId> {
        let mut lost = Vec::new();
        for e in self.entries.iter_mut() {
            if !e.lost && now.saturating_duration_since(e.seen) > self.timeout {
                e.lost = true;
                lost.push(e.report.executor_id.clone());
            }
        }
        lost
    }

    /// The executor with the most headroom for `demand` on artifact
    /// `sha256`: one with a free sequence slot and KV room for the request
    /// first, then the least work (queued prefill and requests held, see
    /// [`Entry::work`]), then the least loaded, then the most free KV.
    /// Free KV is a constraint rather than the first preference: two
    /// executors with room for the request serve it alike, and a step's time
    /// grows with its batch, so ranking by KV sent every request of a burst
    /// to one executor while another with a few blocks less stood idle.
    /// Under [`RoutingPolicy::PowerOfChoices`] the ranking covers only the
    /// executors drawn. `None` when no executor serving it is alive and ready.
    pub fn pick(&mut self, sha256: &str, demand: Demand, now: Instant) -> Option<Choice> {
        self.pick_excluding(sha256, demand, now, &[])
    }

    /// `preferred` (the executor holding the request's prefix in its cache)
    /// when it takes work, has a free sequence slot and KV room for the whole
    /// request, and carries at most [`affinity_allowance`] more requests
    /// than the executor routing would take otherwise (a quarter of that
    /// one's load): a cache hit is worth a little imbalance, not a queue. Otherwise
    /// [`CapacityView::pick`]'s choice.
    ///
    /// Under [`RoutingPolicy::MaxHeadroom`] the comparison is with the least
    /// loaded executor of all. Under [`RoutingPolicy::PowerOfChoices`] it is
    /// with the best of the `d` executors drawn, the alternative this request
    /// actually has: comparing with the global least would cost a scan per
    /// request, and two choices already bound what any executor receives, so
    /// the preference adds at most the allowance on top of that bound.
    pub fn pick_preferring(
        &mut self,
        sha256: &str,
        demand: Demand,
        now: Instant,
        preferred: Option<&str>,
    ) -> Option<Choice> {
        let timeout = self.timeout;
        let preferred = preferred
            .and_then(|id| self.index.get(id).copied())
            .filter(|&i| {
                let e = &self.entries[i];
                e.takes_work(sha256, now, timeout)
                    && e.slots() > 0
                    && e.free_tokens(demand.tokens) >= demand.tokens as i64
            });
        let Some(p) = preferred else {
            return self.pick(sha256, demand, now);
        };
        let (alternative, least) = match self.policy {
            RoutingPolicy::MaxHeadroom => {
                let least = self
                    .entries
                    .iter()
                    .filter(|e| e.takes_work(sha256, now, timeout))
                    .map(Entry::load)
                    .min();
                (None, least)
            }
            RoutingPolicy::PowerOfChoices { .. } => {
                let alt = self.choose(sha256, demand, now, &[]);
                (alt, alt.map(|i| self.entries[i].load()))
            }
        };
        let e = &self.entries[p];
        let chosen = match least {
            Some(least) if e.load() - least <= affinity_allowance(e, least) => p,
            _ => match alternative {
                Some(a) => a,
                None => self.choose(sha256, demand, now, &[])?,
            },
        };
        Some(self.commit(chosen, demand))
    }

    /// [`CapacityView::pick`] among the executors not in `tried`.
    pub fn pick_excluding(
        &mut self,
        sha256: &str,
        demand: Demand,
        now: Instant,
        tried: &[ExecutorId],
    ) -> Option<Choice> {
        let i = self.choose(sha256, demand, now, tried)?;
        Some(self.commit(i, demand))
    }

    /// Counts a send of `demand` to entry `i` and names it.
    fn commit(&mut self, i: usize, demand: Demand) -> Choice {
        let e = &mut self.entries[i];
        e.sent_since_report += 1;
        e.sent_prompt_since_report += demand.prompt as u64;
        e.in_flight.fetch_add(1, Ordering::Relaxed);
        Choice {
            executor_id: e.report.executor_id.clone(),
            slot: e.report.slot,
            held: InFlight(e.in_flight.clone()),
        }
    }

    /// The index of the executor the policy takes, without counting a send.
    fn choose(
        &mut self,
        sha256: &str,
        demand: Demand,
        now: Instant,
        tried: &[ExecutorId],
    ) -> Option<usize> {
        let timeout = self.timeout;
        let eligible = |e: &Entry| {
            e.takes_work(sha256, now, timeout) && !tried.contains(&e.report.executor_id)
        };
        let better = |entries: &[Entry], a: usize, b: usize| {
            let (x, y) = (&entries[a], &entries[b]);
            headroom(x, demand)
                .cmp(&headroom(y, demand))
                .then_with(|| y.report.executor_id.cmp(&x.report.executor_id))
                .is_gt()
        };
        let d = match self.policy {
            RoutingPolicy::PowerOfChoices { d } if d < self.entries.len() => d.max(1),
            _ => usize::MAX,
        };
        let mut best: Option<usize> = None;
        if d != usize::MAX {
            // Rejection sampling: a uniform draw over all entries, kept when
            // eligible and not drawn before, is a uniform draw without
            // replacement among the eligible. Few eligible: list them.
            let n = self.entries.len();
            let mut drawn = Vec::with_capacity(d);
            for _ in 0..d * SAMPLE_TRIES_PER_CHOICE {
                if drawn.len() == d {
                    break;
                }
                let i = self.rng.random_range(0..n);
                if !drawn.contains(&i) && eligible(&self.entries[i]) {
                    drawn.push(i);
                }
            }
            if drawn.len() < d {
                let mut all: Vec<usize> = (0..n).filter(|&i| eligible(&self.entries[i])).collect();
                if all.len() > d {
                    // A partial Fisher-Yates shuffle: the first d are a
                    // uniform sample.
                    for k in 0..d {
                        let j = self.rng.random_range(k..all.len());
                        all.swap(k, j);
                    }
                    all.truncate(d);
                }
                drawn = all;
            }
            for i in drawn {
                if best.is_none_or(|b| better(&self.entries, i, b)) {
                    best = Some(i);
                }
            }
            return best;
        }
        for i in 0..self.entries.len() {
            if eligible(&self.entries[i]) && best.is_none_or(|b| better(&self.entries, i, b)) {
                best = Some(i);
            }
        }
        best
    }

    /// Whether some executor serving `sha256` takes work now.
    pub fn any_ready(&self, sha256: &str, now: Instant) -> bool {
        self.entries
            .iter()
            .any(|e| e.takes_work(sha256, now, self.timeout))
    }

    /// The summed load of the live executors serving `sha256`, which the
    /// API's remote backend hands to admission as an engine's stats.
    pub fn load(&self, sha256: &str, now: Instant) -> FleetLoad {
        let mut s = FleetLoad::default();
        for e in self
            .entries
            .iter()
            .filter(|e| e.takes_work(sha256, now, self.timeout))
        {
            let r = &e.report;
            s.running += r.running as usize;
            s.waiting += r.waiting as usize + e.unreported() as usize;
            s.waiting_tokens += r.waiting_tokens as usize;
            s.kv_blocks_total += r.kv_blocks_total as usize;
            s.kv_blocks_free += r.kv_blocks_free as usize;
            s.kv_blocks_used +=
                (r.kv_blocks_total - r.kv_blocks_free.min(r.kv_blocks_total)) as usize;
            s.tokens_per_second += r.tokens_per_second;
            s.prefill_tokens_per_second += r.prefill_tokens_per_second;
            s.decode_tokens_per_second += r.decode_tokens_per_second;
        }
        s
    }

    /// Every executor this instance has heard of, for the admin API.
    pub fn entries(&self) -> Vec<(Entry, bool)> {
        let now = Instant::now();
        let mut v: Vec<(Entry, bool)> = self
            .entries
            .iter()
            .map(|e| (e.clone(), e.live(now, self.timeout)))
            .collect();
        v.sort_by(|a, b| a.0.report.executor_id.cmp(&b.0.report.executor_id));
        v
    }
}

#[cfg(test)]
mod tests;
