//! Unit tests of the scheduler that need its internals: the abort path (which
//! the public API cannot reach), token-weighted fair share between tenants
//! (admission, prefill order, preemption victims, credit) and the engine
//! protocol's typed errors.

use std::collections::HashMap;

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
        fair_share: true,
        planner: PlannerConfig::TOKENS_ONLY,
    }
}

fn spec(id: u64, lane: Lane, tenant: &str, prompt_len: usize, max_new: usize) -> SeqSpec {
    SeqSpec {
        id: SeqId(id),
        lane,
        tenant: TenantId(tenant.to_string()),
        tenant_weight: 1,
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
fn the_prefill_backlog_counts_prompt_tokens_not_yet_computed() {
    // 256 tokens a step: two prompts of 300 and 100 queue 400 tokens; the
    // first step computes 256 of them, the second the rest, then decodes
    // add nothing.
    let mut s = Scheduler::new(config()).unwrap();
    s.add(spec(1, Lane::Interactive, "t", 300, 4)).unwrap();
    s.add(spec(2, Lane::Interactive, "t", 100, 4)).unwrap();
    assert_eq!(s.stats().prefill_backlog_tokens, 400);
    step(&mut s);
    assert_eq!(s.stats().prefill_backlog_tokens, 144);
    step(&mut s);
    assert_eq!(s.stats().prefill_backlog_tokens, 0);
    step(&mut s);
    assert_eq!(s.stats().prefill_backlog_tokens, 0);
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
        interactive_itl_factor: 2.0,
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

#[test]
fn batch_steps_are_short_while_chat_is_about_and_long_again_once_it_left() {
    // Six decoding rows (the batch lane's slots) cost 4 + 6 * 2.5 = 19 ms,
    // past 15 ms beside chat.
    let mut s = planned(PlannerConfig {
        batch_step_beside_chat_ms: 15.0,
        ..PlannerConfig::default()
    });
    for id in 1..=6 {
        s.add(spec(id, Lane::Batch, "bulk", 8, 100)).unwrap();
    }
    until_decoding(&mut s, &[1, 2, 3, 4, 5, 6]);
    assert_eq!(step(&mut s).num_tokens(), 6, "no chat yet: every row");
    // A chat request comes and goes.
    s.add(spec(50, Lane::Interactive, "chat", 8, 2)).unwrap();
    for _ in 0..20 {
        step(&mut s);
        if s.sequence(SeqId(50))
            .is_some_and(|q| q.generated().len() >= 2)
        {
            break;
        }
    }
    s.finish(SeqId(50)).unwrap();
    // Its next request would arrive now: batch steps fit 15 ms, four rows
    // a step, and every row still progresses.
    let mut served = std::collections::HashSet::new();
    for _ in 0..NEAR_CHAT_STEPS {
        let plan = step(&mut s);
        assert!(s.predict_ms(&plan) <= 15.0 + 1e-6, "{plan:?}");
        assert_eq!(plan.num_tokens(), 4, "{plan:?}");
        served.extend(plan.chunks.iter().map(|c| c.seq));
    }
    assert_eq!(served.len(), 6);
    assert_eq!(s.planner().last.batch_ms, Some(15.0));
    // The chat has been gone for NEAR_CHAT_STEPS steps: full steps again.
    assert_eq!(step(&mut s).num_tokens(), 6);
}

// Token-weighted fair share between tenants (`super::fair`).

fn weighted(id: u64, tenant: &str, weight: u32, prompt_len: usize, max_new: usize) -> SeqSpec {
    SeqSpec {
        tenant_weight: weight,
        ..spec(id, Lane::Interactive, tenant, prompt_len, max_new)
    }
}

/// Runs `steps` steps like the engine, finishing every sequence that
/// generated all its tokens; returns the tokens each tenant got.
fn run_tally(s: &mut Scheduler, steps: usize) -> HashMap<String, usize> {
    let mut tally = HashMap::new();
    for _ in 0..steps {
        for (tenant, len) in step_and_finish(s).1 {
            *tally.entry(tenant).or_default() += len;
        }
    }
    tally
}

/// One step like the engine's, finishing every sequence that generated all
/// its tokens; returns the plan and each chunk's tenant and length.
fn step_and_finish(s: &mut Scheduler) -> (StepPlan, Vec<(String, usize)>) {
    let plan = step(s);
    let mut tenants = Vec::new();
    for c in &plan.chunks {
        let q = s.sequence(c.seq).unwrap();
        tenants.push((q.tenant().0.clone(), c.len));
        if c.sample && q.generated().len() == q.max_new_tokens() {
            s.finish(c.seq).unwrap();
        }
    }
    (plan, tenants)
}

fn share_config(fair_share: bool) -> SchedulerConfig {
    SchedulerConfig {
        num_blocks: 512,
        max_num_seqs: 16,
        max_batched_tokens: 64,
        max_waiting_requests: 512,
        fair_share,
        ..config()
    }
}

#[test]
fn tenants_of_long_and_short_prompts_get_token_shares_not_request_shares() {
    for fair_share in [true, false] {
        let mut s = Scheduler::new(share_config(fair_share)).unwrap();
        for id in 0..40 {
            s.add(spec(id, Lane::Interactive, "long", 200, 1)).unwrap();
        }
        for id in 100..400 {
            s.add(spec(id, Lane::Interactive, "short", 20, 1)).unwrap();
        }
        let tally = run_tally(&mut s, 100);
        let (long, short) = (tally["long"], tally["short"]);
        assert_eq!(long + short, 100 * 64, "every step is full");
        let ratio = long as f64 / short as f64;
        if fair_share {
            assert!((0.9..1.11).contains(&ratio), "{long} vs {short} tokens");
        } else {
            // A request each: ten long tokens for each short one.
            assert!(ratio > 6.0, "{long} vs {short} tokens");
        }
    }
}

#[test]
fn weights_three_to_one_give_three_to_one_tokens() {
    let mut s = Scheduler::new(share_config(true)).unwrap();
    for id in 0..150 {
        s.add(weighted(id, "gold", 3, 96, 1)).unwrap();
    }
    for id in 200..260 {
        s.add(weighted(id, "standard", 1, 96, 1)).unwrap();
    }
    let tally = run_tally(&mut s, 200);
    let (gold, standard) = (tally["gold"], tally["standard"]);
    assert_eq!(gold + standard, 200 * 64);
    let ratio = gold as f64 / standard as f64;
    assert!((2.8..3.2).contains(&ratio), "{gold} vs {standard} tokens");
    // Normalized, they are level within a step's budget.
    let g = s.tenant_service(Lane::Interactive, &TenantId("gold".into()));
    let t = s.tenant_service(Lane::Interactive, &TenantId("standard".into()));
    assert!((g.unwrap() - t.unwrap()).abs() <= 64.0, "{g:?} {t:?}");
}

#[test]
fn an_idle_tenant_coming_back_gets_at_most_one_quantum_of_credit() {
    let mut s = Scheduler::new(share_config(true)).unwrap();
    s.add(spec(1000, Lane::Interactive, "b", 20, 1)).unwrap();
    for id in 0..200 {
        s.add(spec(id, Lane::Interactive, "a", 200, 1)).unwrap();
    }
    run_tally(&mut s, 2);
    assert!(s.sequence(SeqId(1000)).is_none(), "b's request is done");
    assert_eq!(
        s.fair_share_accounts(Lane::Interactive),
        1,
        "idle b, behind a, is forgotten"
    );
    // a alone for 50 steps: 3200 normalized tokens b could claim as credit.
    run_tally(&mut s, 50);
    for id in 2000..2100 {
        s.add(spec(id, Lane::Interactive, "b", 200, 1)).unwrap();
    }
    let (mut a, mut b, mut lead) = (0i64, 0i64, 0i64);
    for _ in 0..40 {
        let tally = run_tally(&mut s, 1);
        a += tally.get("a").copied().unwrap_or(0) as i64;
        b += tally.get("b").copied().unwrap_or(0) as i64;
        lead = lead.max(b - a);
    }
    // One quantum (64) of credit, and at most one step's chunk past it.
    assert!(lead <= 2 * 64, "b got {lead} tokens ahead of a");
    // Then they share: b stays its quantum ahead, give or take a step.
    assert!((b - a - 64).abs() <= 64, "a {a}, b {b}");
}

#[test]
fn the_lane_forgets_its_counters_when_it_empties() {
    let mut s = Scheduler::new(share_config(true)).unwrap();
    s.add(spec(1, Lane::Interactive, "a", 100, 2)).unwrap();
    s.add(spec(2, Lane::Interactive, "b", 10, 2)).unwrap();
    run_tally(&mut s, 4);
    assert!(s.sequences().next().is_none());
    assert_eq!(s.fair_share_accounts(Lane::Interactive), 0);
    assert_eq!(
        s.tenant_service(Lane::Interactive, &TenantId("a".into())),
        None
    );
}

#[test]
fn a_light_tenants_new_prompt_gets_the_prefill_budget_before_long_prefills() {
    for fair_share in [true, false] {
        let mut s = Scheduler::new(share_config(fair_share)).unwrap();
        // The light tenant chats: one decoding sequence keeps it active.
        s.add(spec(1, Lane::Interactive, "light", 8, 1000)).unwrap();
        step(&mut s);
        for id in 10..13 {
            s.add(spec(id, Lane::Interactive, "heavy", 1000, 4))
                .unwrap();
        }
        run_tally(&mut s, 3);
        s.add(spec(2, Lane::Interactive, "light", 20, 4)).unwrap();
        let mut steps = 0;
        while s.sequence(SeqId(2)).unwrap().generated().is_empty() {
            let (plan, _) = step_and_finish(&mut s);
            assert!(
                plan.chunks.iter().any(|c| c.seq == SeqId(1)),
                "the chat decodes every step"
            );
            steps += 1;
        }
        if fair_share {
            assert_eq!(steps, 1, "the whole prompt in the next step");
        } else {
            // Behind the running prompt and the heavy one admitted before
            // it in turn: about 1800 tokens at 63 a step.
            assert!(steps >= 25, "{steps} steps");
        }
    }
}

#[test]
fn preemption_takes_the_newest_sequence_of_the_tenant_furthest_over_its_share() {
    for fair_share in [true, false] {
        let mut s = Scheduler::new(SchedulerConfig {
            num_blocks: 6,
            max_batched_tokens: 128,
            interactive_reserve_share: 0.0,
            fair_share,
            ..config()
        })
        .unwrap();
        // Arrival h1, h2, l1; 2 + 1 + 1 blocks, each needs one more to decode.
        s.add(spec(1, Lane::Interactive, "heavy", 2 * BLOCK_SIZE, 10))
            .unwrap();
        s.add(spec(2, Lane::Interactive, "heavy", BLOCK_SIZE, 10))
            .unwrap();
        s.add(spec(3, Lane::Interactive, "light", BLOCK_SIZE, 10))
            .unwrap();
        assert_eq!(step(&mut s).chunks.len(), 3);
        let plan = step(&mut s);
        let decoded: Vec<u64> = plan.chunks.iter().map(|c| c.seq.0).collect();
        if fair_share {
            // The light decoder takes the block of heavy's newest, not
            // of the older heavy sequence, and is not preempted itself.
            assert_eq!(plan.preempted, vec![SeqId(2)]);
            assert_eq!(decoded, vec![1, 3]);
        } else {
            // Today's rule: the newest of the lane (the light one) goes.
            assert_eq!(plan.preempted, vec![SeqId(3)]);
            assert_eq!(decoded, vec![1, 2]);
        }
    }
}

#[test]
fn a_waiting_light_request_takes_a_slot_from_a_tenant_far_over_its_share() {
    for fair_share in [true, false] {
        let mut s = Scheduler::new(SchedulerConfig {
            max_num_seqs: 4,
            max_batched_tokens: 64,
            num_blocks: 256,
            fair_share,
            ..config()
        })
        .unwrap();
        s.add(spec(1, Lane::Interactive, "light", 8, 1000)).unwrap();
        step(&mut s);
        for id in 10..13 {
            s.add(spec(id, Lane::Interactive, "heavy", 100, 1000))
                .unwrap();
        }
        run_tally(&mut s, 8);
        assert_eq!(s.running(Lane::Interactive).len(), 4);
        s.add(spec(2, Lane::Interactive, "light", 8, 4)).unwrap();
        let plan = step(&mut s);
        if fair_share {
            assert_eq!(plan.preempted, vec![SeqId(12)]);
            assert!(plan.chunks.iter().any(|c| c.seq == SeqId(2)));
        } else {
            assert!(plan.preempted.is_empty());
            assert!(plan.chunks.iter().all(|c| c.seq != SeqId(2)));
        }
    }
}

#[test]
fn with_fair_share_off_tenants_take_turns_a_request_each() {
    for (fair_share, expected) in [
        (true, vec![1, 10, 11, 12, 2, 3]),
        (false, vec![1, 10, 2, 11, 3, 12]),
    ] {
        let mut s = Scheduler::new(SchedulerConfig {
            fair_share,
            ..config()
        })
        .unwrap();
        for id in 1..=3 {
            s.add(spec(id, Lane::Interactive, "long", 40, 4)).unwrap();
        }
        for id in 10..=12 {
            s.add(spec(id, Lane::Interactive, "short", 8, 4)).unwrap();
        }
        let plan = s.schedule();
        let admitted: Vec<u64> = plan.chunks.iter().map(|c| c.seq.0).collect();
        assert_eq!(admitted, expected, "fair_share {fair_share}");
    }
}

#[test]
fn a_tenant_flooding_the_batch_lane_cannot_starve_another_tenants_batch() {
    for fair_share in [true, false] {
        let mut s = Scheduler::new(share_config(fair_share)).unwrap();
        // A night's scoring job: 300 rows of 200-token prompts, already
        // running and queued when the other tenant's batch arrives.
        for id in 0..300 {
            s.add(spec(id, Lane::Batch, "flood", 200, 8)).unwrap();
        }
        run_tally(&mut s, 30);
        let small: Vec<u64> = (1000..1030).collect();
        for &id in &small {
            s.add(spec(id, Lane::Batch, "small", 40, 4)).unwrap();
        }
        let (mut got_small, mut got_flood, mut steps) = (0usize, 0usize, 0usize);
        while small.iter().any(|&id| s.sequence(SeqId(id)).is_some()) {
            let tally = run_tally(&mut s, 1);
            got_small += tally.get("small").copied().unwrap_or(0);
            got_flood += tally.get("flood").copied().unwrap_or(0);
            steps += 1;
            assert!(steps < 2_000, "small's batch never finished");
        }
        // Small's batch is 30 x (40 + 3) = 1290 tokens (the last of a row's
        // 4 tokens is sampled, never computed); the lane computes 64 a step.
        assert_eq!(got_small, 30 * 43);
        eprintln!("fair share {fair_share}: {steps} steps, {got_small} small, {got_flood} flood");
        if fair_share {
            // Half the lane each while both have work: about 1290 / 32 = 40
            // steps, plus the last rows' decode steps.
            assert!(
                steps <= 55,
                "{steps} steps ({got_small} small, {got_flood} flood)"
            );
            // And the flood keeps the rest of the lane.
            assert!(
                got_flood * 10 >= got_small * 8,
                "{got_flood} flood tokens against {got_small}"
            );
        } else {
            // A request at a time, behind 16 running 200-token rows: the
            // flood gets several times small's tokens meanwhile.
            assert!(steps > 55, "{steps} steps without fair share");
        }
    }
}
