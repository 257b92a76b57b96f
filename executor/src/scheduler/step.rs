//! One continuous-batching step: what runs, what is admitted, who is preempted.
//!
//! The step follows vLLM's v1 scheduler (unified `num_computed` accounting,
//! chunked prefill, recompute preemption) with a step planner in the manner of
//! Sarathi-Serve's stall-free batching: a step is bounded by a token budget
//! (`max_batched_tokens`) and, when the planner has targets, by a predicted
//! duration from the online step-cost model ([`super::cost`]). It is filled,
//! in order, with:
//! 1. running interactive decoders (one token each), always: the budget is
//!    validated to cover `max_num_seqs` decoders. Their predicted cost sets
//!    the interactive target in force: `interactive_itl_ms`, or
//!    `interactive_itl_factor` times that cost;
//! 2. running interactive prefills and interactive admissions, chunked to
//!    fit the target: with fair share (the default, [`super::fair`]) the
//!    tenant with the least normalized service (tokens divided by weight)
//!    goes first each time, running prefill or admission, and once a
//!    tenant's prefill is in the step, tenants more than a quantum further
//!    over their share wait for the next step; without it, running prefills
//!    oldest first, then admissions. The first interactive prefill of a step
//!    gets at least `min_prefill_chunk` tokens, so a new prompt starts within
//!    one step of arriving when KV allows. Tokens for the running batch
//!    decoders are held back from this stage, so a long prompt never takes a
//!    decode token;
//! 3. batch decoders as far as the step fits the interactive target, then
//!    batch prefills and admissions as far as it fits the tighter of that
//!    target and `batch_step_ms`, all at most `batch_max_step_tokens`: batch
//!    work fills exactly the slack, and a batch-only step is long only by as
//!    much prefill as `batch_step_ms` allows. Batch prefills and admissions
//!    follow the same fair order as interactive ones. With
//!    `batch_yields_to_prefill`, batch gets nothing while interactive work
//!    waits or prefills. A step of the batch lane's own (no interactive
//!    decoders) while chat is about (the interactive lane held work within
//!    the last `NEAR_CHAT_STEPS` steps) fits `batch_step_beside_chat_ms`
//!    as a whole, running rows included and with no prefill floor: a
//!    closed-loop chat client sends its next request as its last one ends,
//!    just after such a step began, and waits for all of it (over HTTP, a
//!    chat beside a Batch API job waited 70 ms at the median for 79 ms
//!    batch steps).
//!
//! A step without interactive decoders has no interactive target, so a lone
//! prompt prefills as fast as it would without the planner; in such a step
//! the first batch prefill also gets at least `min_prefill_chunk` tokens past
//! `batch_step_ms`, so new batch rows keep starting while running ones fill
//! the target (continuous batching, not waves). A step never comes
//! out empty while work can run: if nothing fits the targets, the oldest
//! candidate still gets one token. Admissions skip prefix-cached full
//! blocks, always compute at least the last token so its logits exist, are
//! admitted only when the free pool holds their whole prompt beside the
//! blocks running sequences still need for tokens they hold (unlike vLLM,
//! which admits on the first chunk's blocks: under a flood of long prompts
//! that admitted prefills the pool could not finish, and each was preempted
//! for the next one's blocks and computed again), go
//! interactive before batch, the least-served tenant first with fair share
//! and round-robin a request at a time without ([`super::queue`]; a sequence
//! that scores its prompt takes no cached blocks), and are skipped in a step
//! where running work already preempted (memory is tight), as vLLM does.
//! With fair share, a waiting request may itself preempt, for a slot or for
//! blocks, the newest running sequence of its own lane whose tenant is at
//! least a quantum further over its share. Packing never
//! changes a row's arithmetic (the forward pass is batch-invariant), only
//! which step computes it.
//!
//! Blocks for every scheduled token are allocated before the plan is returned.
//! `num_computed` does NOT advance here: it advances in
//! [`Scheduler::complete_step`], after the forward pass has written the KV,
//! which is also when full blocks are registered in the prefix cache. Calling
//! `schedule` twice without completing plans the same tokens again, except
//! that two counters of the batch lane advance with each call (whose turn
//! it is among running batch rows when not all fit, and the steps since chat
//! was about): the rows chosen may differ then, never the tokens per row. The
//! engine then reports the step's measured time with
//! [`Scheduler::observe_step`], which is how the cost model learns.
//!
//! Preemption is by recompute (vLLM's default): the victim releases every block
//! and returns to the front of its lane's queue with its tokens kept and
//! `num_computed == 0`; on readmission the prefix cache usually returns most of
//! its blocks. A running sequence that cannot get blocks for its chunk, if it
//! is interactive, first preempts batch sequences (newest first; with fair
//! share, the newest of the batch tenant furthest over its share) as long as
//! batch holds enough to cover the shortfall or nothing fits otherwise; then
//! it runs a shorter chunk if any token fits; then it preempts in its own
//! lane; and finally it preempts itself. In its own lane it preempts newer
//! sequences, newest first, and never an older one; with fair share it first
//! takes the newest sequences of tenants with more normalized service than
//! its own (the heaviest first), and among tenants level with its own the
//! same newer-only rule holds. Either way the sequence least in line (oldest,
//! or of the least-served tenant and oldest within it) always progresses, and
//! batch never preempts interactive. A sequence whose tokens need more blocks
//! than its lane may ever hold is aborted rather than preempted forever.
//!
//! Cost: O(running + admitted + preempted) bookkeeping plus one pool operation
//! per allocated or released block, one SHA-256 per newly full block, and for
//! each chunk sized to a target a binary search of O(log tokens) predictions
//! over the plan so far (O(chunks) each).

use crate::ids::{BLOCK_SIZE, Lane, SeqId};
use crate::kv::blocks_for;
use crate::kv::hash::extend_chain;

use super::config::NEAR_CHAT_STEPS;
use super::cost::{CostModel, StepFeatures};
use super::plan::{AbortReason, Admit, ScheduledChunk, StepPlan};
use super::sequence::SeqStatus;
use super::{PerLane, Scheduler};

/// The plan under construction and the budget it has left.
pub(super) struct Step {
    pub(super) plan: StepPlan,
    pub(super) budget: usize,
    /// Most predicted milliseconds the step may take for the stage being
    /// planned; `None`: tokens only.
    limit_ms: Option<f64>,
    /// Whether this step's first interactive prefill has had its floor.
    floor_used: bool,
    /// Whether the first batch prefill of this step may still take the
    /// floor: only in a step with no interactive target.
    batch_floor: bool,
    /// A running sequence preempted for memory this step (fair share stops
    /// admitting then; preemptions for an admission do not count).
    pub(super) pressure: bool,
}

impl Step {
    fn new(budget: usize) -> Self {
        Step {
            plan: StepPlan::default(),
            budget,
            limit_ms: None,
            floor_used: false,
            batch_floor: false,
            pressure: false,
        }
    }
}

/// The cost-model features of a plan's chunks.
pub(super) fn features_of(chunks: &[ScheduledChunk]) -> StepFeatures {
    chunks.iter().fold(StepFeatures::default(), |f, c| {
        f + StepFeatures::chunk(c.start, c.len, c.sample)
    })
}

fn tighter(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// What stops the head of a waiting queue from being admitted.
enum Blocked {
    /// Not enough pool blocks for its whole prompt beside the prompts
    /// running sequences still have to compute.
    Blocks { needed: usize },
    /// The batch lane's block share is exhausted, by `over` blocks.
    LaneShare { over: usize },
    /// Not one token fits the step's time target.
    Time,
}

impl Scheduler {
    /// Plans one step. See the module documentation for the order and rules.
    pub fn schedule(&mut self) -> StepPlan {
        let fair = self.config.fair_share;
        if fair {
            for lane in Lane::ALL {
                self.fair[lane].clear_pending();
            }
        }
        let mut step = Step::new(self.config.max_batched_tokens);
        let mut decoders = PerLane::<Vec<SeqId>>::default();
        let mut prefills = PerLane::<Vec<SeqId>>::default();
        for lane in Lane::ALL {
            for id in &self.running[lane] {
                match self.seqs[id].remaining() {
                    0 => {} // waiting for the engine to append a sampled token
                    1 => decoders[lane].push(*id),
                    _ => prefills[lane].push(*id),
                }
            }
        }
        // 1. Interactive decoders, always; they set the interactive target.
        for &id in &decoders.interactive {
            self.schedule_if_running(id, &mut step);
        }
        let interactive_limit = self.interactive_limit(&step.plan);
        self.targets.interactive_ms = interactive_limit;

        // 2. Interactive prefills and admissions, holding back a token for
        // each batch decoder the batch lane may run.
        let mut batch_left = self.batch_step_allowance();
        let held = decoders.batch.len().min(batch_left).min(step.budget);
        step.budget -= held;
        step.limit_ms = interactive_limit;
        let admit_batch = if fair {
            let admit = !step.pressure;
            let open =
                self.fair_prefills(Lane::Interactive, &prefills.interactive, &mut step, admit);
            admit && open
        } else {
            for &id in &prefills.interactive {
                self.schedule_if_running(id, &mut step);
            }
            step.plan.preempted.is_empty() && self.admit_lane(Lane::Interactive, &mut step)
        };
        step.budget += held;

        // 3. Batch work fills the slack. Batch decode rows answer only to
        // the interactive target (and the token cap): `batch_step_ms` bounds
        // the prefill chunks, which are what make a batch step long, so a
        // cost model that overestimates rows never starves running batch rows.
        // A step of the batch lane's own, while chat is about, answers to
        // `batch_step_beside_chat_ms` as a whole: the next chat request
        // waits for it.
        let batch_target =
            (self.config.planner.batch_step_ms > 0.0).then_some(self.config.planner.batch_step_ms);
        let beside_chat = self.beside_chat_limit(interactive_limit);
        step.limit_ms = interactive_limit.or(beside_chat);
        // Running rows take turns when not all fit: each step starts after
        // the last row the previous one served.
        let rows = decoders.batch.len();
        let first = if rows > 0 { self.batch_turn % rows } else { 0 };
        let mut served = 0;
        for k in 0..rows {
            let id = decoders.batch[(first + k) % rows];
            let spent =
                self.with_budget_cap(batch_left, &mut step, |s, st| s.schedule_if_running(id, st));
            batch_left -= spent;
            served += usize::from(spent > 0);
        }
        self.batch_turn = first + served;
        step.limit_ms = tighter(interactive_limit.or(beside_chat), batch_target);
        step.batch_floor = interactive_limit.is_none() && beside_chat.is_none();
        self.targets.batch_ms = step.limit_ms;
        if fair {
            self.with_budget_cap(batch_left, &mut step, |s, st| {
                let admit = admit_batch && !st.pressure;
                s.fair_prefills(Lane::Batch, &prefills.batch, st, admit);
            });
            return step.plan;
        }
        for &id in &prefills.batch {
            batch_left -=
                self.with_budget_cap(batch_left, &mut step, |s, st| s.schedule_if_running(id, st));
        }
        // An interactive head that cannot be admitted (no budget, slots,
        // blocks or time) also holds back the batch lane, so batch never
        // takes what interactive is waiting for.
        if admit_batch && step.plan.preempted.is_empty() {
            self.with_budget_cap(batch_left, &mut step, |s, st| {
                s.admit_lane(Lane::Batch, st);
            });
        }
        step.plan
    }

    /// Schedules `id` if it is still running (an earlier chunk of this step
    /// may have preempted it).
    pub(super) fn schedule_if_running(&mut self, id: SeqId, step: &mut Step) {
        if self
            .seqs
            .get(&id)
            .is_some_and(|s| s.status == SeqStatus::Running)
        {
            self.schedule_running(id, step);
        }
    }

    /// The interactive target for a step holding `plan` (its interactive
    /// decoders): none when no interactive sequence decodes in it.
    fn interactive_limit(&self, plan: &StepPlan) -> Option<f64> {
        if plan.chunks.is_empty() {
            return None;
        }
        let p = &self.config.planner;
        if p.interactive_itl_ms > 0.0 {
            Some(p.interactive_itl_ms)
        } else if p.interactive_itl_factor > 0.0 {
            Some(p.interactive_itl_factor * self.cost.predict_ms(&features_of(&plan.chunks)))
        } else {
            None
        }
    }

    /// The limit on a step of the batch lane's own (no interactive target)
    /// while interactive traffic is about: `batch_step_beside_chat_ms`, or
    /// none. Counts the steps since the interactive lane last held work.
    fn beside_chat_limit(&mut self, interactive_limit: Option<f64>) -> Option<f64> {
        let chat = !self.waiting.interactive.is_empty() || !self.running.interactive.is_empty();
        self.quiet_steps = if chat {
            0
        } else {
            self.quiet_steps.saturating_add(1)
        };
        let ms = self.config.planner.batch_step_beside_chat_ms;
        (interactive_limit.is_none() && ms > 0.0 && self.quiet_steps <= NEAR_CHAT_STEPS)
            .then_some(ms)
    }

    /// Learns from a step the engine ran: `plan` took `ms` milliseconds.
    pub fn observe_step(&mut self, plan: &StepPlan, ms: f64) {
        self.cost.observe(&features_of(&plan.chunks), ms);
    }

    /// Forgets what the step-cost model learned, back to its prior: for steps
    /// that say nothing of serving (the warm-up's cold first touches).
    pub fn forget_step_costs(&mut self) {
        self.cost = CostModel::default();
    }

    /// The most tokens, up to `want`, of a chunk from `start` (of a sequence
    /// with `total` known tokens) that keep the step within its time limit,
    /// with the floors that guarantee progress.
    fn fit(&self, step: &mut Step, lane: Lane, start: usize, want: usize, total: usize) -> usize {
        let Some(limit) = step.limit_ms else {
            return want;
        };
        let min_chunk = self.config.planner.min_prefill_chunk;
        let floor = if lane == Lane::Interactive && !step.floor_used {
            step.floor_used = true;
            want.min(min_chunk.max(1))
        } else if lane == Lane::Batch && step.batch_floor {
            step.batch_floor = false;
            want.min(min_chunk.max(1))
        } else if step.plan.chunks.is_empty() {
            want.min(1)
        } else {
            0
        };
        let load = features_of(&step.plan.chunks);
        let cost = |len: usize| {
            self.cost
                .predict_ms(&(load + StepFeatures::chunk(start, len, start + len == total)))
        };
        let fitted = if cost(want) <= limit {
            want
        } else if cost(1) > limit {
            0
        } else {
            // cost(lo) fits, cost(hi) does not.
            let (mut lo, mut hi) = (1, want);
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if cost(mid) <= limit {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        fitted.max(floor)
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
            self.charge(c.seq, c.len);
        }
        self.settle_fair_share();
    }

    /// Schedules the next chunk of a running sequence, preempting as needed.
    fn schedule_running(&mut self, id: SeqId, step: &mut Step) {
        let seq = &self.seqs[&id];
        let lane = seq.lane;
        let (start, total) = (seq.num_computed, seq.tokens.len());
        let want = seq.remaining().min(step.budget);
        let want = self.fit(step, lane, start, want, total);
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
                && let Some(victim) = self.batch_victim()
            {
                step.pressure = true;
                self.preempt(victim, step);
                continue;
            }
            if len > 0 {
                return self.grant(id, len, step);
            }
            step.pressure = true;
            match self.lane_victim(id) {
                Some(victim) => self.preempt(victim, step),
                None => return self.preempt(id, step),
            }
        }
    }

    /// Admits the heads of one lane's queue while budget, slots and blocks
    /// allow. False when admission must stop for every lane this step.
    fn admit_lane(&mut self, lane: Lane, step: &mut Step) -> bool {
        loop {
            match self.admit_next(lane, step) {
                Admit::Admitted => {}
                Admit::LaneDone => return true,
                Admit::Stop => return false,
            }
        }
    }

    /// Admits the head of one lane's queue, preempting for it where the
    /// rules allow: interactive takes a slot or blocks from batch (the
    /// tenant furthest over its share first, with fair share), and with fair
    /// share a head also takes them from its own lane's tenants a quantum
    /// further over their share ([`super::fair`]).
    pub(super) fn admit_next(&mut self, lane: Lane, step: &mut Step) -> Admit {
        loop {
            if step.budget == 0 {
                return Admit::Stop;
            }
            let Some(id) = self.next_waiting(lane) else {
                return Admit::LaneDone;
            };
            if step.plan.preempted.contains(&id) {
                // preempted during this very step: not before the next
                return Admit::LaneDone;
            }
            let running = self.running.interactive.len() + self.running.batch.len();
            if running >= self.limits.max_num_seqs {
                let batch = (lane == Lane::Interactive)
                    .then(|| self.batch_victim())
                    .flatten();
                if let Some(victim) = batch.or_else(|| self.admission_victim(lane, id)) {
                    self.preempt(victim, step);
                    continue;
                }
                return Admit::Stop;
            }
            if self.running[lane].len() >= self.limits.seqs(lane) {
                if let Some(victim) = self.admission_victim(lane, id) {
                    self.preempt(victim, step);
                    continue;
                }
                return Admit::LaneDone;
            }
            match self.try_admit(id, step) {
                Ok(()) => return Admit::Admitted,
                Err(Blocked::LaneShare { over }) => {
                    if over <= self.admission_victim_blocks(lane, id)
                        && let Some(victim) = self.admission_victim(lane, id)
                    {
                        self.preempt(victim, step);
                        continue;
                    }
                    return Admit::LaneDone;
                }
                Err(Blocked::Time) => return Admit::Stop,
                Err(Blocked::Blocks { needed }) => {
                    // Interactive work may take blocks from batch, if the
                    // batch lane could possibly free enough.
                    let available = self.kv.num_available();
                    if lane == Lane::Interactive
                        && needed <= available + self.lane_blocks.batch
                        && let Some(victim) = self.batch_victim()
                    {
                        self.preempt(victim, step);
                        continue;
                    }
                    if needed <= available + self.admission_victim_blocks(lane, id)
                        && let Some(victim) = self.admission_victim(lane, id)
                    {
                        self.preempt(victim, step);
                        continue;
                    }
                    return Admit::Stop;
                }
            }
        }
    }

    /// Admits the head of its lane's queue with a first chunk, reusing cached
    /// prefix blocks, or says what blocks it.
    fn try_admit(&mut self, id: SeqId, step: &mut Step) -> Result<(), Blocked> {
        let root = self.kv.root_hash();
        let seq = self.seqs.get_mut(&id).expect("queued sequences are known");
        let lane = seq.lane;
        let cached = if self.kv.prefix_caching_enabled() && !seq.compute_whole_prompt {
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
        let total = seq.tokens.len();
        let want = (total - start).min(step.budget);
        let want = self.fit(step, lane, start, want, total);
        if want == 0 {
            return Err(Blocked::Time);
        }
        let new_blocks = blocks_for(start + want) - cached.len();
        let batch_after = self.lane_blocks.batch + cached.len() + new_blocks;
        if lane == Lane::Batch && batch_after > self.limits.batch_blocks {
            return Err(Blocked::LaneShare {
                over: batch_after - self.limits.batch_blocks,
            });
        }
        let revived = cached.iter().filter(|&&b| self.kv.refcount(b) == 0).count();
        // Admitted only if its whole prompt fits beside what the running
        // sequences still have to compute: a first chunk that fits while
        // the rest of the prompt does not only starts a preemption cycle
        // (admit, prefill part, be preempted for another's next block,
        // re-admit), which under a flood of long prompts took most steps.
        let whole = blocks_for(total) - cached.len();
        let needed = whole.max(new_blocks) + revived + self.blocks_still_needed();
        if needed > self.kv.num_available() {
            return Err(Blocked::Blocks { needed });
        }

        self.take_waiting(id);
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

    /// Blocks the running sequences still need for the tokens they hold and
    /// have not computed (the rest of a prompt, a re-admitted sequence's
    /// output, a decoder's next token).
    fn blocks_still_needed(&self) -> usize {
        Lane::ALL
            .iter()
            .flat_map(|&lane| self.running[lane].iter())
            .map(|id| {
                let s = &self.seqs[id];
                blocks_for(s.tokens.len()).saturating_sub(s.block_table.len())
            })
            .sum()
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
        self.note_planned(id, len, true);
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
        let mut step = Step::new(0);
        self.preempt(id, &mut step);
        Ok(())
    }

    /// Preempts a running sequence by recompute: it releases its blocks, drops
    /// any chunk planned for it this step, and waits at the front of its lane.
    fn preempt(&mut self, id: SeqId, step: &mut Step) {
        if !self.seqs.contains_key(&id) {
            return;
        }
        if let Some(len) = drop_chunk(id, step) {
            self.note_planned(id, len, false);
        }
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
        step.plan.preempted.push(id);
        tracing::debug!(seq = %id, "preempted by recompute");
    }

    /// Removes a sequence for good and reports why in the plan.
    fn abort(&mut self, id: SeqId, reason: AbortReason, step: &mut Step) {
        if !self.seqs.contains_key(&id) {
            return;
        }
        if let Some(len) = drop_chunk(id, step) {
            self.note_planned(id, len, false);
        }
        if self.remove(id).is_ok() {
            self.aborted += 1;
            step.plan.aborted.push((id, reason));
            tracing::warn!(seq = %id, %reason, "aborted by the scheduler");
        }
    }
}

/// Removes `id`'s chunk from the plan, if any, and refunds its tokens;
/// returns how many.
fn drop_chunk(id: SeqId, step: &mut Step) -> Option<usize> {
    let pos = step.plan.chunks.iter().position(|c| c.seq == id)?;
    let len = step.plan.chunks.remove(pos).len;
    step.budget += len;
    Some(len)
}
