//! The API's live view of the executors, built from their capacity reports:
//! which are alive, which to route the next request to, and the summed load
//! that admission reads. Pure bookkeeping (the clock is passed in), so it is
//! tested without a broker.

use std::collections::HashMap;
use std::time::{Duration, Instant};

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

#[derive(Debug)]
pub struct CapacityView {
    entries: HashMap<String, Entry>,
    timeout: Duration,
}

impl CapacityView {
    pub fn new(timeout: Duration) -> Self {
        CapacityView {
            entries: HashMap::new(),
            timeout,
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Takes a report in. A report from an executor that was declared lost
    /// makes it live again (it was slow, or it restarted).
    pub fn observe(&mut self, report: CapacityReport, now: Instant) {
        let id = report.executor_id.clone();
        match self.entries.get_mut(&id) {
            Some(e) => {
                if e.lost {
                    tracing::info!(executor = %id, "executor reports again");
                }
                e.report = report;
                e.seen = now;
                e.sent_since_report = 0;
                e.lost = false;
            }
            None => {
                tracing::info!(executor = %id, slot = report.slot, "executor seen");
                self.entries.insert(
                    id,
                    Entry {
                        report,
                        seen: now,
                        sent_since_report: 0,
                        lost: false,
                    },
                );
            }
        }
    }

    /// Marks executors silent past the timeout as lost and returns them
    /// (each once).
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        let mut lost = Vec::new();
        for (id, e) in self.entries.iter_mut() {
            if !e.lost && now.saturating_duration_since(e.seen) > self.timeout {
                e.lost = true;
                lost.push(id.clone());
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
    /// `None` when no executor serving it is alive and ready.
    pub fn pick(&mut self, sha256: &str, demand: usize, now: Instant) -> Option<Choice> {
        self.pick_excluding(sha256, demand, now, &[])
    }

    /// `preferred` (the executor holding the request's prefix in its cache)
    /// when it takes work, has a free sequence slot and KV room for the whole
    /// request, and carries at most a quarter of its slots (at least one)
    /// more requests than the least loaded executor: a cache hit is worth a
    /// little imbalance, not a queue. Otherwise [`CapacityView::pick`].
    pub fn pick_preferring(
        &mut self,
        sha256: &str,
        demand: usize,
        now: Instant,
        preferred: Option<&str>,
    ) -> Option<Choice> {
        let timeout = self.timeout;
        let least = self
            .entries
            .values()
            .filter(|e| e.takes_work(sha256, now, timeout))
            .map(Entry::load)
            .min();
        if let (Some(e), Some(least)) = (preferred.and_then(|id| self.entries.get_mut(id)), least)
            && e.takes_work(sha256, now, timeout)
            && e.slots() > 0
            && e.free_tokens(demand) >= demand as i64
            && e.load() - least <= (e.report.max_num_seqs as i64 / 4).max(1)
        {
            e.sent_since_report += 1;
            return Some(Choice {
                executor_id: e.report.executor_id.clone(),
                slot: e.report.slot,
            });
        }
        self.pick(sha256, demand, now)
    }

    /// [`CapacityView::pick`] among the executors not in `tried`.
    pub fn pick_excluding(
        &mut self,
        sha256: &str,
        demand: usize,
        now: Instant,
        tried: &[String],
    ) -> Option<Choice> {
        let timeout = self.timeout;
        let best = self
            .entries
            .values_mut()
            .filter(|e| e.takes_work(sha256, now, timeout))
            .filter(|e| !tried.contains(&e.report.executor_id))
            .max_by(|a, b| {
                let key = |e: &Entry| {
                    let free = e.free_tokens(demand);
                    (e.slots() > 0, free >= demand as i64, -e.load(), free)
                };
                key(a)
                    .cmp(&key(b))
                    .then_with(|| b.report.executor_id.cmp(&a.report.executor_id))
            })?;
        best.sent_since_report += 1;
        Some(Choice {
            executor_id: best.report.executor_id.clone(),
            slot: best.report.slot,
        })
    }

    /// Whether some executor serving `sha256` takes work now.
    pub fn any_ready(&self, sha256: &str, now: Instant) -> bool {
        self.entries
            .values()
            .any(|e| e.takes_work(sha256, now, self.timeout))
    }

    /// The summed load of the live executors serving `sha256`, as admission
    /// reads an engine's.
    pub fn stats(&self, sha256: &str, now: Instant) -> EngineStats {
        let mut s = EngineStats::default();
        for e in self
            .entries
            .values()
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
            .values()
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
}
