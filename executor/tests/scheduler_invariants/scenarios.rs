//! The scenarios the engine loop relies on, each with exact expectations.

use super::*;

fn running_ids(s: &Scheduler, lane: Lane) -> Vec<u64> {
    s.running(lane).iter().map(|id| id.0).collect()
}

#[test]
fn cancelling_a_hundred_in_flight_sequences_returns_the_pool_to_idle() {
    let cfg = SchedulerConfig {
        num_blocks: 2048,
        max_num_seqs: 128,
        max_batched_tokens: 2048,
        ..config()
    };
    let mut s = Scheduler::new(cfg).unwrap();
    let mut rng = TestRng::new(100);
    let shared = rng.tokens(64);
    for id in 0..100u64 {
        let lane = if id % 2 == 0 {
            Lane::Interactive
        } else {
            Lane::Batch
        };
        let len = rng.range(20, 300);
        let p = if id % 3 == 0 {
            [shared.clone(), rng.tokens(len)].concat()
        } else {
            rng.tokens(len)
        };
        s.add(spec(id, lane, &format!("t{}", id % 5), p, 64))
            .unwrap();
    }
    for _ in 0..6 {
        step(&mut s);
    }
    let st = s.stats();
    assert!(st.running.interactive + st.running.batch > 0);
    assert!(st.waiting.interactive + st.waiting.batch > 0);
    assert!(st.kv.prefix_hits > 0);
    for id in 0..100u64 {
        s.cancel(SeqId(id)).unwrap();
        check_invariants(&s, None);
    }
    assert_idle(&s);
    assert!(s.schedule().is_empty());
}

#[test]
fn a_long_prompt_never_delays_the_decode_tokens_of_running_sequences() {
    for decoder_lane in Lane::ALL {
        let cfg = SchedulerConfig {
            max_batched_tokens: 256,
            ..config()
        };
        let mut s = Scheduler::new(cfg).unwrap();
        for id in 0..8 {
            s.add(spec(id, decoder_lane, "chat", prompt(id, 32), 1_000))
                .unwrap();
        }
        let first = step(&mut s);
        assert_eq!(first.chunks.len(), 8);
        assert!(first.chunks.iter().all(|c| c.sample));

        s.add(spec(100, Lane::Interactive, "bulk", prompt(100, 2_000), 16))
            .unwrap();
        let mut prefill_steps = 0;
        loop {
            let plan = step(&mut s);
            prefill_steps += 1;
            assert!(plan.preempted.is_empty());
            for id in 0..8 {
                assert_eq!(
                    chunk_of(&plan, id).map(|c| c.1),
                    Some(1),
                    "decoder {id} got its token"
                );
            }
            let (_, len) = chunk_of(&plan, 100).expect("the long prompt progresses every step");
            assert!(len <= 256 - 8);
            if plan.chunks.iter().any(|c| c.seq == SeqId(100) && c.sample) {
                break;
            }
        }
        assert_eq!(prefill_steps, 2_000usize.div_ceil(248));
    }
}

#[test]
fn preemption_takes_batch_newest_first_then_the_newest_interactive() {
    let cfg = SchedulerConfig {
        num_blocks: 6,
        max_num_seqs: 8,
        max_batched_tokens: 128,
        interactive_reserve_share: 0.0,
        ..config()
    };
    let mut s = Scheduler::new(cfg).unwrap();
    // Arrival order: I1, B1, B2, I2, I3, I4; one full block each.
    let order = [(1, Lane::Interactive), (2, Lane::Batch), (3, Lane::Batch)];
    let order = order.into_iter().chain([
        (4, Lane::Interactive),
        (5, Lane::Interactive),
        (6, Lane::Interactive),
    ]);
    for (id, lane) in order {
        s.add(spec(id, lane, "t", prompt(id, BLOCK_SIZE), 10))
            .unwrap();
    }
    let first = step(&mut s);
    assert_eq!(first.chunks.len(), 6);
    assert_eq!(s.stats().kv.used, 6);
    // Every sequence now needs a second block for its decode token. Interactive
    // decoders go first: 1 takes batch 3's block, 4 takes batch 2's, 5 takes
    // the newest interactive's (6), and nobody preempts an older sequence.
    let plan = step(&mut s);
    assert_eq!(plan.preempted, vec![SeqId(3), SeqId(2), SeqId(6)]);
    let decoded: Vec<u64> = plan.chunks.iter().map(|c| c.seq.0).collect();
    assert_eq!(decoded, vec![1, 4, 5]);
    let st = s.stats();
    assert_eq!((st.preemptions.batch, st.preemptions.interactive), (2, 1));
    for id in [2, 3, 6] {
        let seq = s.sequence(SeqId(id)).unwrap();
        assert_eq!(seq.status(), SeqStatus::Waiting);
        assert_eq!(seq.num_computed(), 0);
        assert_eq!(
            seq.tokens().len(),
            BLOCK_SIZE + 1,
            "tokens are kept for recompute"
        );
    }
    assert_eq!(running_ids(&s, Lane::Interactive), vec![1, 4, 5]);
}

#[test]
fn a_preempted_sequence_resumes_with_its_tokens_and_hits_the_prefix_cache() {
    let cfg = SchedulerConfig {
        num_blocks: 8,
        max_num_seqs: 4,
        max_batched_tokens: 256,
        interactive_reserve_share: 0.0,
        ..config()
    };
    let mut s = Scheduler::new(cfg).unwrap();
    s.add(spec(1, Lane::Interactive, "t", prompt(1, 64), 40))
        .unwrap();
    s.add(spec(2, Lane::Batch, "t", prompt(2, 48), 20)).unwrap();
    step(&mut s); // 4 + 3 blocks, both sampled
    let plan = step(&mut s);
    // The interactive decoder takes the last free block; the batch decoder may
    // not preempt it, so it preempts itself.
    assert_eq!(plan.preempted, vec![SeqId(2)]);
    assert_eq!(running_ids(&s, Lane::Interactive), vec![1]);
    assert_eq!(
        s.stats().kv.cached_evictable,
        3,
        "its written blocks stay cached"
    );

    s.finish(SeqId(1)).unwrap();
    let hits_before = s.stats().kv.prefix_hits;
    let plan = step(&mut s);
    assert_eq!(plan.chunks.len(), 1);
    let c = plan.chunks[0];
    assert_eq!((c.seq, c.start, c.len, c.sample), (SeqId(2), 48, 1, true));
    assert_eq!(s.stats().kv.prefix_hits - hits_before, 48);
    let mut expected = prompt(2, 48);
    expected.extend([1, 1]); // the token sampled before preemption, then after
    assert_eq!(s.tokens(SeqId(2)).unwrap(), &expected[..]);
}

#[test]
fn two_sequences_sharing_a_512_token_prefix_share_its_blocks() {
    let mut s = Scheduler::new(config()).unwrap();
    let mut rng = TestRng::new(7);
    let shared = rng.tokens(512);
    let a = [shared.clone(), rng.tokens(30)].concat();
    let b = [shared.clone(), rng.tokens(20)].concat();
    s.add(spec(1, Lane::Interactive, "t", a, 8)).unwrap();
    while !step(&mut s).chunks.iter().any(|c| c.sample) {}
    s.add(spec(2, Lane::Batch, "u", b, 8)).unwrap();
    let plan = step(&mut s);
    assert_eq!(
        chunk_of(&plan, 2),
        Some((512, 20)),
        "only the unshared suffix is computed"
    );

    let ta = s.block_table(SeqId(1)).unwrap().to_vec();
    let tb = s.block_table(SeqId(2)).unwrap().to_vec();
    assert_eq!(ta[..32], tb[..32]);
    assert_ne!(ta[32], tb[32]);
    for b in &tb[..32] {
        assert_eq!(s.kv().refcount(*b), 2);
    }
    assert_eq!(s.stats().kv.prefix_hits, 512);

    s.finish(SeqId(1)).unwrap();
    assert!(tb[..32].iter().all(|b| s.kv().refcount(*b) == 1));
    s.finish(SeqId(2)).unwrap();
    assert!(tb[..32].iter().all(|b| s.kv().is_evictable(*b)));
    assert_idle(&s);

    // Another model revision never sees these blocks: every key differs.
    let other = Scheduler::new(SchedulerConfig {
        revision_salt: [43; 32],
        ..config()
    })
    .unwrap();
    let mine = s.kv().block_hashes(&shared);
    let theirs = other.kv().block_hashes(&shared);
    assert_eq!(mine.len(), 32);
    assert!(mine.iter().zip(&theirs).all(|(x, y)| x != y));
}

#[test]
fn with_prefix_caching_disabled_nothing_is_shared_or_cached() {
    let mut s = Scheduler::new(SchedulerConfig {
        enable_prefix_caching: false,
        ..config()
    })
    .unwrap();
    let shared = prompt(1, 128);
    s.add(spec(1, Lane::Interactive, "t", shared.clone(), 4))
        .unwrap();
    step(&mut s);
    s.add(spec(2, Lane::Interactive, "t", shared, 4)).unwrap();
    let plan = step(&mut s);
    assert_eq!(chunk_of(&plan, 2), Some((0, 128)));
    s.finish(SeqId(1)).unwrap();
    s.finish(SeqId(2)).unwrap();
    let st = s.stats().kv;
    assert_eq!(
        (st.cached_evictable, st.prefix_queries, st.prefix_hits),
        (0, 0, 0)
    );
    assert_idle(&s);
}

#[test]
fn the_batch_lane_never_takes_the_interactive_reserve() {
    let cfg = SchedulerConfig {
        num_blocks: 64,
        interactive_reserve_share: 0.5,
        ..config()
    };
    let mut s = Scheduler::new(cfg).unwrap();
    for id in 0..30 {
        s.add(spec(
            id,
            Lane::Batch,
            &format!("t{}", id % 3),
            prompt(id, 100),
            30,
        ))
        .unwrap();
    }
    for _ in 0..20 {
        step(&mut s);
        assert!(s.stats().lane_blocks.batch <= 32);
        assert!(s.stats().running.batch <= 8);
    }
    assert_eq!(
        s.free_block_headroom(Lane::Batch),
        32 - s.stats().lane_blocks.batch
    );
    assert!(s.free_block_headroom(Lane::Interactive) >= 32);
    s.add(spec(100, Lane::Interactive, "chat", prompt(100, 400), 8))
        .unwrap();
    let plan = step(&mut s);
    assert!(
        plan.preempted.is_empty(),
        "the reserve is there without preemption"
    );
    assert_eq!(chunk_of(&plan, 100).map(|c| c.0), Some(0));
}

#[test]
fn interactive_admission_preempts_the_newest_batch_sequence_for_a_slot() {
    let cfg = SchedulerConfig {
        max_num_seqs: 4,
        interactive_reserve_share: 0.25,
        ..config()
    };
    let mut s = Scheduler::new(cfg).unwrap();
    s.add(spec(1, Lane::Interactive, "t", prompt(1, 20), 50))
        .unwrap();
    for id in 2..=4 {
        s.add(spec(id, Lane::Batch, "t", prompt(id, 20), 50))
            .unwrap();
    }
    step(&mut s);
    assert_eq!(running_ids(&s, Lane::Batch), vec![2, 3, 4]);
    s.add(spec(5, Lane::Interactive, "t", prompt(5, 20), 50))
        .unwrap();
    let plan = step(&mut s);
    assert_eq!(plan.preempted, vec![SeqId(4)]);
    assert_eq!(chunk_of(&plan, 5), Some((0, 20)));
    assert_eq!(running_ids(&s, Lane::Batch), vec![2, 3]);
    assert_eq!(s.stats().preemptions.batch, 1);
}

#[test]
fn bad_input_gets_typed_errors_and_never_panics() {
    let mut s = Scheduler::new(SchedulerConfig {
        num_blocks: 64,
        max_waiting_requests: 2,
        max_waiting_tokens: 600,
        interactive_reserve_share: 0.5,
        ..config()
    })
    .unwrap();
    let p = || prompt(1, 10);
    assert_eq!(
        s.add(spec(1, Lane::Interactive, "t", vec![], 4)),
        Err(SchedulerError::EmptyPrompt)
    );
    assert_eq!(
        s.add(spec(1, Lane::Interactive, "t", p(), 0)),
        Err(SchedulerError::ZeroMaxNewTokens)
    );
    // 40 blocks fit the pool (interactive) but not the batch share (32).
    let big = prompt(2, 40 * BLOCK_SIZE - 10);
    assert_eq!(
        s.add(spec(2, Lane::Batch, "t", big.clone(), 11)),
        Err(SchedulerError::CannotFit {
            lane: Lane::Batch,
            needed_blocks: 40,
            lane_limit: 32
        })
    );
    assert!(matches!(
        s.add(spec(
            2,
            Lane::Interactive,
            "t",
            prompt(2, 2_000),
            usize::MAX
        )),
        Err(SchedulerError::CannotFit { .. })
    ));
    assert!(matches!(
        s.add(spec(2, Lane::Interactive, "t", big, 11)),
        Err(SchedulerError::TooManyWaitingTokens { .. })
    ));
    s.add(spec(1, Lane::Interactive, "t", p(), 4)).unwrap();
    assert_eq!(
        s.add(spec(1, Lane::Batch, "t", p(), 4)),
        Err(SchedulerError::DuplicateSeq(SeqId(1)))
    );
    s.add(spec(2, Lane::Batch, "t", p(), 4)).unwrap();
    assert_eq!(
        s.add(spec(3, Lane::Batch, "t", p(), 4)),
        Err(SchedulerError::QueueFull { limit: 2 })
    );
    assert_eq!(
        s.finish(SeqId(9)),
        Err(SchedulerError::UnknownSeq(SeqId(9)))
    );
    s.cancel(SeqId(2)).unwrap();
    assert_eq!(
        s.cancel(SeqId(2)),
        Err(SchedulerError::UnknownSeq(SeqId(2)))
    );
    assert_eq!(
        s.append_token(SeqId(1), 5),
        Err(SchedulerError::NotRunning(SeqId(1)))
    );
    check_invariants(&s, None);

    let bad = |c: SchedulerConfig| Scheduler::new(c).unwrap_err();
    assert_eq!(
        bad(SchedulerConfig {
            num_blocks: 0,
            ..config()
        }),
        ConfigError::ZeroBlocks
    );
    assert_eq!(
        bad(SchedulerConfig {
            max_num_seqs: 0,
            ..config()
        }),
        ConfigError::ZeroSeqs
    );
    assert!(matches!(
        bad(SchedulerConfig {
            interactive_reserve_share: 1.0,
            ..config()
        }),
        ConfigError::ReserveShareOutOfRange(_)
    ));
    assert!(matches!(
        bad(SchedulerConfig {
            interactive_reserve_share: f32::NAN,
            ..config()
        }),
        ConfigError::ReserveShareOutOfRange(_)
    ));
    assert!(matches!(
        bad(SchedulerConfig {
            max_batched_tokens: 3,
            ..config()
        }),
        ConfigError::BudgetBelowSeqs { .. }
    ));
}

#[test]
fn a_sequence_that_scores_its_prompt_computes_it_whole_and_still_shares_it() {
    let mut s = Scheduler::new(config()).unwrap();
    let mut rng = TestRng::new(11);
    let shared = rng.tokens(256);
    s.add(spec(1, Lane::Interactive, "t", shared.clone(), 4))
        .unwrap();
    while !step(&mut s).chunks.iter().any(|c| c.sample) {}
    let scoring = SeqSpec {
        compute_whole_prompt: true,
        ..spec(2, Lane::Interactive, "t", shared.clone(), 4)
    };
    s.add(scoring).unwrap();
    let hits_before = s.stats().kv.prefix_hits;
    let plan = step(&mut s);
    assert_eq!(
        chunk_of(&plan, 2),
        Some((0, 256)),
        "every prompt position is computed, so each has logits"
    );
    assert_eq!(s.stats().kv.prefix_hits, hits_before);

    // Preempted, it recomputes from the start rather than from the cache.
    s.preempt_now(SeqId(2)).unwrap();
    let plan = step(&mut s);
    assert_eq!(chunk_of(&plan, 2), Some((0, 257)));

    // The cache still serves a plain request with the same prompt.
    s.finish(SeqId(1)).unwrap();
    s.add(spec(3, Lane::Interactive, "t", shared, 4)).unwrap();
    let plan = step(&mut s);
    assert_eq!(chunk_of(&plan, 3), Some((240, 16)));
}
