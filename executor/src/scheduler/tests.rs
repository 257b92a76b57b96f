//! Unit tests of the scheduler that need its internals: the abort path (which
//! the public API cannot reach), tenant fairness at admission and the engine
//! protocol's typed errors.

use super::step::features_of;
use super::*;
use crate::ids::{BLOCK_SIZE, TenantId};

fn config() -> SchedulerConfig {
    SchedulerConfig {
        num_blocks: 64,
        max_num_seqs: 8,
        max_batched_tokens: 256,
        max_waiting_requests: 64,
        max_waiting_tokens: 100_000,
        interactive_reserve_share: 0.25,
        enable_prefix_caching: true,
        revision_salt: [3; 32],
        batch_max_step_tokens: 0,
        batch_yields_to_prefill: false,
        planner: PlannerConfig::TOKENS_ONLY,
    }
}

fn spec(id: u64, lane: Lane, tenant: &str, prompt_len: usize, max_new: usize) -> SeqSpec {
    SeqSpec {
        id: SeqId(id),
        lane,
        tenant: TenantId(tenant.to_string()),
        prompt: (0..prompt_len as u32)
            .map(|t| t + id as u32 * 1000)
            .collect(),
        max_new_tokens: max_new,
        ordered_prompt_len: prompt_len,
        compute_whole_prompt: false,
    }
}

/// Runs one step, completes it and appends token 7 to every sampled sequence.
fn step(s: &mut Scheduler) -> StepPlan {
    let plan = s.schedule();
    s.complete_step(&plan);
    for c in plan.chunks.iter().filter(|c| c.sample) {
        s.append_token(c.seq, 7).unwrap();
    }
    plan
}

#[test]
fn a_sequence_that_outgrows_its_lane_is_aborted_not_preempted_forever() {
    let mut s = Scheduler::new(config()).unwrap();
    s.add(spec(1, Lane::Batch, "t", 20, 10)).unwrap();
    step(&mut s);
    // Simulate tokens beyond what `add` admitted (the public API refuses this).
    let limit = s.limits().batch_blocks;
    s.seqs
        .get_mut(&SeqId(1))
        .unwrap()
        .tokens
        .resize(limit * BLOCK_SIZE + 1, 0);
    let plan = s.schedule();
    assert_eq!(
        plan.aborted,
        vec![(
            SeqId(1),
            AbortReason::ExceedsLaneCapacity {
                lane: Lane::Batch,
                needed_blocks: limit + 1,
                lane_limit: limit
            }
        )]
    );
    assert!(plan.chunks.is_empty());
    assert!(s.sequence(SeqId(1)).is_none());
    assert_eq!(s.stats().kv.used, 0);
    assert_eq!(s.stats().aborted, 1);
    assert_eq!(
        s.finish(SeqId(1)),
        Err(SchedulerError::UnknownSeq(SeqId(1)))
    );
}

#[test]
fn admission_takes_turns_between_tenants_of_a_lane() {
    let mut s = Scheduler::new(SchedulerConfig {
        max_num_seqs: 3,
        ..config()
    })
    .unwrap();
    for id in 1..=4 {
        s.add(spec(id, Lane::Interactive, "big", 8, 4)).unwrap();
    }
    s.add(spec(10, Lane::Interactive, "small", 8, 4)).unwrap();
    s.add(spec(20, Lane::Interactive, "other", 8, 4)).unwrap();
    let plan = s.schedule();
    let admitted: Vec<u64> = plan.chunks.iter().map(|c| c.seq.0).collect();
    assert_eq!(admitted, vec![1, 10, 20]);
}

#[test]
fn the_interactive_lane_is_admitted_before_the_batch_lane() {
    let mut s = Scheduler::new(SchedulerConfig {
        max_num_seqs: 2,
        ..config()
    })
    .unwrap();
    s.add(spec(1, Lane::Batch, "t", 8, 4)).unwrap();
    s.add(spec(2, Lane::Batch, "t", 8, 4)).unwrap();
    s.add(spec(3, Lane::Interactive, "t", 8, 4)).unwrap();
    let plan = s.schedule();
    let admitted: Vec<u64> = plan.chunks.iter().map(|c| c.seq.0).collect();
    // Batch may hold only 1 of 2 slots (share 0.25 reserves ceil(0.5) = 1).
    assert_eq!(admitted, vec![3, 1]);
}

#[test]
fn scheduling_twice_without_completing_plans_the_same_tokens() {
    let mut s = Scheduler::new(config()).unwrap();
    s.add(spec(1, Lane::Interactive, "t", 40, 4)).unwrap();
    let first = s.schedule();
    let used = s.stats().kv.used;
    let second = s.schedule();
    assert_eq!(first.chunks, second.chunks);
    assert_eq!(s.stats().kv.used, used);
    s.complete_step(&second);
    s.complete_step(&first); // stale now: skipped
    assert_eq!(s.sequence(SeqId(1)).unwrap().num_computed(), 40);
}

#[test]
fn completing_a_chunk_of_a_cancelled_sequence_is_harmless() {
    let mut s = Scheduler::new(config()).unwrap();
    s.add(spec(1, Lane::Interactive, "t", 40, 4)).unwrap();
    let plan = s.schedule();
    s.cancel(SeqId(1)).unwrap();
    s.complete_step(&plan);
    assert_eq!(s.stats().kv.used, 0);
    assert_eq!(
        s.stats().kv.cached_evictable,
        0,
        "unwritten blocks are never cached"
    );
}

#[test]
fn appending_out_of_protocol_is_a_typed_error() {
    let mut s = Scheduler::new(config()).unwrap();
    s.add(spec(1, Lane::Interactive, "t", 40, 2)).unwrap();
    assert_eq!(
        s.append_token(SeqId(1), 1),
        Err(SchedulerError::NotRunning(SeqId(1)))
    );
    assert_eq!(
        s.append_token(SeqId(9), 1),
        Err(SchedulerError::UnknownSeq(SeqId(9)))
    );
    let plan = s.schedule();
    assert_eq!(
        s.append_token(SeqId(1), 1),
        Err(SchedulerError::NotSampled(SeqId(1)))
    );
    s.complete_step(&plan);
    s.append_token(SeqId(1), 1).unwrap();
    assert_eq!(
        s.append_token(SeqId(1), 1),
        Err(SchedulerError::NotSampled(SeqId(1)))
    );
    step(&mut s);
    assert_eq!(s.tokens(SeqId(1)).unwrap().len(), 42);
    assert_eq!(
        s.append_token(SeqId(1), 1),
        Err(SchedulerError::MaxNewTokensReached(SeqId(1)))
    );
}

/// Tokens each lane gets in a plan.
fn lane_tokens(plan: &StepPlan) -> (usize, usize) {
    plan.chunks.iter().fold((0, 0), |(i, b), c| match c.lane {
        Lane::Interactive => (i + c.len, b),
        Lane::Batch => (i, b + c.len),
    })
}

#[test]
fn the_batch_lane_stays_under_its_step_cap() {
    let mut s = Scheduler::new(SchedulerConfig {
        batch_max_step_tokens: 10,
        ..config()
    })
    .unwrap();
    for id in 1..=4 {
        s.add(spec(id, Lane::Batch, "t", 8, 100)).unwrap();
    }
    let mut per_step = Vec::new();
    for _ in 0..6 {
        let plan = s.schedule();
        let (_, batch) = lane_tokens(&plan);
        assert!(batch <= 10, "batch got {batch} tokens");
        per_step.push(batch);
        s.complete_step(&plan);
        for c in plan.chunks.iter().filter(|c| c.sample) {
            s.append_token(c.seq, 7).unwrap();
        }
    }
    // Capped, not starved: the 32 prompt tokens go 10 a step beside the
    // decoders, then only the 4 decoders remain.
    assert_eq!(per_step, vec![10, 10, 10, 8, 4, 4]);
}

#[test]
fn the_batch_lane_yields_while_interactive_work_prefills() {
    let mut s = Scheduler::new(SchedulerConfig {
        batch_yields_to_prefill: true,
        ..config()
    })
    .unwrap();
    s.add(spec(1, Lane::Batch, "t", 8, 8)).unwrap();
    let plan = s.schedule();
    assert_eq!(lane_tokens(&plan), (0, 8));
    s.complete_step(&plan);
    s.append_token(SeqId(1), 7).unwrap();
    // An interactive arrival: its prefill step carries no batch token.
    s.add(spec(2, Lane::Interactive, "t", 40, 4)).unwrap();
    let plan = s.schedule();
    assert_eq!(lane_tokens(&plan), (40, 0));
    s.complete_step(&plan);
    s.append_token(SeqId(2), 7).unwrap();
    // Once it decodes, batch runs beside it again.
    let plan = s.schedule();
    assert_eq!(lane_tokens(&plan), (1, 1));
}

/// A scheduler whose cost model has learned `ms = 4 + 2 * tokens + 0.5 * rows`
/// (attention free), from steps of every mix.
fn planned(planner: PlannerConfig) -> Scheduler {
    let mut s = Scheduler::new(SchedulerConfig {
        planner,
        max_batched_tokens: 512,
        ..config()
    })
    .unwrap();
    for _ in 0..30 {
        for rows in [1usize, 2, 4, 8] {
            for prefill in [0usize, 16, 64, 200] {
                let mut f = StepFeatures::default();
                for _ in 0..rows {
                    f = f + StepFeatures::chunk(0, 1, true);
                }
                f = f + StepFeatures::chunk(0, prefill, prefill > 0);
                let ms = 4.0 + 2.0 * f.tokens + 0.5 * f.sampled;
                s.cost.observe(&f, ms);
            }
        }
    }
    s
}

/// Runs steps until every sequence in `ids` decodes (has sampled a token).
fn until_decoding(s: &mut Scheduler, ids: &[u64]) {
    for _ in 0..100 {
        if ids.iter().all(|&id| {
            s.sequence(SeqId(id))
                .is_some_and(|q| !q.generated().is_empty())
        }) {
            return;
        }
        step(s);
    }
    panic!("{ids:?} never started decoding");
}

#[test]
fn batch_work_fills_only_the_slack_the_interactive_target_leaves() {
    let mut s = planned(PlannerConfig {
        batch_step_ms: 0.0,
        ..PlannerConfig::default()
    });
    for id in 1..=2 {
        s.add(spec(id, Lane::Interactive, "chat", 8, 100)).unwrap();
    }
    until_decoding(&mut s, &[1, 2]);
    for id in 10..16 {
        s.add(spec(id, Lane::Batch, "bulk", 40, 100)).unwrap();
    }
    let mut batch_tokens = 0;
    for _ in 0..30 {
        let plan = s.schedule();
        let chat_alone = features_of(
            &plan
                .chunks
                .iter()
                .filter(|c| c.lane == Lane::Interactive)
                .copied()
                .collect::<Vec<_>>(),
        );
        let alone = s.cost.predict_ms(&chat_alone);
        // Two chat decoders alone: 4 + 2 * 2 + 0.5 * 2 = 9 ms; factor 2.
        assert!((alone - 9.0).abs() < 0.2, "{alone}");
        let predicted = s.predict_ms(&plan);
        assert!(predicted <= 2.0 * alone + 1e-6, "{predicted} > 2 x {alone}");
        batch_tokens += lane_tokens(&plan).1;
        assert_eq!(s.planner().last.interactive_ms, Some(2.0 * alone));
        s.complete_step(&plan);
        for c in plan.chunks.iter().filter(|c| c.sample) {
            s.append_token(c.seq, 7).unwrap();
        }
    }
    // Not starved: about (18 - 9) / 2 tokens a step.
    assert!(batch_tokens >= 30 * 3, "batch got {batch_tokens} tokens");
}

#[test]
fn a_new_chat_prompt_starts_within_one_step_even_past_the_target() {
    let mut s = planned(PlannerConfig {
        interactive_itl_ms: 5.0, // below what the decoders alone cost
        ..PlannerConfig::default()
    });
    for id in 1..=6 {
        s.add(spec(id, Lane::Interactive, "chat", 8, 100)).unwrap();
    }
    until_decoding(&mut s, &[1, 2, 3, 4, 5, 6]);
    s.add(spec(20, Lane::Interactive, "chat", 100, 10)).unwrap();
    let plan = step(&mut s);
    let c = plan
        .chunks
        .iter()
        .find(|c| c.seq == SeqId(20))
        .expect("admitted in the next step");
    assert_eq!(c.len, 32, "the floor, min_prefill_chunk");
    for id in 1..=6 {
        assert!(
            plan.chunks.iter().any(|c| c.seq == SeqId(id)),
            "decoder {id}"
        );
    }
}

#[test]
fn a_lone_prompt_prefills_without_a_time_limit() {
    let mut s = planned(PlannerConfig::default());
    s.add(spec(1, Lane::Interactive, "chat", 300, 4)).unwrap();
    let plan = step(&mut s);
    assert_eq!(plan.chunks[0].len, 300);
    assert_eq!(s.planner().last.interactive_ms, None);
}

#[test]
fn batch_steps_stay_within_the_batch_target_and_never_come_out_empty() {
    let mut s = planned(PlannerConfig {
        batch_step_ms: 60.0,
        ..PlannerConfig::default()
    });
    for id in 1..=4 {
        s.add(spec(id, Lane::Batch, "bulk", 100, 20)).unwrap();
    }
    for _ in 0..20 {
        let plan = step(&mut s);
        let predicted = s.predict_ms(&plan);
        // The target, or past it by at most the first prefill's floor
        // (32 tokens at 2 ms).
        assert!(predicted <= 60.0 + 64.0 + 1e-6, "{predicted}");
        let floor_chunks = plan.chunks.iter().filter(|c| c.len > 1).count();
        assert!(floor_chunks <= 1 || predicted <= 60.0 + 1e-6, "{plan:?}");
        assert!(!plan.chunks.is_empty());
    }
    // A target below one token's cost still makes progress, a floor at a time.
    let mut s = planned(PlannerConfig {
        batch_step_ms: 1.0,
        min_prefill_chunk: 0,
        ..PlannerConfig::default()
    });
    s.add(spec(1, Lane::Batch, "bulk", 10, 3)).unwrap();
    let mut steps = 0;
    while s
        .sequence(SeqId(1))
        .is_some_and(|q| q.generated().len() < 3)
    {
        let plan = step(&mut s);
        assert_eq!(plan.num_tokens(), 1);
        steps += 1;
        assert!(steps < 20);
    }
}

#[test]
fn new_batch_rows_start_while_running_rows_fill_the_batch_target() {
    // Four decoding rows cost 4 + 4 * 2.5 = 14 ms, past a 10 ms target.
    let mut s = planned(PlannerConfig {
        batch_step_ms: 10.0,
        ..PlannerConfig::default()
    });
    for id in 1..=4 {
        s.add(spec(id, Lane::Batch, "bulk", 8, 100)).unwrap();
    }
    until_decoding(&mut s, &[1, 2, 3, 4]);
    s.add(spec(20, Lane::Batch, "bulk", 100, 10)).unwrap();
    let plan = step(&mut s);
    let c = plan
        .chunks
        .iter()
        .find(|c| c.seq == SeqId(20))
        .expect("admitted beside the running rows");
    assert_eq!(c.len, 32, "the floor, min_prefill_chunk");
    assert_eq!(plan.chunks.iter().filter(|c| c.len == 1).count(), 4);
    // With chat decoding, batch prefill gets no floor: it yields.
    s.add(spec(30, Lane::Interactive, "chat", 8, 100)).unwrap();
    until_decoding(&mut s, &[30]);
    s.add(spec(21, Lane::Batch, "bulk", 100, 10)).unwrap();
    let plan = s.schedule();
    assert!(plan.chunks.iter().all(|c| c.seq != SeqId(21)), "{plan:?}");
}
