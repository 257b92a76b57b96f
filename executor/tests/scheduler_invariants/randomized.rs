//! A seeded randomized workload: admissions in both lanes with shared
//! prefixes, steps with sampling, finishes, cancels, bursts that force
//! preemption, and misuse, with every invariant checked after each operation.

use super::*;

/// What one seeded run exercised.
#[derive(Debug, Default)]
struct Coverage {
    steps: usize,
    chunks: usize,
    preemptions: PerLane<u64>,
    prefix_hits: u64,
    evictions: u64,
    rejected: usize,
    aborted: usize,
}

struct Workload {
    rng: TestRng,
    s: Scheduler,
    live: Vec<SeqId>,
    next_id: u64,
    prefixes: Vec<Vec<u32>>,
    cov: Coverage,
}

impl Workload {
    fn new(seed: u64) -> Self {
        let mut rng = TestRng::new(seed);
        let max_num_seqs = rng.range(4, 16);
        let cfg = SchedulerConfig {
            num_blocks: rng.range(48, 160),
            max_num_seqs,
            max_batched_tokens: rng.range(max_num_seqs.max(32), 384),
            max_waiting_requests: rng.range(8, 48),
            max_waiting_tokens: rng.range(2_000, 20_000),
            interactive_reserve_share: [0.0, 0.1, 0.25, 0.5][rng.below(4)],
            enable_prefix_caching: seed % 4 != 3,
            revision_salt: [seed as u8; 32],
            batch_max_step_tokens: [0, 8, 32][rng.below(3)],
            batch_yields_to_prefill: seed.is_multiple_of(3),
            fair_share: seed % 5 != 4,
            planner: if seed.is_multiple_of(2) {
                PlannerConfig {
                    interactive_itl_ms: [0.0, 4.0][rng.below(2)],
                    ..PlannerConfig::default()
                }
            } else {
                PlannerConfig::TOKENS_ONLY
            },
        };
        let prefixes = (0..3)
            .map(|_| {
                let len = rng.range(1, 8) * BLOCK_SIZE + rng.below(3) * 5;
                rng.tokens(len)
            })
            .collect();
        Self {
            s: Scheduler::new(cfg).unwrap(),
            rng,
            live: Vec::new(),
            next_id: 1,
            prefixes,
            cov: Coverage::default(),
        }
    }

    fn random_prompt(&mut self, max_len: usize) -> Vec<u32> {
        if self.rng.chance(0.6) {
            let mut p = self.prefixes[self.rng.below(self.prefixes.len())].clone();
            let suffix = self.rng.below(40);
            p.extend(self.rng.tokens(suffix));
            p
        } else {
            let len = self.rng.range(1, max_len);
            self.rng.tokens(len)
        }
    }

    fn add(&mut self, lane: Lane, max_len: usize, max_new: usize) {
        let id = SeqId(self.next_id);
        self.next_id += 1;
        let t = self.rng.below(4);
        let tenant = TenantId(format!("tenant-{t}"));
        let prompt = self.random_prompt(max_len);
        let max_new_tokens = self.rng.range(1, max_new);
        let needed = blocks_for(prompt.len() + max_new_tokens - 1);
        match self.s.add(SeqSpec {
            id,
            lane,
            tenant,
            tenant_weight: [1, 1, 3, 0][t] as u32,
            ordered_prompt_len: prompt.len(),
            compute_whole_prompt: self.rng.below(8) == 0,
            prompt,
            max_new_tokens,
        }) {
            Ok(()) => self.live.push(id),
            Err(SchedulerError::CannotFit {
                needed_blocks,
                lane_limit,
                ..
            }) => {
                assert_eq!(needed_blocks, needed);
                assert!(needed_blocks > lane_limit);
                assert_eq!(lane_limit, self.s.limits().blocks(lane));
                self.cov.rejected += 1;
            }
            Err(SchedulerError::QueueFull { .. } | SchedulerError::TooManyWaitingTokens { .. }) => {
                self.cov.rejected += 1;
            }
            Err(e) => panic!("unexpected refusal: {e}"),
        }
    }

    fn random_lane(&mut self) -> Lane {
        if self.rng.chance(0.5) {
            Lane::Interactive
        } else {
            Lane::Batch
        }
    }

    /// One engine step; sampled sequences get a token or stop.
    fn step(&mut self) {
        let plan = self.s.schedule();
        check_invariants(&self.s, Some(&plan));
        self.cov.steps += 1;
        self.cov.chunks += plan.chunks.len();
        for (id, _) in &plan.aborted {
            self.live.retain(|x| x != id);
            self.cov.aborted += 1;
        }
        self.s.complete_step(&plan);
        let ms = 1.0 + 0.3 * plan.num_tokens() as f64 + self.rng.below(3) as f64;
        self.s.observe_step(&plan, ms);
        for c in plan.chunks.iter().filter(|c| c.sample) {
            self.s
                .append_token(c.seq, self.rng.below(50_000) as u32)
                .unwrap();
            let seq = self.s.sequence(c.seq).unwrap();
            if seq.generated().len() == seq.max_new_tokens() || self.rng.chance(0.03) {
                self.s.finish(c.seq).unwrap();
                self.live.retain(|x| *x != c.seq);
            }
        }
    }

    fn finish_or_cancel_random(&mut self) {
        if self.live.is_empty() {
            return;
        }
        let id = self.live.swap_remove(self.rng.below(self.live.len()));
        if self.rng.chance(0.5) {
            self.s.finish(id)
        } else {
            self.s.cancel(id)
        }
        .unwrap();
        assert_eq!(
            self.s.finish(id),
            Err(SchedulerError::UnknownSeq(id)),
            "finishing twice"
        );
    }

    /// Calls the engine must not make; each is refused and changes nothing.
    fn misuse(&mut self) {
        let before = self.s.stats();
        let unknown = SeqId(u64::MAX - self.rng.below(10) as u64);
        assert_eq!(
            self.s.cancel(unknown),
            Err(SchedulerError::UnknownSeq(unknown))
        );
        assert_eq!(
            self.s.append_token(unknown, 0),
            Err(SchedulerError::UnknownSeq(unknown))
        );
        if let Some(&id) = self.live.first() {
            let seq = self.s.sequence(id).unwrap();
            if seq.num_computed() < seq.tokens().len() {
                assert!(
                    self.s.append_token(id, 0).is_err(),
                    "appending mid-prefill or while waiting"
                );
            }
            let dup = spec(id.0, Lane::Batch, "t", vec![1], 1);
            assert_eq!(self.s.add(dup), Err(SchedulerError::DuplicateSeq(id)));
        }
        assert_eq!(
            self.s
                .add(spec(u64::MAX - 100, Lane::Batch, "t", vec![], 4)),
            Err(SchedulerError::EmptyPrompt)
        );
        assert_eq!(self.s.stats(), before);
    }

    fn op(&mut self) {
        match self.rng.below(100) {
            0..30 => {
                let lane = self.random_lane();
                self.add(lane, 200, 48);
            }
            30..80 => self.step(),
            80..88 => self.finish_or_cancel_random(),
            88..93 => {
                // A burst of long requests to force memory pressure.
                for _ in 0..self.rng.range(2, 6) {
                    let lane = self.random_lane();
                    self.add(lane, 400, 200);
                }
            }
            93..95 => self.misuse(),
            _ => {
                for _ in 0..3 {
                    self.step();
                }
            }
        }
        check_invariants(&self.s, None);
    }

    /// Runs everything still live to completion; bounded, so a livelock fails.
    fn drain(&mut self) {
        let mut steps = 0;
        while !self.live.is_empty() {
            self.step();
            steps += 1;
            assert!(steps < 100_000, "the scheduler stopped making progress");
        }
    }
}

fn run_seed(seed: u64) -> Coverage {
    let mut w = Workload::new(seed);
    for _ in 0..10_000 {
        w.op();
    }
    w.drain();
    assert_idle(&w.s);
    let st = w.s.stats();
    w.cov.preemptions = st.preemptions;
    w.cov.prefix_hits = st.kv.prefix_hits;
    w.cov.evictions = st.kv.evictions;
    w.cov
}

#[test]
fn ten_thousand_random_operations_keep_every_invariant_across_seeds() {
    let mut total = Coverage::default();
    for seed in [1, 2, 3, 4, 5, 6, 7, 8] {
        let c = run_seed(seed);
        println!("seed {seed}: {c:?}");
        assert!(
            c.steps > 1_000 && c.chunks > 1_000,
            "seed {seed} did real work"
        );
        total.preemptions.interactive += c.preemptions.interactive;
        total.preemptions.batch += c.preemptions.batch;
        total.prefix_hits += c.prefix_hits;
        total.evictions += c.evictions;
        total.rejected += c.rejected;
    }
    assert!(
        total.preemptions.batch > 0,
        "memory pressure preempted batch work"
    );
    assert!(
        total.preemptions.interactive > 0,
        "memory pressure preempted interactive work"
    );
    assert!(total.prefix_hits > 0, "shared prefixes hit the cache");
    assert!(total.evictions > 0, "cached blocks were evicted");
    assert!(total.rejected > 0, "bounded queues refused work");
}
