//! One lane's waiting queue: round-robin across tenants, FIFO within a tenant.
//!
//! vLLM admits strictly first-come-first-served; stoker shares a lane fairly
//! between tenants instead, so one tenant's burst cannot starve another's single
//! request (the per-tenant deficit idea of fair queueing, with every request
//! weighing one). The ring holds only tenants with waiting requests. Preempted
//! sequences go back to the very front (their tenant moves to the head of the
//! ring), so recomputation resumes before new work is admitted.
//!
//! Cost: `peek`, `pop` and `push_*` are O(1) amortised; `remove` (cancelling a
//! waiting request) is linear in that tenant's queue and in the number of
//! waiting tenants.

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

    /// Takes the next request and moves its tenant to the back of the ring.
    pub fn pop(&mut self) -> Option<SeqId> {
        let tenant = self.ring.pop_front()?;
        let q = self.per_tenant.get_mut(&tenant)?;
        let seq = q.pop_front()?;
        self.len -= 1;
        if q.is_empty() {
            self.per_tenant.remove(&tenant);
        } else {
            self.ring.push_back(tenant);
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
