//! One lane's waiting queue: FIFO within a tenant, and between tenants either
//! the tenant with the least normalized service first (fair share, the
//! default) or round robin one request at a time.
//!
//! vLLM admits strictly first-come-first-served; stoker shares a lane between
//! tenants instead, so one tenant's burst cannot starve another's request.
//! With fair share ([`super::fair`]) the scheduler asks for the head of the
//! tenant whose tokens so far, divided by its weight, are fewest
//! ([`TenantQueue::peek_by`]): a tenant of long prompts and one of short
//! prompts get tokens, not requests, in equal measure. Without it
//! ([`TenantQueue::peek`]) tenants take turns a request each (every request
//! weighs one). The ring holds only tenants with waiting requests and breaks
//! ties between equal tenants in turn order. Preempted sequences go back to
//! the very front of their tenant's queue (and their tenant to the head of
//! the ring), so recomputation resumes before that tenant's new work.
//!
//! Cost: `peek`, `pop` and `push_back` are O(1) amortised; `peek_by`, `take`
//! and `push_front` are linear in the number of waiting tenants; `remove`
//! (cancelling a waiting request) is linear in that tenant's queue and in
//! the number of waiting tenants.

use std::collections::{HashMap, VecDeque};

use crate::ids::{SeqId, TenantId};

#[derive(Debug, Default)]
pub struct TenantQueue {
    /// Tenants with at least one waiting sequence; the front is served next.
    ring: VecDeque<TenantId>,
    per_tenant: HashMap<TenantId, VecDeque<SeqId>>,
    len: usize,
}

impl TenantQueue {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues a new request behind its tenant's others.
    pub fn push_back(&mut self, tenant: &TenantId, seq: SeqId) {
        let q = self.per_tenant.entry(tenant.clone()).or_default();
        if q.is_empty() {
            self.ring.push_back(tenant.clone());
        }
        q.push_back(seq);
        self.len += 1;
    }

    /// Puts a preempted request first in line, lane-wide.
    pub fn push_front(&mut self, tenant: &TenantId, seq: SeqId) {
        let q = self.per_tenant.entry(tenant.clone()).or_default();
        if !q.is_empty() {
            let pos = self.ring.iter().position(|t| t == tenant);
            if let Some(pos) = pos {
                self.ring.remove(pos);
            }
        }
        q.push_front(seq);
        self.ring.push_front(tenant.clone());
        self.len += 1;
    }

    /// The request [`pop`](Self::pop) would return.
    pub fn peek(&self) -> Option<SeqId> {
        let tenant = self.ring.front()?;
        self.per_tenant.get(tenant)?.front().copied()
    }

    /// The head of the tenant with the least `key`, the first in turn order
    /// among equals.
    pub fn peek_by(&self, key: impl Fn(&TenantId) -> f64) -> Option<SeqId> {
        let mut best: Option<(&TenantId, f64)> = None;
        for tenant in &self.ring {
            let k = key(tenant);
            if best.is_none_or(|(_, b)| k < b) {
                best = Some((tenant, k));
            }
        }
        self.per_tenant.get(best?.0)?.front().copied()
    }

    /// Takes the next request and moves its tenant to the back of the ring.
    pub fn pop(&mut self) -> Option<SeqId> {
        let tenant = self.ring.front()?.clone();
        self.take(&tenant)
    }

    /// Takes the head of `tenant`'s queue and moves the tenant to the back
    /// of the ring.
    pub fn take(&mut self, tenant: &TenantId) -> Option<SeqId> {
        let q = self.per_tenant.get_mut(tenant)?;
        let seq = q.pop_front()?;
        self.len -= 1;
        let empty = q.is_empty();
        let pos = self.ring.iter().position(|t| t == tenant);
        let moved = pos.and_then(|p| self.ring.remove(p));
        if empty {
            self.per_tenant.remove(tenant);
        } else if let Some(t) = moved {
            self.ring.push_back(t);
        }
        Some(seq)
    }

    /// Removes a request wherever it is; returns whether it was queued.
    pub fn remove(&mut self, tenant: &TenantId, seq: SeqId) -> bool {
        let Some(q) = self.per_tenant.get_mut(tenant) else {
            return false;
        };
        let Some(pos) = q.iter().position(|&s| s == seq) else {
            return false;
        };
        q.remove(pos);
        self.len -= 1;
        if q.is_empty() {
            self.per_tenant.remove(tenant);
            self.ring.retain(|t| t != tenant);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str) -> TenantId {
        TenantId(name.to_string())
    }

    fn drain(q: &mut TenantQueue) -> Vec<u64> {
        std::iter::from_fn(|| q.pop()).map(|s| s.0).collect()
    }

    #[test]
    fn tenants_take_turns_and_each_tenant_is_fifo() {
        let mut q = TenantQueue::default();
        for i in 0..4 {
            q.push_back(&t("a"), SeqId(i));
        }
        q.push_back(&t("b"), SeqId(10));
        q.push_back(&t("c"), SeqId(20));
        q.push_back(&t("b"), SeqId(11));
        assert_eq!(q.len(), 7);
        assert_eq!(q.peek(), Some(SeqId(0)));
        assert_eq!(drain(&mut q), vec![0, 10, 20, 1, 11, 2, 3]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_preempted_request_goes_to_the_front_of_the_lane() {
        let mut q = TenantQueue::default();
        q.push_back(&t("a"), SeqId(1));
        q.push_back(&t("b"), SeqId(2));
        q.push_back(&t("b"), SeqId(3));
        q.push_front(&t("b"), SeqId(9));
        assert_eq!(drain(&mut q), vec![9, 1, 2, 3]);
        q.push_front(&t("c"), SeqId(5));
        assert_eq!(drain(&mut q), vec![5]);
    }

    /// Pops by least key until empty, charging each popped request's
    /// `cost` to its tenant's key.
    fn drain_by(q: &mut TenantQueue, cost: impl Fn(u64) -> f64) -> Vec<u64> {
        let mut keys: HashMap<TenantId, f64> = HashMap::new();
        let mut out = Vec::new();
        while let Some(id) = q.peek_by(|t| keys.get(t).copied().unwrap_or(0.0)) {
            let tenant = if id.0 < 100 { t("long") } else { t("short") };
            assert_eq!(q.take(&tenant), Some(id));
            *keys.entry(tenant).or_default() += cost(id.0);
            out.push(id.0);
        }
        out
    }

    #[test]
    fn by_least_key_a_tenant_of_short_requests_goes_as_often_as_it_is_cheap() {
        let mut q = TenantQueue::default();
        for i in 0..3 {
            q.push_back(&t("long"), SeqId(i));
        }
        for i in 100..110 {
            q.push_back(&t("short"), SeqId(i));
        }
        // Long requests cost 40 tokens, short ones 10: after each long one
        // the short tenant catches up with four requests.
        let order = drain_by(&mut q, |id| if id < 100 { 40.0 } else { 10.0 });
        assert_eq!(
            order,
            vec![0, 100, 101, 102, 103, 1, 104, 105, 106, 107, 2, 108, 109]
        );
        assert!(q.is_empty());
        assert_eq!(q.peek_by(|_| 0.0), None);
    }

    #[test]
    fn by_least_key_equal_tenants_take_turns_and_preempted_work_leads_its_tenant() {
        let mut q = TenantQueue::default();
        for i in 0..3 {
            q.push_back(&t("long"), SeqId(i));
            q.push_back(&t("short"), SeqId(100 + i));
        }
        q.push_front(&t("short"), SeqId(150));
        // Equal costs: turns, the preempted request first in its tenant.
        let order = drain_by(&mut q, |_| 1.0);
        assert_eq!(order, vec![150, 0, 100, 1, 101, 2, 102]);
    }

    #[test]
    fn removing_a_request_keeps_the_rest_in_order() {
        let mut q = TenantQueue::default();
        q.push_back(&t("a"), SeqId(1));
        q.push_back(&t("b"), SeqId(2));
        q.push_back(&t("a"), SeqId(3));
        assert!(q.remove(&t("b"), SeqId(2)));
        assert!(!q.remove(&t("b"), SeqId(2)));
        assert!(!q.remove(&t("a"), SeqId(7)));
        assert_eq!(drain(&mut q), vec![1, 3]);
    }
}
