//! One continuous-batching step: what runs, what is admitted, who is preempted.
//!
//! The step follows vLLM's v1 scheduler. A token budget
//! (`max_batched_tokens`) is spent, in order, on:
//! 1. running decoders (one uncomputed token), interactive then batch, so a
//!    long prefill can never delay a decode token (the budget is validated to
//!    cover `max_num_seqs` decoders);
//! 2. running prefills (chunked: at most the remaining budget), interactive then
//!    batch;
//! 3. admissions, interactive lane first, each lane round-robin across tenants,
//!    skipping full blocks found in the prefix cache but always computing at
//!    least the last token so its logits exist. Admission is skipped in a step
//!    that already preempted (memory is tight), as vLLM does.
//!
//! Blocks for every scheduled token are allocated before the plan is returned.
//! `num_computed` does NOT advance here: it advances in
//! [`Scheduler::complete_step`], after the forward pass has written the KV,
//! which is also when full blocks are registered in the prefix cache. Calling
//! `schedule` twice without completing simply plans the same tokens again.
//!
//! Preemption is by recompute (vLLM's default): the victim releases every block
//! and returns to the front of its lane's queue with its tokens kept and
//! `num_computed == 0`; on readmission the prefix cache usually returns most of
//! its blocks. A running sequence that cannot get blocks for its chunk, if it
//! is interactive, first preempts batch sequences (newest first) as long as
//! batch holds enough to cover the shortfall or nothing fits otherwise; then it
//! runs a shorter chunk if any token fits; then it preempts newer sequences of
//! its own lane (newest first); and finally it preempts itself. It never preempts an older sequence of
//! its own lane, so the oldest sequence of each lane always progresses, and
//! batch never preempts interactive. A sequence whose tokens need more blocks
//! than its lane may ever hold is aborted rather than preempted forever.
//!
//! Cost: O(running + admitted + preempted) bookkeeping plus one pool operation
//! per allocated or released block, and one SHA-256 per newly full block.

use crate::ids::{BLOCK_SIZE, Lane, SeqId};
use crate::kv::blocks_for;
use crate::kv::hash::extend_chain;

use super::Scheduler;
use super::plan::{AbortReason, ScheduledChunk, StepPlan};
use super::sequence::SeqStatus;

/// The plan under construction and the budget it has left.
struct Step {
    plan: StepPlan,
    budget: usize,
}

/// What stops the head of a waiting queue from being admitted.
enum Blocked {
    /// Not enough pool blocks for its first chunk.
    Blocks { needed: usize },
    /// The batch lane's block share is exhausted.
    LaneShare,
}

impl Scheduler {
    /// Plans one step. See the module documentation for the order and rules.
    pub fn schedule(&mut self) -> StepPlan {
        let mut step = Step {
            plan: StepPlan::default(),
            budget: self.config.max_batched_tokens,
        };
        let mut decoders = Vec::new();
        let mut prefills = Vec::new();
        for lane in Lane::ALL {
            for id in &self.running[lane] {
                match self.seqs[id].remaining() {
                    0 => {} // waiting for the engine to append a sampled token
                    1 => decoders.push(*id),
                    _ => prefills.push(*id),
                }
            }
        }
        let mut batch_left = self.batch_step_allowance();
        for id in decoders.into_iter().chain(prefills) {
            let Some(seq) = self.seqs.get(&id) else {
                continue;
            };
            if seq.status != SeqStatus::Running {
                continue;
            }
            if seq.lane == Lane::Batch {
                batch_left -=
                    self.with_budget_cap(batch_left, &mut step, |s, st| s.schedule_running(id, st));
            } else {
                self.schedule_running(id, &mut step);
            }
        }
        if step.plan.preempted.is_empty() {
            self.admit(&mut step, batch_left);
        }
        step.plan
    }

    /// Tokens the batch lane may take this step: none while interactive work
    /// waits or prefills (when configured to yield), else its step cap.
    fn batch_step_allowance(&self) -> usize {
        if self.config.batch_yields_to_prefill {
            let waiting = !self.waiting.interactive.is_empty();
            let prefilling = self
                .running
                .interactive
                .iter()
                .any(|id| self.seqs[id].remaining() > 1);
            if waiting || prefilling {
                return 0;
            }
        }
        match self.config.batch_max_step_tokens {
            0 => usize::MAX,
            cap => cap,
        }
    }

    /// Runs `f` with the step budget lowered to at most `cap`; returns the
    /// tokens it spent (which the real budget is charged).
    fn with_budget_cap(
        &mut self,
        cap: usize,
        step: &mut Step,
        f: impl FnOnce(&mut Self, &mut Step),
    ) -> usize {
        let full = step.budget;
        let allowed = full.min(cap);
        if allowed == 0 {
            return 0;
        }
        step.budget = allowed;
        f(self, step);
        let spent = allowed - step.budget;
        step.budget = full - spent;
        spent
    }

    /// Records that the forward pass wrote the KV of `plan`'s chunks: advances
    /// `num_computed` and registers every newly full block in the prefix cache.
    /// Chunks of sequences finished or cancelled since `schedule` are skipped,
    /// as are chunks that no longer match the sequence (a stale plan).
    pub fn complete_step(&mut self, plan: &StepPlan) {
        let root = self.kv.root_hash();
        let caching = self.kv.prefix_caching_enabled();
        for c in &plan.chunks {
            let Some(seq) = self.seqs.get_mut(&c.seq) else {
                continue;
            };
            let end = c.start + c.len;
            if seq.status != SeqStatus::Running
                || seq.num_computed != c.start
                || end > seq.tokens.len()
                || blocks_for(end) > seq.block_table.len()
            {
                tracing::warn!(seq = %c.seq, start = c.start, len = c.len, "skipping a stale chunk");
                continue;
            }
            seq.num_computed = end;
            if caching {
                extend_chain(
                    &root,
                    &mut seq.block_hashes,
                    &seq.tokens,
                    seq.ordered_prompt_len,
                );
                let full = end / BLOCK_SIZE;
                for i in seq.num_registered..full {
                    let registered = self.kv.register(seq.block_hashes[i], seq.block_table[i]);
                    debug_assert!(registered.is_ok(), "{registered:?}");
                }
                seq.num_registered = seq.num_registered.max(full);
            }
        }
    }

    /// Schedules the next chunk of a running sequence, preempting as needed.
    fn schedule_running(&mut self, id: SeqId, step: &mut Step) {
        let seq = &self.seqs[&id];
        let lane = seq.lane;
        let want = seq.remaining().min(step.budget);
        if want == 0 {
            return;
        }
        let needed_blocks = blocks_for(seq.tokens.len());
        let lane_limit = self.limits.blocks(lane);
        if needed_blocks > lane_limit {
            let reason = AbortReason::ExceedsLaneCapacity {
                lane,
                needed_blocks,
                lane_limit,
            };
            self.abort(id, reason, step);
            return;
        }
        loop {
            let seq = &self.seqs[&id];
            let headroom = self.free_block_headroom(lane);
            let capacity = (seq.block_table.len() + headroom) * BLOCK_SIZE;
            let len = want.min(capacity.saturating_sub(seq.num_computed));
            if len == want {
                return self.grant(id, len, step);
            }
            // Interactive work takes blocks from batch when batch could cover
            // the whole chunk, or when not even one token fits otherwise.
            let shortfall = blocks_for(seq.num_computed + want)
                .saturating_sub(seq.block_table.len() + headroom);
            if lane == Lane::Interactive
                && (shortfall <= self.lane_blocks.batch || len == 0)
                && let Some(&victim) = self.running.batch.last()
            {
                self.preempt(victim, step);
                continue;
            }
            if len > 0 {
                return self.grant(id, len, step);
            }
            match self.newest_newer_in_lane(id) {
                Some(victim) => self.preempt(victim, step),
                None => return self.preempt(id, step),
            }
        }
    }

    /// The newest running sequence of `id`'s lane that arrived after `id`.
    fn newest_newer_in_lane(&self, id: SeqId) -> Option<SeqId> {
        let seq = &self.seqs[&id];
        let newest = *self.running[seq.lane].last()?;
        (self.seqs[&newest].arrival > seq.arrival).then_some(newest)
    }

    /// Admits waiting sequences while budget, slots and blocks allow.
    fn admit(&mut self, step: &mut Step, batch_left: usize) {
        // An interactive head that cannot be admitted (no budget, slots or
        // blocks) also holds back the batch lane, so batch never takes what
        // interactive is waiting for.
        if self.admit_lane(Lane::Interactive, step) {
            self.with_budget_cap(batch_left, step, |s, st| {
                s.admit_lane(Lane::Batch, st);
            });
        }
    }

    /// Admits the heads of one lane's queue while budget, slots and blocks
    /// allow. False when admission must stop for every lane this step.
    fn admit_lane(&mut self, lane: Lane, step: &mut Step) -> bool {
        loop {
            if step.budget == 0 {
                return false;
            }
            let Some(id) = self.waiting[lane].peek() else {
                break;
            };
            if step.plan.preempted.contains(&id) {
                break; // preempted during this very step: not before the next
            }
            let running = self.running.interactive.len() + self.running.batch.len();
            if running >= self.limits.max_num_seqs {
                if lane == Lane::Interactive
                    && let Some(&victim) = self.running.batch.last()
                {
                    self.preempt(victim, step);
                    continue;
                }
                return false;
            }
            if self.running[lane].len() >= self.limits.seqs(lane) {
                break;
            }
            match self.try_admit(id, step) {
                Ok(()) => {}
                Err(Blocked::LaneShare) => break,
                Err(Blocked::Blocks { needed }) => {
                    // Interactive work may take blocks from batch, if the
                    // batch lane could possibly free enough.
                    let reachable = self.kv.num_available() + self.lane_blocks.batch;
                    if lane == Lane::Interactive
                        && needed <= reachable
                        && let Some(&victim) = self.running.batch.last()
                    {
                        self.preempt(victim, step);
                        continue;
                    }
                    return false;
                }
            }
        }
        true
    }

    /// Admits the head of its lane's queue with a first chunk, reusing cached
    /// prefix blocks, or says what blocks it.
    fn try_admit(&mut self, id: SeqId, step: &mut Step) -> Result<(), Blocked> {
        let root = self.kv.root_hash();
        let seq = self.seqs.get_mut(&id).expect("queued sequences are known");
        let lane = seq.lane;
        let cached = if self.kv.prefix_caching_enabled() {
            extend_chain(
                &root,
                &mut seq.block_hashes,
                &seq.tokens,
                seq.ordered_prompt_len,
            );
            // Leave at least the last token to compute, so logits exist.
            let max_hit = ((seq.tokens.len() - 1) / BLOCK_SIZE).min(seq.block_hashes.len());
            self.kv.lookup_prefix(&seq.block_hashes[..max_hit])
        } else {
            Vec::new()
        };
        let start = cached.len() * BLOCK_SIZE;
        let want = (seq.tokens.len() - start).min(step.budget);
        let new_blocks = blocks_for(start + want) - cached.len();
        if lane == Lane::Batch
            && self.lane_blocks.batch + cached.len() + new_blocks > self.limits.batch_blocks
        {
            return Err(Blocked::LaneShare);
        }
        let revived = cached.iter().filter(|&&b| self.kv.refcount(b) == 0).count();
        if new_blocks > self.kv.num_available() - revived {
            return Err(Blocked::Blocks {
                needed: new_blocks + revived,
            });
        }

        let popped = self.waiting[lane].pop();
        debug_assert_eq!(popped, Some(id));
        let seq = self.seqs.get_mut(&id).expect("queued sequences are known");
        self.waiting_tokens -= seq.waiting_estimate();
        for &b in &cached {
            let acquired = self.kv.acquire_cached(b);
            debug_assert!(acquired.is_ok(), "{acquired:?}");
        }
        self.kv.record_prefix_lookup(seq.tokens.len(), start);
        self.lane_blocks[lane] += cached.len();
        seq.num_registered = cached.len();
        seq.block_table = cached;
        seq.num_computed = start;
        seq.status = SeqStatus::Running;
        let arrival = seq.arrival;
        let seqs = &self.seqs;
        let pos = self.running[lane].partition_point(|s| seqs[s].arrival < arrival);
        self.running[lane].insert(pos, id);
        self.grant(id, want, step);
        Ok(())
    }

    /// Allocates blocks for `len` more tokens of `id` and adds its chunk.
    fn grant(&mut self, id: SeqId, len: usize, step: &mut Step) {
        let seq = self.seqs.get_mut(&id).expect("granted sequences are known");
        let mut len = len;
        while seq.block_table.len() < blocks_for(seq.num_computed + len) {
            let Some(b) = self.kv.allocate() else {
                debug_assert!(false, "allocation was checked before granting");
                len = (seq.block_table.len() * BLOCK_SIZE).saturating_sub(seq.num_computed);
                break;
            };
            seq.block_table.push(b);
            self.lane_blocks[seq.lane] += 1;
        }
        if len == 0 {
            return;
        }
        step.budget -= len;
        step.plan.chunks.push(ScheduledChunk {
            seq: id,
            lane: seq.lane,
            start: seq.num_computed,
            len,
            sample: seq.num_computed + len == seq.tokens.len(),
        });
    }

    /// Preempts a running sequence now, outside a step, exactly as memory
    /// pressure would (the engine's test hook). Refused for a sequence that is
    /// not running.
    pub fn preempt_now(&mut self, id: SeqId) -> Result<(), super::SchedulerError> {
        match self.seqs.get(&id) {
            None => return Err(super::SchedulerError::UnknownSeq(id)),
            Some(seq) if seq.status != SeqStatus::Running => {
                return Err(super::SchedulerError::NotRunning(id));
            }
            Some(_) => {}
        }
        let mut step = Step {
            plan: StepPlan::default(),
            budget: 0,
        };
        self.preempt(id, &mut step);
        Ok(())
    }

    /// Preempts a running sequence by recompute: it releases its blocks, drops
    /// any chunk planned for it this step, and waits at the front of its lane.
    fn preempt(&mut self, id: SeqId, step: &mut Step) {
        let Some(mut seq) = self.seqs.remove(&id) else {
            return;
        };
        debug_assert_eq!(seq.status, SeqStatus::Running);
        self.running[seq.lane].retain(|&s| s != id);
        self.release_blocks(&mut seq);
        seq.status = SeqStatus::Waiting;
        self.waiting[seq.lane].push_front(&seq.tenant, id);
        self.waiting_tokens += seq.waiting_estimate();
        self.preemptions[seq.lane] += 1;
        self.seqs.insert(id, seq);
        drop_chunk(id, step);
        step.plan.preempted.push(id);
        tracing::debug!(seq = %id, "preempted by recompute");
    }

    /// Removes a sequence for good and reports why in the plan.
    fn abort(&mut self, id: SeqId, reason: AbortReason, step: &mut Step) {
        if self.remove(id).is_ok() {
            self.aborted += 1;
            drop_chunk(id, step);
            step.plan.aborted.push((id, reason));
            tracing::warn!(seq = %id, %reason, "aborted by the scheduler");
        }
    }
}

/// Removes `id`'s chunk from the plan, if any, and refunds its tokens.
fn drop_chunk(id: SeqId, step: &mut Step) {
    if let Some(pos) = step.plan.chunks.iter().position(|c| c.seq == id) {
        step.budget += step.plan.chunks.remove(pos).len;
    }
}
