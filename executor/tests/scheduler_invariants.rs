//! Invariants of the paged KV block manager and the continuous-batching
//! scheduler: a seeded randomized workload checked after every operation, and
//! the scenarios the engine loop relies on (chunked prefill, preemption order,
//! prefix sharing, cancellation, typed errors).

use std::collections::HashSet;

use stoker_executor::ids::{BLOCK_SIZE, BlockId, Lane, SeqId, TenantId};
use stoker_executor::kv::blocks_for;
use stoker_executor::scheduler::{
    ConfigError, PerLane, PlannerConfig, Scheduler, SchedulerConfig, SchedulerError, SeqSpec,
    SeqStatus, StepPlan,
};
use stoker_test_support::TestRng;

/// Prompts from the shared seeded generator.
trait Tokens {
    fn tokens(&mut self, n: usize) -> Vec<u32>;
}

impl Tokens for TestRng {
    fn tokens(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| self.below(50_000) as u32).collect()
    }
}

fn config() -> SchedulerConfig {
    SchedulerConfig {
        num_blocks: 256,
        max_num_seqs: 16,
        max_batched_tokens: 512,
        max_waiting_requests: 256,
        max_waiting_tokens: 1_000_000,
        interactive_reserve_share: 0.25,
        enable_prefix_caching: true,
        revision_salt: [42; 32],
        batch_max_step_tokens: 0,
        batch_yields_to_prefill: false,
        fair_share: true,
        planner: PlannerConfig::TOKENS_ONLY,
    }
}

fn spec(id: u64, lane: Lane, tenant: &str, prompt: Vec<u32>, max_new: usize) -> SeqSpec {
    SeqSpec {
        id: SeqId(id),
        lane,
        tenant: TenantId(tenant.to_string()),
        tenant_weight: 1,
        ordered_prompt_len: prompt.len(),
        compute_whole_prompt: false,
        prompt,
        max_new_tokens: max_new,
    }
}

/// Distinct tokens per id, so unrelated prompts never share a block.
fn prompt(id: u64, len: usize) -> Vec<u32> {
    (0..len as u32).map(|t| id as u32 * 100_000 + t).collect()
}

/// Runs one step like the engine: schedule, complete, append token 1 to every
/// sampled sequence. Checks the invariants on the way.
fn step(s: &mut Scheduler) -> StepPlan {
    let plan = s.schedule();
    check_invariants(s, Some(&plan));
    s.complete_step(&plan);
    // A synthetic step time the cost model learns from: linear in tokens.
    s.observe_step(&plan, 2.0 + 0.5 * plan.num_tokens() as f64);
    for c in plan.chunks.iter().filter(|c| c.sample) {
        s.append_token(c.seq, 1).unwrap();
    }
    check_invariants(s, None);
    plan
}

fn chunk_of(plan: &StepPlan, id: u64) -> Option<(usize, usize)> {
    plan.chunks
        .iter()
        .find(|c| c.seq == SeqId(id))
        .map(|c| (c.start, c.len))
}

/// Everything that must hold between any two calls, and of a fresh plan.
fn check_invariants(s: &Scheduler, plan: Option<&StepPlan>) {
    let kv = s.kv();
    kv.audit().unwrap();
    let stats = s.stats();
    let k = stats.kv;
    assert_eq!(k.total, s.config().num_blocks);
    assert_eq!(
        k.free + k.cached_evictable + k.used,
        k.total,
        "pool gauges add up"
    );

    let mut refs = vec![0u32; k.total];
    let mut lane_blocks = PerLane::<usize>::default();
    let mut running = PerLane::<usize>::default();
    let mut waiting = PerLane::<usize>::default();
    let mut waiting_tokens = 0;
    for seq in s.sequences() {
        let table = seq.block_table();
        assert!(seq.generated().len() <= seq.max_new_tokens());
        match seq.status() {
            SeqStatus::Waiting => {
                assert!(table.is_empty(), "a waiting sequence holds no blocks");
                assert_eq!(seq.num_computed(), 0);
                waiting[seq.lane()] += 1;
                waiting_tokens += seq.prompt_len() + seq.max_new_tokens();
            }
            SeqStatus::Running => {
                running[seq.lane()] += 1;
                assert!(s.running(seq.lane()).contains(&seq.id()));
                assert!(
                    table.len() >= blocks_for(seq.num_computed()),
                    "computed KV has blocks"
                );
                assert!(
                    table.len() <= blocks_for(seq.tokens().len()),
                    "no block beyond the tokens"
                );
                let distinct: HashSet<_> = table.iter().collect();
                assert_eq!(
                    distinct.len(),
                    table.len(),
                    "a table never holds a block twice"
                );
                for b in table {
                    refs[b.index()] += 1;
                }
                lane_blocks[seq.lane()] += table.len();
            }
        }
    }
    for (i, &r) in refs.iter().enumerate() {
        assert_eq!(
            kv.refcount(BlockId(i as u32)),
            r,
            "refcount of block {i} matches the tables"
        );
    }
    assert_eq!(k.used, refs.iter().filter(|&&r| r > 0).count());
    assert_eq!(stats.lane_blocks, lane_blocks);
    assert_eq!(stats.running, running);
    assert_eq!(stats.waiting, waiting);
    assert_eq!(stats.waiting_tokens, waiting_tokens);
    for lane in Lane::ALL {
        let arrivals: Vec<u64> = s
            .running(lane)
            .iter()
            .map(|id| s.sequence(*id).unwrap().arrival())
            .collect();
        assert!(arrivals.is_sorted(), "running lists are oldest first");
    }
    let limits = s.limits();
    assert!(
        lane_blocks.batch <= limits.batch_blocks,
        "batch stays within its block share"
    );
    assert!(
        running.batch <= limits.batch_seqs,
        "batch stays within its slot share"
    );
    assert!(running.interactive + running.batch <= s.config().max_num_seqs);

    let Some(plan) = plan else { return };
    assert!(
        plan.num_tokens() <= s.config().max_batched_tokens,
        "token budget"
    );
    let mut seen = HashSet::new();
    for c in &plan.chunks {
        assert!(seen.insert(c.seq), "one chunk per sequence");
        let seq = s.sequence(c.seq).unwrap();
        assert_eq!(seq.status(), SeqStatus::Running);
        assert_eq!(c.lane, seq.lane());
        assert_eq!(c.start, seq.num_computed());
        assert!(c.len >= 1);
        assert!(c.start + c.len <= seq.tokens().len());
        assert!(
            seq.block_table().len() * BLOCK_SIZE >= c.start + c.len,
            "chunk positions have blocks"
        );
        assert_eq!(c.sample, c.start + c.len == seq.tokens().len());
        assert_eq!(s.chunk_tokens(c).unwrap().len(), c.len);
    }
    for id in &plan.preempted {
        assert_eq!(s.sequence(*id).unwrap().status(), SeqStatus::Waiting);
        assert!(!seen.contains(id), "a preempted sequence has no chunk");
    }
    for (id, _) in &plan.aborted {
        assert!(
            s.sequence(*id).is_none(),
            "an aborted sequence is forgotten"
        );
    }
}

/// Every block is free or cached with no reference, and no sequence remains.
fn assert_idle(s: &Scheduler) {
    let st = s.stats();
    assert_eq!(st.kv.used, 0);
    assert_eq!(st.kv.free + st.kv.cached_evictable, st.kv.total);
    assert_eq!(s.sequences().count(), 0);
    assert_eq!(st.running, PerLane::default());
    assert_eq!(st.waiting, PerLane::default());
    assert_eq!(st.waiting_tokens, 0);
    assert_eq!(st.lane_blocks, PerLane::default());
    for b in 0..st.kv.total {
        assert_eq!(s.kv().refcount(BlockId(b as u32)), 0);
    }
    s.kv().audit().unwrap();
}

#[path = "scheduler_invariants/randomized.rs"]
mod randomized;
#[path = "scheduler_invariants/scenarios.rs"]
mod scenarios;
