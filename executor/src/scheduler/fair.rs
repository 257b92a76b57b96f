//! Token-weighted fair share between the tenants of a lane.
//!
//! A module of its own because it is one policy that three places of the
//! step consult (admission order, the order prefills get the step's budget,
//! preemption victims), and because [`super::step`] would otherwise outgrow
//! a readable size.
//!
//! Each lane keeps a virtual token counter per tenant, in the manner of VTC
//! ("Fairness in Serving Large Language Models", Sheng et al., OSDI 2024)
//! and of start-time fair queueing: the prefill and decode tokens computed for
//! the tenant, each divided by the weight of its request
//! ([`SeqSpec::tenant_weight`](super::SeqSpec::tenant_weight)). Tokens, not
//! requests: a tenant of 400-token prompts is charged ten times a tenant of
//! 40-token prompts per request. The counter is charged when the forward pass
//! completes ([`Scheduler::complete_step`]); while a step is planned, its
//! chunks so far count as pending, so the order within one step already
//! follows the tokens it hands out. The tenant with the least counter:
//! - is admitted first (FIFO within a tenant, preempted sequences first);
//! - gets the step's prefill budget first, running prefills and admissions
//!   alike, so a short prompt of a light tenant does not wait behind a heavy
//!   tenant's long chunked prefills. Decoders still all run first;
//! - is preempted last: under KV pressure the victim is the newest sequence
//!   of the tenant with the largest counter (ties: today's rule, newest first
//!   and never older than the sequence that needs the blocks), batch lane
//!   before interactive as before. A waiting request may also take a slot
//!   or blocks from a running sequence of its own lane whose tenant is at
//!   least one quantum (`max_batched_tokens` normalized tokens) further over
//!   its share: that margin keeps two busy tenants from taking blocks back
//!   and forth, and a victim's written blocks stay in the prefix cache, so
//!   its recompute is mostly cache hits.
//!
//! Once a tenant's prefill is in a step, tenants more than a quantum further
//! over their share get no prefill in that step (their decoders still run):
//! the step that computes a light tenant's prompt is only as long as the
//! decoders and that prompt, so its time to first token does not grow with
//! another tenant's flood. Tenants within a quantum of each other share
//! steps as usual.
//!
//! No banking of credit: a tenant that gets its first sequence in the lane
//! starts at most one quantum below the least counter of the tenants already
//! active there (VTC's lift, with the one quantum a newly backlogged flow
//! gets in deficit round robin), and after every step no active tenant lags
//! the most-served one by more than [`LAG_QUANTA`] quanta, so a tenant that
//! stays active but uses little (a chat decoding beside a flood) can claim at
//! most that much ahead of the others once it has more work. When a lane
//! empties, every counter is forgotten. Accounts of idle tenants are kept
//! only while they are ahead of the active ones (their debt), so memory is
//! O(tenants with work).
//!
//! Cost: a step charges one hash lookup per chunk and O(active tenants) to
//! settle; ordering is O(prefills x tenants) per step and a victim choice
//! O(running) of the lane.

use std::collections::HashMap;

use crate::ids::{Lane, SeqId, TenantId};

use super::Scheduler;
use super::plan::Admit;
use super::sequence::Sequence;
use super::step::Step;

/// Most quanta (`max_batched_tokens` normalized tokens) an active tenant may
/// lag the most-served active tenant of its lane. Two, so that one full step
/// given to a tenant of weight 1 never lifts a backlogged tenant it
/// overtook.
pub const LAG_QUANTA: f64 = 2.0;

/// One lane's virtual token counters.
#[derive(Debug, Default)]
pub(super) struct FairShare {
    accounts: HashMap<TenantId, Account>,
    /// Tenants with at least one sequence in the lane.
    active: usize,
}

#[derive(Debug, Default, Clone, Copy)]
struct Account {
    /// Normalized tokens computed for the tenant.
    served: f64,
    /// Normalized tokens of the step being planned.
    pending: f64,
    /// The tenant's sequences in the lane, waiting or running.
    seqs: usize,
}

impl FairShare {
    /// The tenant's counter, with the step being planned.
    pub(super) fn key(&self, tenant: &TenantId) -> f64 {
        self.accounts
            .get(tenant)
            .map_or(0.0, |a| a.served + a.pending)
    }

    fn active_keys(&self) -> impl Iterator<Item = f64> + '_ {
        self.accounts
            .values()
            .filter(|a| a.seqs > 0)
            .map(|a| a.served + a.pending)
    }

    /// A sequence of `tenant` entered the lane. A tenant that becomes
    /// active starts at most `credit` below the least-served active tenant.
    pub(super) fn join(&mut self, tenant: &TenantId, credit: f64) {
        let floor = self.active_keys().reduce(f64::min);
        let a = self.accounts.entry(tenant.clone()).or_default();
        if a.seqs == 0 {
            self.active += 1;
            if let Some(floor) = floor {
                a.served = a.served.max(floor - credit);
            }
        }
        a.seqs += 1;
    }

    /// A sequence of `tenant` left the lane (finished, cancelled, aborted).
    pub(super) fn leave(&mut self, tenant: &TenantId) {
        let Some(a) = self.accounts.get_mut(tenant) else {
            debug_assert!(false, "{tenant:?} left a lane it never joined");
            return;
        };
        a.seqs -= 1;
        if a.seqs > 0 {
            return;
        }
        self.active -= 1;
        if self.active == 0 {
            self.accounts.clear();
            return;
        }
        let served = a.served;
        // Not ahead of the active tenants: no debt to keep.
        if self
            .active_keys()
            .reduce(f64::min)
            .is_some_and(|f| served <= f)
        {
            self.accounts.remove(tenant);
        }
    }

    /// Counts `tokens` of a planned chunk as pending.
    pub(super) fn plan(&mut self, tenant: &TenantId, tokens: usize, weight: u32) {
        if let Some(a) = self.accounts.get_mut(tenant) {
            a.pending += normalized(tokens, weight);
        }
    }

    /// Takes back a planned chunk that was dropped from the step.
    pub(super) fn unplan(&mut self, tenant: &TenantId, tokens: usize, weight: u32) {
        if let Some(a) = self.accounts.get_mut(tenant) {
            a.pending = (a.pending - normalized(tokens, weight)).max(0.0);
        }
    }

    /// Forgets the pending charges (a new step is being planned).
    pub(super) fn clear_pending(&mut self) {
        for a in self.accounts.values_mut() {
            a.pending = 0.0;
        }
    }

    /// Charges `tokens` the forward pass computed.
    pub(super) fn charge(&mut self, tenant: &TenantId, tokens: usize, weight: u32) {
        if let Some(a) = self.accounts.get_mut(tenant) {
            a.served += normalized(tokens, weight);
        }
    }

    /// After a step's charges: clears pending, lifts active tenants that lag
    /// the most-served one by more than `max_lag`, drops idle accounts no
    /// longer ahead of every active one.
    pub(super) fn settle(&mut self, max_lag: f64) {
        self.clear_pending();
        let Some(top) = self.active_keys().reduce(f64::max) else {
            return;
        };
        for a in self.accounts.values_mut().filter(|a| a.seqs > 0) {
            a.served = a.served.max(top - max_lag);
        }
        if let Some(floor) = self.active_keys().reduce(f64::min) {
            self.accounts.retain(|_, a| a.seqs > 0 || a.served > floor);
        }
    }

    /// Tenants with an account: active ones and idle ones still ahead.
    pub(super) fn len(&self) -> usize {
        self.accounts.len()
    }
}

fn normalized(tokens: usize, weight: u32) -> f64 {
    tokens as f64 / weight.max(1) as f64
}

impl Scheduler {
    /// The normalized tokens (tokens divided by weight) `tenant` has been
    /// charged in `lane` since it became active there, after the lifts that
    /// stop it banking credit; `None` without fair share or for a tenant
    /// with no account.
    pub fn tenant_service(&self, lane: Lane, tenant: &TenantId) -> Option<f64> {
        self.fair[lane]
            .accounts
            .get(tenant)
            .map(|a| a.served + a.pending)
    }

    /// Tenants the fair-share accounts of `lane` remember.
    pub fn fair_share_accounts(&self, lane: Lane) -> usize {
        self.fair[lane].len()
    }

    /// One quantum of normalized tokens: a full step's budget.
    pub(super) fn quantum(&self) -> f64 {
        self.config.max_batched_tokens as f64
    }

    /// The fair-share key of a sequence's tenant.
    fn seq_key(&self, seq: &Sequence) -> f64 {
        self.fair[seq.lane].key(&seq.tenant)
    }

    /// The request admission would take next from `lane`'s queue.
    pub(super) fn next_waiting(&self, lane: Lane) -> Option<SeqId> {
        if self.config.fair_share {
            let fair = &self.fair[lane];
            self.waiting[lane].peek_by(|t| fair.key(t))
        } else {
            self.waiting[lane].peek()
        }
    }

    /// Takes `id`, the head [`next_waiting`](Self::next_waiting) returned,
    /// off its lane's queue.
    pub(super) fn take_waiting(&mut self, id: SeqId) {
        let seq = &self.seqs[&id];
        let taken = self.waiting[seq.lane].take(&seq.tenant);
        debug_assert_eq!(taken, Some(id));
    }

    /// Records a chunk granted in the step being planned.
    pub(super) fn note_planned(&mut self, id: SeqId, len: usize, add: bool) {
        if !self.config.fair_share {
            return;
        }
        let seq = &self.seqs[&id];
        let fair = &mut self.fair[seq.lane];
        if add {
            fair.plan(&seq.tenant, len, seq.tenant_weight);
        } else {
            fair.unplan(&seq.tenant, len, seq.tenant_weight);
        }
    }

    /// Charges the tokens of a completed chunk of `id`.
    pub(super) fn charge(&mut self, id: SeqId, len: usize) {
        if self.config.fair_share
            && let Some(seq) = self.seqs.get(&id)
        {
            self.fair[seq.lane].charge(&seq.tenant, len, seq.tenant_weight);
        }
    }

    /// After a completed step: see [`FairShare::settle`].
    pub(super) fn settle_fair_share(&mut self) {
        if self.config.fair_share {
            let lag = LAG_QUANTA * self.quantum();
            for lane in Lane::ALL {
                self.fair[lane].settle(lag);
            }
        }
    }

    /// The running sequence of `lane` with the largest (tenant key, arrival)
    /// among those `eligible` accepts (given the sequence and its key).
    fn heaviest_newest(
        &self,
        lane: Lane,
        eligible: impl Fn(&Sequence, f64) -> bool,
    ) -> Option<SeqId> {
        let mut best: Option<(f64, u64, SeqId)> = None;
        for id in &self.running[lane] {
            let seq = &self.seqs[id];
            let key = self.seq_key(seq);
            if !eligible(seq, key) {
                continue;
            }
            // Running lists are oldest first: a later equal key is newer.
            if best.is_none_or(|(k, a, _)| key > k || (key == k && seq.arrival > a)) {
                best = Some((key, seq.arrival, *id));
            }
        }
        best.map(|(_, _, id)| id)
    }

    /// The batch sequence interactive work preempts first: the newest of the
    /// tenant furthest over its share (fair share) or the newest.
    pub(super) fn batch_victim(&self) -> Option<SeqId> {
        if self.config.fair_share {
            self.heaviest_newest(Lane::Batch, |_, _| true)
        } else {
            self.running.batch.last().copied()
        }
    }

    /// The sequence of its own lane that running `id` preempts for blocks:
    /// the newest sequence of a tenant with more normalized service, the
    /// heaviest first; among tenants level with `id`'s (its own included),
    /// only sequences newer than `id`, newest first. None: `id` preempts
    /// itself. Without fair share: the newest newer sequence of the lane.
    pub(super) fn lane_victim(&self, id: SeqId) -> Option<SeqId> {
        let seq = &self.seqs[&id];
        if !self.config.fair_share {
            let newest = *self.running[seq.lane].last()?;
            return (self.seqs[&newest].arrival > seq.arrival).then_some(newest);
        }
        let mine = self.seq_key(seq);
        self.heaviest_newest(seq.lane, |v, key| {
            v.id != id && (key > mine || (key == mine && v.arrival > seq.arrival))
        })
    }

    /// With fair share, a running sequence of `lane` that the waiting
    /// `head` may preempt: the newest of the heaviest tenant at least a
    /// quantum further over its share than `head`'s tenant.
    pub(super) fn admission_victim(&self, lane: Lane, head: SeqId) -> Option<SeqId> {
        if !self.config.fair_share {
            return None;
        }
        let bar = self.seq_key(&self.seqs[&head]) + self.quantum();
        self.heaviest_newest(lane, |_, key| key > bar)
    }

    /// Blocks the sequences [`admission_victim`](Self::admission_victim)
    /// may pick from hold together.
    pub(super) fn admission_victim_blocks(&self, lane: Lane, head: SeqId) -> usize {
        if !self.config.fair_share {
            return 0;
        }
        let bar = self.seq_key(&self.seqs[&head]) + self.quantum();
        self.running[lane]
            .iter()
            .map(|id| &self.seqs[id])
            .filter(|s| self.seq_key(s) > bar)
            .map(|s| s.block_table.len())
            .sum()
    }

    /// Fair share's prefill stage of `lane`: running prefills (`prefills`,
    /// oldest first) and admissions, the tenant with the least normalized
    /// service first each time (within a tenant, its running prefills, oldest
    /// first, before its admissions), so the step's budget goes to light
    /// tenants first; once one tenant's prefill is in, tenants more than a
    /// quantum above it wait for the next step. Admissions stop at the first
    /// refusal and in a step where running work preempted for memory.
    /// Returns false when admission must stop for every lane, as
    /// [`admit_lane`](Self::admit_lane) does.
    pub(super) fn fair_prefills(
        &mut self,
        lane: Lane,
        prefills: &[SeqId],
        step: &mut Step,
        mut admitting: bool,
    ) -> bool {
        let mut groups: Vec<(TenantId, std::collections::VecDeque<SeqId>)> = Vec::new();
        for &id in prefills {
            let tenant = &self.seqs[&id].tenant;
            match groups.iter_mut().find(|(t, _)| t == tenant) {
                Some((_, q)) => q.push_back(id),
                None => groups.push((tenant.clone(), [id].into())),
            }
        }
        let mut open = true;
        // Once a tenant's prefill is in the step, tenants more than a quantum
        // further over their share wait for the next one.
        let mut cutoff = f64::INFINITY;
        loop {
            let fair = &self.fair[lane];
            let running = groups
                .iter()
                .enumerate()
                .filter(|(_, (_, q))| !q.is_empty())
                .map(|(i, (t, _))| (i, fair.key(t)))
                .reduce(|a, b| if b.1 < a.1 { b } else { a });
            admitting &= !step.pressure;
            let head_id = admitting.then(|| self.next_waiting(lane)).flatten();
            let head = head_id.map(|id| self.seq_key(&self.seqs[&id]));
            let next = match (running, head) {
                (None, None) => return open,
                (Some((_, key)), None) => key,
                (None, Some(h)) => h,
                (Some((_, key)), Some(h)) => key.min(h),
            };
            if next > cutoff {
                // A waiting head deferred so also holds back the batch lane.
                return open && head.is_none();
            }
            let chunks = step.plan.chunks.len();
            // On a tie between two tenants the waiting request goes first,
            // so a newcomer level with a tenant whose prompt is under way
            // does not wait a step; within a tenant, running work first.
            let head_first = |i: usize, key: f64, h: f64| {
                h < key
                    || (h == key && head_id.is_some_and(|w| self.seqs[&w].tenant != groups[i].0))
            };
            match (running, head) {
                (Some((i, key)), head) if head.is_none_or(|h| !head_first(i, key, h)) => {
                    let id = groups[i].1.pop_front().expect("a non-empty group");
                    self.schedule_if_running(id, step);
                }
                _ => match self.admit_next(lane, step) {
                    Admit::Admitted => {}
                    Admit::LaneDone => admitting = false,
                    Admit::Stop => {
                        admitting = false;
                        open = false;
                    }
                },
            }
            if cutoff.is_infinite() && step.plan.chunks.len() > chunks {
                cutoff = next + self.quantum();
            }
        }
    }
}
