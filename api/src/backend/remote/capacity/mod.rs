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
//! (the simulator in `sim` measures both).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use stoker_executor::engine::EngineStats;
use stoker_schemas::transport::CapacityReport;

#[derive(Clone, Debug)]
pub struct Entry {
    pub report: CapacityReport,
    pub seen: Instant,
    /// Requests this instance sent since the last report: the report does
    /// not count them yet, so routing does.
    pub sent_since_report: u32,
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

    /// Free sequence slots, after what was sent since the report.
    fn slots(&self) -> i64 {
        let r = &self.report;
        r.max_num_seqs as i64 - r.running as i64 - r.waiting as i64 - self.sent_since_report as i64
    }

    /// Requests running, waiting, or sent since the report.
    fn load(&self) -> i64 {
        let r = &self.report;
        r.running as i64 + r.waiting as i64 + self.sent_since_report as i64
    }

    /// Free KV tokens after the waiting work and what was sent since.
    fn free_tokens(&self, demand: usize) -> i64 {
        let r = &self.report;
        (r.kv_blocks_free as i64) * (r.block_size as i64)
            - r.waiting_tokens as i64
            - (self.sent_since_report as i64) * demand as i64
    }
}

/// Where a request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub executor_id: String,
    /// The executor's slot: which partitions reach it.
    pub slot: i32,
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
    /// Two choices: the simulator's best at many API instances, and within
    /// its margin of the most headroom at one.
    fn default() -> Self {
        RoutingPolicy::PowerOfChoices { d: 2 }
    }
}

impl From<crate::config::Routing> for RoutingPolicy {
    /// `kafka.routing` as the view applies it.
    fn from(r: crate::config::Routing) -> Self {
        match r {
            crate::config::Routing::PowerOfTwo => RoutingPolicy::PowerOfChoices { d: 2 },
            crate::config::Routing::MaxHeadroom => RoutingPolicy::MaxHeadroom,
        }
    }
}

/// Draws before a sample of eligible executors falls back to listing them.
const SAMPLE_TRIES_PER_CHOICE: usize = 8;

#[derive(Debug)]
pub struct CapacityView {
    /// In arrival order; an executor is never removed (it is marked lost),
    /// so an index stays valid and a uniform draw is O(1).
    entries: Vec<Entry>,
    index: HashMap<String, usize>,
    timeout: Duration,
    policy: RoutingPolicy,
    rng: SmallRng,
}

/// How many more requests than `least` (the alternative's load) an
/// executor holding a request's prefix may carry and still get it: a
/// quarter of its slots (at least one).
fn affinity_allowance(e: &Entry, _least: i64) -> i64 {
    // The relative allowance (`(least / 4).max(1)`, capped as here) spread
    // load better in the simulator, but sent a conversation's next turn away
    // from its cached prefix under the end-to-end suite's load; until the
    // view stops double-counting sends across a report, the fixed quarter of
    // the slots holds.
    (e.report.max_num_seqs as i64 / 4).max(1)
}

/// The ranking key: a free slot, KV room for the request, least load, most
/// free KV (larger is better).
fn headroom(e: &Entry, demand: usize) -> (bool, bool, i64, i64) {
    let free = e.free_tokens(demand);
    (e.slots() > 0, free >= demand as i64, -e.load(), free)
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

    /// Takes a report in. A report from an executor that was declared lost
    /// makes it live again (it was slow, or it restarted).
    pub fn observe(&mut self, report: CapacityReport, now: Instant) {
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
                e.lost = false;
            }
            None => {
                tracing::info!(executor = %report.executor_id, slot = report.slot, "executor seen");
                self.index
                    .insert(report.executor_id.clone(), self.entries.len());
                self.entries.push(Entry {
                    report,
                    seen: now,
                    sent_since_report: 0,
                    lost: false,
                });
            }
        }
    }

    /// Marks executors silent past the timeout as lost and returns them
    /// (each once).
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        let mut lost = Vec::new();
        for e in self.entries.iter_mut() {
            if !e.lost && now.saturating_duration_since(e.seen) > self.timeout {
                e.lost = true;
                lost.push(e.report.executor_id.clone());
            }
        }
        lost
    }

    /// The executor with the most headroom for a request of `demand` tokens
    /// (prompt + max_tokens) on artifact `sha256`: one with a free sequence
    /// slot and KV room for the request first, then the least loaded
    /// (running, waiting and sent since its report), then the most free KV.
    /// Free KV is a constraint rather than the first preference: two
    /// executors with room for the request serve it alike, and a step's time
    /// grows with its batch, so ranking by KV sent every request of a burst
    /// to one executor while another with a few blocks less stood idle.
    /// Under [`RoutingPolicy::PowerOfChoices`] the ranking covers only the
    /// executors drawn. `None` when no executor serving it is alive and ready.
    pub fn pick(&mut self, sha256: &str, demand: usize, now: Instant) -> Option<Choice> {
        self.pick_excluding(sha256, demand, now, &[])
    }

    /// `preferred` (the executor holding the request's prefix in its cache)
    /// when it takes work, has a free sequence slot and KV room for the whole
    /// request, and carries at most [`affinity_allowance`] more requests
    /// than the executor routing would take otherwise (a quarter of its
    /// slots): a cache hit is worth a little imbalance, not a queue. Otherwise
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
        demand: usize,
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
                    && e.free_tokens(demand) >= demand as i64
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
        Some(self.commit(chosen))
    }

    /// [`CapacityView::pick`] among the executors not in `tried`.
    pub fn pick_excluding(
        &mut self,
        sha256: &str,
        demand: usize,
        now: Instant,
        tried: &[String],
    ) -> Option<Choice> {
        let i = self.choose(sha256, demand, now, tried)?;
        Some(self.commit(i))
    }

    /// Counts a send to entry `i` and names it.
    fn commit(&mut self, i: usize) -> Choice {
        let e = &mut self.entries[i];
        e.sent_since_report += 1;
        Choice {
            executor_id: e.report.executor_id.clone(),
            slot: e.report.slot,
        }
    }

    /// The index of the executor the policy takes, without counting a send.
    fn choose(
        &mut self,
        sha256: &str,
        demand: usize,
        now: Instant,
        tried: &[String],
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

    /// The summed load of the live executors serving `sha256`, as admission
    /// reads an engine's.
    pub fn stats(&self, sha256: &str, now: Instant) -> EngineStats {
        let mut s = EngineStats::default();
        for e in self
            .entries
            .iter()
            .filter(|e| e.takes_work(sha256, now, self.timeout))
        {
            let r = &e.report;
            s.interactive.running += r.running as usize;
            s.interactive.waiting += r.waiting as usize + e.sent_since_report as usize;
            s.waiting_tokens += r.waiting_tokens as usize;
            s.kv_blocks_total += r.kv_blocks_total as usize;
            s.kv_blocks_free += r.kv_blocks_free as usize;
            s.kv_blocks_used +=
                (r.kv_blocks_total - r.kv_blocks_free.min(r.kv_blocks_total)) as usize;
            s.tokens_per_second_ewma += r.tokens_per_second;
            s.prefill_tokens_per_second_ewma += r.prefill_tokens_per_second;
            s.decode_tokens_per_second_ewma += r.decode_tokens_per_second;
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
mod tests {
    use super::*;
    use stoker_schemas::transport::TRANSPORT_VERSION;

    fn report(id: &str, slot: i32, running: u32, free_blocks: u64) -> CapacityReport {
        CapacityReport {
            v: TRANSPORT_VERSION,
            executor_id: id.into(),
            deployment_id: "d".into(),
            revision_id: "r".into(),
            model_sha256: "sha".into(),
            slot,
            ready: true,
            draining: false,
            running,
            waiting: 0,
            waiting_tokens: 0,
            kv_blocks_total: 100,
            kv_blocks_free: free_blocks,
            block_size: 16,
            max_num_seqs: 8,
            tokens_per_second: 10.0,
            prefill_tokens_per_second: 100.0,
            decode_tokens_per_second: 10.0,
            seq: 1,
            sent_unix_ms: 0,
        }
    }

    #[test]
    fn routes_by_headroom_and_counts_what_it_sent() {
        let t0 = Instant::now();
        let mut v = CapacityView::new(Duration::from_millis(1500));
        v.observe(report("a", 0, 0, 100), t0);
        v.observe(report("b", 1, 0, 50), t0);
        // Both have room for a 100-token request: the load alternates, and
        // a's larger free KV (1600 tokens against 800) breaks the ties, until
        // what was sent since the reports fills both executors' 8 slots.
        let picks: Vec<String> = (0..16)
            .map(|_| v.pick("sha", 100, t0).unwrap().executor_id)
            .collect();
        assert_eq!(picks, ["a", "b"].repeat(8), "{picks:?}");
        // No free slot anywhere: the one with KV room for the request.
        assert_eq!(v.pick("sha", 100, t0).unwrap().executor_id, "a");
        // Fresh reports reset what was counted.
        v.observe(report("a", 0, 8, 100), t0);
        v.observe(report("b", 1, 0, 50), t0);
        // a has no free slot now: b wins although a has more KV.
        assert_eq!(v.pick("sha", 100, t0).unwrap().executor_id, "b");
        // A retry goes elsewhere, or nowhere.
        let tried = ["b".to_string()];
        assert_eq!(
            v.pick_excluding("sha", 100, t0, &tried)
                .unwrap()
                .executor_id,
            "a"
        );
        let both = ["a".to_string(), "b".to_string()];
        assert_eq!(v.pick_excluding("sha", 100, t0, &both), None);
    }

    #[test]
    fn the_configured_default_is_the_views_default() {
        use crate::config::Routing;
        assert_eq!(
            RoutingPolicy::from(Routing::default()),
            RoutingPolicy::default()
        );
        assert_eq!(
            RoutingPolicy::from(Routing::MaxHeadroom),
            RoutingPolicy::MaxHeadroom
        );
    }

    #[test]
    fn the_affinity_allowance_is_a_quarter_of_the_alternatives_load() {
        let mut r = report("a", 0, 0, 100);
        r.max_num_seqs = 64;
        let e = Entry {
            report: r,
            seen: Instant::now(),
            sent_since_report: 0,
            lost: false,
        };
        // At least one, a quarter of the alternative's load, and at most a
        // quarter of the executor's slots.
        assert_eq!(affinity_allowance(&e, 0), 16);
        assert_eq!(affinity_allowance(&e, 200), 16);
    }

    #[test]
    fn a_preferred_executor_is_taken_while_it_has_headroom() {
        let t0 = Instant::now();
        let mut v = CapacityView::new(Duration::from_millis(1500));
        v.observe(report("a", 0, 0, 100), t0);
        v.observe(report("b", 1, 0, 50), t0);
        // b holds the prefix: preferred although a has more headroom, while
        // b carries at most 2 (a quarter of 8 slots) more requests than a.
        let picks: Vec<String> = (0..5)
            .map(|_| {
                v.pick_preferring("sha", 10, t0, Some("b"))
                    .unwrap()
                    .executor_id
            })
            .collect();
        assert_eq!(picks, ["b", "b", "b", "a", "b"], "{picks:?}");
        // No free slot on b: headroom decides whatever the load.
        v.observe(report("a", 0, 7, 100), t0);
        v.observe(report("b", 1, 8, 50), t0);
        assert_eq!(
            v.pick_preferring("sha", 10, t0, Some("b"))
                .unwrap()
                .executor_id,
            "a"
        );
        v.observe(report("a", 0, 0, 100), t0);
        // Not enough KV for the request on the preferred one: headroom decides.
        v.observe(report("b", 1, 0, 2), t0);
        assert_eq!(
            v.pick_preferring("sha", 100, t0, Some("b"))
                .unwrap()
                .executor_id,
            "a"
        );
        // Unknown, lost or draining preferences are ignored (equal loads:
        // a's free KV decides).
        v.observe(report("a", 0, 0, 100), t0);
        assert_eq!(
            v.pick_preferring("sha", 1, t0, Some("zz"))
                .unwrap()
                .executor_id,
            "a"
        );
        let mut draining = report("b", 1, 0, 100);
        draining.draining = true;
        v.observe(draining, t0);
        assert_eq!(
            v.pick_preferring("sha", 1, t0, Some("b"))
                .unwrap()
                .executor_id,
            "a"
        );
    }

    #[test]
    fn silent_executors_are_lost_once_and_not_routed_to() {
        let t0 = Instant::now();
        let mut v = CapacityView::new(Duration::from_millis(1500));
        v.observe(report("a", 0, 0, 100), t0);
        v.observe(report("b", 1, 0, 10), t0);
        let t1 = t0 + Duration::from_millis(1000);
        v.observe(report("b", 1, 0, 10), t1);
        let t2 = t0 + Duration::from_millis(1600);
        assert_eq!(v.expire(t2), vec!["a".to_string()]);
        assert!(v.expire(t2).is_empty(), "reported once");
        assert_eq!(v.pick("sha", 10, t2).unwrap().executor_id, "b");
        assert_eq!(v.stats("sha", t2).kv_blocks_free, 10);
        // Back from the dead: routed to again.
        v.observe(report("a", 0, 0, 100), t2);
        assert_eq!(v.pick("sha", 10, t2).unwrap().executor_id, "a");
    }

    #[test]
    fn only_ready_executors_of_the_same_artifact_take_work() {
        let t0 = Instant::now();
        let mut v = CapacityView::new(Duration::from_millis(1500));
        let mut draining = report("a", 0, 0, 100);
        draining.draining = true;
        let mut other = report("b", 1, 0, 100);
        other.model_sha256 = "other".into();
        let mut loading = report("c", 2, 0, 100);
        loading.ready = false;
        v.observe(draining, t0);
        v.observe(other, t0);
        v.observe(loading, t0);
        assert_eq!(v.pick("sha", 1, t0), None);
        assert!(!v.any_ready("sha", t0));
        assert!(v.any_ready("other", t0));
        assert_eq!(v.stats("sha", t0), EngineStats::default());
    }
    fn two_choices(seed: u64) -> CapacityView {
        CapacityView::with_policy(
            Duration::from_millis(1500),
            RoutingPolicy::PowerOfChoices { d: 2 },
            seed,
        )
    }

    #[test]
    fn two_choices_sample_among_the_executors_that_take_work() {
        let t0 = Instant::now();
        let mut v = two_choices(7);
        // 10 executors, all idle: the lower id of the two drawn wins the
        // tie, so over many draws every executor but the last is picked
        // (the most headroom would pick e0 every time).
        for i in 0..10 {
            v.observe(report(&format!("e{i}"), i, 0, 100), t0);
        }
        let mut seen = std::collections::HashSet::new();
        for _ in 0..400 {
            seen.insert(v.pick("sha", 10, t0).unwrap().executor_id);
            // Fresh reports keep every executor equal.
            for i in 0..10 {
                v.observe(report(&format!("e{i}"), i, 0, 100), t0);
            }
        }
        assert_eq!(seen.len(), 9, "{seen:?}");
        assert!(!seen.contains("e9"), "{seen:?}");
        // The better of the two drawn: with one executor far more loaded
        // than the rest, it is never taken while the draws are distinct.
        for i in 0..10 {
            v.observe(report(&format!("e{i}"), i, 0, 100), t0);
        }
        v.observe(report("e3", 3, 7, 100), t0);
        for _ in 0..200 {
            assert_ne!(v.pick("sha", 10, t0).unwrap().executor_id, "e3");
            for i in (0..10).filter(|&i| i != 3) {
                v.observe(report(&format!("e{i}"), i, 0, 100), t0);
            }
        }
    }

    #[test]
    fn two_choices_never_pick_an_executor_that_takes_no_work() {
        let t0 = Instant::now();
        let mut v = two_choices(11);
        let mut draining = report("draining", 0, 0, 100);
        draining.draining = true;
        let mut loading = report("loading", 1, 0, 100);
        loading.ready = false;
        let mut other = report("other", 2, 0, 100);
        other.model_sha256 = "other".into();
        v.observe(draining, t0);
        v.observe(loading, t0);
        v.observe(other, t0);
        v.observe(report("lost", 3, 0, 100), t0 - Duration::from_millis(2000));
        assert_eq!(v.pick("sha", 10, t0), None);
        // One good executor among many that take no work: always it, loaded
        // or not (a sample smaller than d is all the eligible).
        v.observe(report("good", 4, 8, 100), t0);
        for _ in 0..50 {
            assert_eq!(v.pick("sha", 10, t0).unwrap().executor_id, "good");
        }
        assert_eq!(
            v.pick_preferring("sha", 10, t0, Some("draining"))
                .unwrap()
                .executor_id,
            "good"
        );
    }

    #[test]
    fn two_choices_respect_tried() {
        let t0 = Instant::now();
        let mut v = two_choices(3);
        for i in 0..6 {
            v.observe(report(&format!("e{i}"), i, 0, 100), t0);
        }
        let tried: Vec<String> = (0..5).map(|i| format!("e{i}")).collect();
        for _ in 0..50 {
            assert_eq!(
                v.pick_excluding("sha", 10, t0, &tried).unwrap().executor_id,
                "e5"
            );
        }
        let all: Vec<String> = (0..6).map(|i| format!("e{i}")).collect();
        assert_eq!(v.pick_excluding("sha", 10, t0, &all), None);
    }

    #[test]
    fn enough_choices_are_the_most_headroom() {
        let t0 = Instant::now();
        let mut many = CapacityView::with_policy(
            Duration::from_millis(1500),
            RoutingPolicy::PowerOfChoices { d: 5 },
            1,
        );
        let mut max =
            CapacityView::with_policy(Duration::from_millis(1500), RoutingPolicy::MaxHeadroom, 1);
        for v in [&mut many, &mut max] {
            for i in 0..5 {
                v.observe(report(&format!("e{i}"), i, i as u32, 100 - i as u64), t0);
            }
        }
        for _ in 0..40 {
            assert_eq!(many.pick("sha", 10, t0), max.pick("sha", 10, t0));
        }
    }

    #[test]
    fn two_choices_keep_the_preference_within_the_drawn_alternative() {
        let t0 = Instant::now();
        let mut v = two_choices(5);
        for i in 0..8 {
            v.observe(report(&format!("e{i}"), i, 0, 100), t0);
        }
        // e0 holds the prefix: taken while it carries at most one more than
        // the better of the two drawn (idle: a quarter of nothing, at least
        // one).
        v.observe(report("e0", 0, 1, 100), t0);
        assert_eq!(
            v.pick_preferring("sha", 10, t0, Some("e0"))
                .unwrap()
                .executor_id,
            "e0"
        );
        // 4 more than every alternative: never e0, whichever two are drawn.
        v.observe(report("e0", 0, 4, 100), t0);
        for _ in 0..50 {
            assert_ne!(
                v.pick_preferring("sha", 10, t0, Some("e0"))
                    .unwrap()
                    .executor_id,
                "e0"
            );
            for i in 1..8 {
                v.observe(report(&format!("e{i}"), i, 0, 100), t0);
            }
        }
    }
}
