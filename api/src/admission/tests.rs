//! Admission's bounds, the envelope of a capacity profile, and the
//! time-to-first-token objective.

use super::*;
use stoker_schemas::codes::ErrorCode;

/// Calibrated at 1, so estimates are the model's own.
fn adm(seqs: usize, waiting: usize, tokens: usize) -> Arc<Admission> {
    let a = Admission::new(AdmissionLimits {
        max_num_seqs: seqs,
        max_waiting_requests: waiting,
        max_waiting_tokens: tokens,
        max_retry_after: Duration::from_secs(60),
        out_of_envelope_factor: 4.0,
        max_ttft: None,
    });
    a.inner.lock().unwrap().calibration = 1.0;
    a
}

fn stats() -> EngineStats {
    EngineStats {
        kv_blocks_free: 1000,
        kv_blocks_total: 1000,
        ..Default::default()
    }
}

fn demand(p: usize, m: usize) -> Demand {
    Demand {
        prompt_tokens: p,
        max_tokens: m,
        deadline: None,
        tenant: TenantKey::new("default", 1),
    }
}

#[test]
fn queue_bound_refuses_then_frees_on_drop() {
    let a = adm(1, 1, 10_000);
    let s = stats();
    let mut t1 = a.admit(demand(10, 10), &s).unwrap();
    t1.started();
    let t2 = a.admit(demand(10, 10), &s).unwrap();
    let e = a.admit(demand(10, 10), &s).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ServerOverloaded);
    assert!(e.retry_after().is_some());
    drop(t2);
    let t3 = a.admit(demand(10, 10), &s).unwrap();
    drop(t1);
    drop(t3);
    assert_eq!(a.snapshot(), AdmissionSnapshot::default());
}

#[test]
fn waiting_token_bound() {
    let a = adm(8, 8, 100);
    let s = stats();
    let _t1 = a.admit(demand(40, 40), &s).unwrap();
    let e = a.admit(demand(10, 30), &s).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ServerOverloaded);
    let _t2 = a.admit(demand(10, 10), &s).unwrap();
}

#[test]
fn kv_headroom_bound() {
    let a = adm(8, 8, 1 << 20);
    let s = EngineStats {
        kv_blocks_free: 4,
        ..stats()
    };
    let _t1 = a.admit(demand(48, 1), &s).unwrap();
    assert!(a.admit(demand(32, 1), &s).is_err());
    let _t2 = a.admit(demand(16, 1), &s).unwrap();
}

#[test]
fn retry_after_follows_the_drain_rate() {
    let a = adm(1, 0, 1 << 20);
    let s = stats();
    // Ten requests finish in ~50 ms: a fast drain gives a short wait.
    for _ in 0..10 {
        let mut t = a.admit(demand(1, 1), &s).unwrap();
        t.started();
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut hold = a.admit(demand(1, 1), &s).unwrap();
    hold.started();
    let fast = a
        .admit(demand(1, 1), &s)
        .unwrap_err()
        .retry_after()
        .unwrap();
    assert!(fast.0 < Duration::from_secs(1), "{fast:?}");
    // No finishes measured: fall back to the engine's token rate.
    let b = adm(1, 0, 1 << 20);
    let slow = EngineStats {
        tokens_per_second_ewma: 2.0,
        ..stats()
    };
    let mut h = b.admit(demand(10, 10), &slow).unwrap();
    h.started();
    let r = b
        .admit(demand(10, 10), &slow)
        .unwrap_err()
        .retry_after()
        .unwrap();
    assert_eq!(r.0, Duration::from_secs(10));
}

fn profile(concurrency: usize, active_tokens: usize) -> EnvelopeLimits {
    EnvelopeLimits {
        concurrency,
        active_tokens,
        prefill_tok_s: Some(500.0),
        throughput_tok_s: 20.0,
        prompt_tokens_p95: Some(100),
        output_tokens_p95: Some(50),
        ..EnvelopeLimits::for_test()
    }
}

#[test]
fn profile_bounds_outstanding_requests() {
    let a = adm(8, 8, 1 << 20);
    let s = stats();
    a.set_profile(Some(profile(2, 1 << 20)));
    let t1 = a.admit(demand(10, 10), &s).unwrap();
    let t2 = a.admit(demand(10, 10), &s).unwrap();
    let e = a.admit(demand(10, 10), &s).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ServerOverloaded);
    assert!(e.to_string().contains("envelope"), "{e}");
    // Nothing finished and no live rate: the profile's output rate drains
    // the 40 waiting tokens plus this request's 20 at 20 tok/s.
    assert_eq!(e.retry_after().unwrap().0, Duration::from_secs(3));
    let r = a.report(&s);
    assert_eq!((r.source, r.max_outstanding), ("profile", 2));
    drop(t1);
    let _t3 = a.admit(demand(10, 10), &s).unwrap();
    // Back to the static limits: eight slots plus eight waiting.
    a.set_profile(None);
    let _more: Vec<_> = (0..10)
        .map(|_| a.admit(demand(1, 1), &s).unwrap())
        .collect();
    assert_eq!(a.report(&s).source, "static");
    drop(t2);
}

#[test]
fn profile_bounds_active_tokens_but_admits_a_lone_request() {
    let a = adm(8, 8, 1 << 20);
    let s = stats();
    a.set_profile(Some(profile(8, 100)));
    // Alone, even a request past the envelope runs: refusing it would be
    // a refusal it could never get past.
    let big = a.admit(demand(90, 60), &s).unwrap();
    assert!(a.admit(demand(1, 1), &s).is_err());
    drop(big);
    let _t1 = a.admit(demand(40, 20), &s).unwrap();
    let _t2 = a.admit(demand(20, 20), &s).unwrap();
    let e = a.admit(demand(1, 1), &s).unwrap_err();
    assert_eq!(e.code(), ErrorCode::ServerOverloaded);
    assert_eq!(a.snapshot().active_tokens, 100);
}

#[test]
fn profile_rates_until_live_rates_exist() {
    let a = adm(4, 4, 1 << 20);
    a.set_profile(Some(profile(8, 1 << 20)));
    let mut d = demand(1000, 1);
    d.deadline = Some(Duration::from_millis(500));
    // 1000 prompt tokens at the profile's 500 tok/s: 2 s, past 500 ms.
    let e = a.admit(d.clone(), &stats()).unwrap_err();
    assert_eq!(e.code(), ErrorCode::DeadlineInfeasible);
    assert_eq!(a.report(&stats()).prefill_rate_source, "profile");
    // A live rate takes over: 1000 tokens at 10,000 tok/s fit.
    let live = EngineStats {
        prefill_tokens_per_second_ewma: 10_000.0,
        ..stats()
    };
    a.admit(d, &live).unwrap();
    assert_eq!(a.report(&live).prefill_rate_source, "live");
}

#[test]
fn out_of_envelope_needs_a_profile() {
    let a = adm(4, 4, 1 << 20);
    assert_eq!(a.out_of_envelope(&demand(10_000, 1)), None);
    a.set_profile(Some(profile(8, 1 << 20)));
    assert_eq!(
        a.out_of_envelope(&demand(401, 1)),
        Some(OutOfEnvelope::PromptLength)
    );
    assert_eq!(a.out_of_envelope(&demand(400, 200)), None);
}

#[test]
fn infeasible_deadline_is_refused_at_once() {
    let a = adm(4, 4, 1 << 20);
    let s = EngineStats {
        prefill_tokens_per_second_ewma: 1000.0,
        ..stats()
    };
    let mut d = demand(2000, 1);
    d.deadline = Some(Duration::from_millis(500));
    let e = a.admit(d.clone(), &s).unwrap_err();
    assert_eq!(e.code(), ErrorCode::DeadlineInfeasible);
    assert_eq!(e.retry_after().unwrap().0, Duration::from_millis(1500));
    d.deadline = Some(Duration::from_secs(5));
    a.admit(d, &s).unwrap();
}

mod objective {
    use super::super::*;
    use stoker_executor::scheduler::CostSnapshot;
    use stoker_schemas::codes::ErrorCode;

    /// Calibrated at 1 (as if estimates had proved exact), so the
    /// arithmetic below is the estimate's own.
    pub(super) fn adm(seqs: usize, objective_ms: Option<u64>) -> Arc<Admission> {
        let a = unmeasured(seqs, objective_ms);
        a.inner.lock().unwrap().calibration = 1.0;
        a
    }

    /// A fresh server's admission: nothing measured yet.
    pub(super) fn unmeasured(seqs: usize, objective_ms: Option<u64>) -> Arc<Admission> {
        Admission::new(AdmissionLimits {
            max_num_seqs: seqs,
            max_waiting_requests: 1024,
            max_waiting_tokens: 1 << 30,
            max_retry_after: Duration::from_secs(60),
            out_of_envelope_factor: 4.0,
            max_ttft: objective_ms.map(Duration::from_millis),
        })
    }

    #[test]
    fn a_fresh_server_reads_its_estimates_as_late_until_a_first_token_says() {
        // 1,000 prompt tokens a second; 7 prompts of 250 tokens ahead and
        // its own: 2 s, read as 3 s unmeasured, past an objective of 2.8 s.
        let a = unmeasured(64, Some(2800));
        let s = stats();
        let mut held: Vec<Ticket> = (0..7)
            .map(|_| a.admit(demand(250, 10), &s).unwrap())
            .collect();
        assert!(a.admit(demand(250, 10), &s).is_err());
        // The first request's first token came sooner than its estimate
        // (250 ms) says: admission believes the estimates from then on.
        held[0].started();
        a.inner.lock().unwrap().calibration = 0.0;
        held[0].raw_ttft = Duration::from_millis(250);
        held[0].admitted_at = Instant::now() - Duration::from_millis(250);
        held[0].first_token();
        let f = a.inner.lock().unwrap().factor();
        assert!((f - 1.0).abs() < 0.1, "{f}");
        a.admit(demand(250, 10), &s).unwrap();
    }

    #[test]
    fn prompts_admitted_and_not_yet_prefilled_stand_ahead() {
        let a = adm(64, Some(1000));
        let s = stats();
        // Three 300-token prompts admitted and started, none prefilled:
        // 900 ms ahead of the next prompt, within the objective.
        let mut held: Vec<Ticket> = (0..3)
            .map(|_| a.admit(demand(300, 10), &s).unwrap())
            .collect();
        held.iter_mut().for_each(Ticket::started);
        assert!(a.admit(demand(300, 10), &s).is_err());
        // Once two have their first token, only one prompt stands ahead.
        held[0].first_token();
        held[1].first_token();
        a.admit(demand(300, 10), &s).unwrap();
    }

    /// 1,000 prompt tokens a second; a full step of `seqs` rows costs
    /// 4 + 1 ms a row.
    pub(super) fn stats() -> EngineStats {
        let mut s = EngineStats {
            kv_blocks_free: 1 << 20,
            kv_blocks_total: 1 << 20,
            prefill_tokens_per_second_ewma: 1000.0,
            ..Default::default()
        };
        s.planner.cost = CostSnapshot {
            fixed_ms: 4.0,
            per_token_ms: 1.0,
            ..s.planner.cost
        };
        s
    }

    fn demand(p: usize, m: usize) -> Demand {
        Demand {
            prompt_tokens: p,
            max_tokens: m,
            deadline: None,
            tenant: TenantKey::new("default", 1),
        }
    }

    #[test]
    fn a_request_with_nothing_ahead_is_admitted_however_long_its_prompt() {
        let a = adm(2, Some(1000));
        // 10 s of prefill, but refusing it cannot make it start sooner.
        let t = a.admit(demand(10_000, 10), &stats()).unwrap();
        drop(t);
    }

    #[test]
    fn the_objective_refuses_what_would_wait_past_it_and_admits_again_as_outputs_shorten() {
        let a = adm(2, Some(2000));
        let s = stats();
        // Two running requests that may each make 1,000 tokens: a third waits
        // for one of them, 1,000 × 6 ms / 2 = 3 s, past 2 s.
        let mut running: Vec<Ticket> = (0..2)
            .map(|_| {
                let mut t = a.admit(demand(10, 1000), &s).unwrap();
                t.started();
                t
            })
            .collect();
        let e = a.admit(demand(10, 1000), &s).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ServerOverloaded);
        assert!(e.to_string().contains("admission.max_ttft_ms"), "{e}");
        let retry = e.retry_after().unwrap().0;
        assert!(retry >= Duration::from_millis(900), "{retry:?}");
        assert_eq!(a.report(&s).max_ttft_ms, Some(2000));
        // Requests turn out to stop after 100 tokens: a slot frees every
        // 300 ms, and the next request fits. (The finishes also give a
        // measured drain rate; the smaller estimate stands.)
        for t in &mut running {
            t.finished(100);
        }
        running.clear();
        let mut again: Vec<Ticket> = (0..2)
            .map(|_| {
                let mut t = a.admit(demand(10, 1000), &s).unwrap();
                t.started();
                t
            })
            .collect();
        a.admit(demand(10, 1000), &s).unwrap();
        again.clear();
        assert_eq!(a.snapshot().running, 0);
    }

    /// A freshly loaded engine has measured nothing: the step-cost model's
    /// prior prices the prompts ahead, and a burst of eight short chats on a
    /// 5 s objective is admitted (a model fitted on the warm-up's cold
    /// one-token steps priced a prompt token at 25 ms and refused the fifth).
    #[test]
    fn a_fresh_engine_admits_a_burst_of_short_chats() {
        let a = adm(16, Some(5000));
        let mut s = stats();
        s.prefill_tokens_per_second_ewma = 0.0;
        s.planner.cost = stoker_executor::scheduler::CostModel::default().snapshot();
        let burst: Vec<Ticket> = (0..8)
            .map(|i| {
                a.admit(demand(40, 1), &s)
                    .unwrap_or_else(|e| panic!("chat {i}: {e}"))
            })
            .collect();
        assert_eq!(a.report(&s).prefill_rate_source, "none");
        assert_eq!(burst.len(), 8);
        // The same burst behind a cost model that says 25 ms a token is
        // refused: the objective still bites on what the engine reports.
        s.planner.cost.per_token_ms = 25.0;
        let e = a.admit(demand(40, 1), &s).unwrap_err();
        assert_eq!(e.code(), ErrorCode::ServerOverloaded);
    }

    #[test]
    fn off_it_queues_as_the_bounds_allow() {
        let a = adm(1, None);
        let s = stats();
        let mut t = a.admit(demand(10, 100_000), &s).unwrap();
        t.started();
        let _queued = a.admit(demand(10, 100_000), &s).unwrap();
    }

    #[test]
    fn a_deadline_uses_the_same_estimate() {
        let a = adm(1, None);
        let s = stats();
        let mut t = a.admit(demand(10, 1000), &s).unwrap();
        t.started();
        // One slot, 1,000 tokens at 5 ms: 5 s before a slot frees.
        let mut d = demand(10, 10);
        d.deadline = Some(Duration::from_secs(4));
        let e = a.admit(d.clone(), &s).unwrap_err();
        assert_eq!(e.code(), ErrorCode::DeadlineInfeasible);
        d.deadline = Some(Duration::from_secs(6));
        a.admit(d, &s).unwrap();
    }
}

mod calibration {
    use super::super::*;

    fn adm() -> Arc<Admission> {
        let a = Admission::new(AdmissionLimits {
            max_num_seqs: 1,
            max_waiting_requests: 64,
            max_waiting_tokens: 1 << 30,
            max_retry_after: Duration::from_secs(60),
            out_of_envelope_factor: 4.0,
            max_ttft: Some(Duration::from_millis(3000)),
        });
        a.inner.lock().unwrap().calibration = 1.0;
        a
    }

    /// Ratios spread evenly over 0.5-1.5 (observed over estimated): the
    /// factor settles where 0.25 of the mean excess above it balances
    /// 0.0025 of the mean shortfall below it, 1.41 (the 91st percentile);
    /// a down step of 0.005 settled at 1.38.
    #[test]
    fn the_factor_settles_high_in_the_spread_of_ratios() {
        let a = adm();
        let mut g = a.inner.lock().unwrap();
        let est = Duration::from_secs(1);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut sum = 0.0;
        for i in 0..40_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let ratio = 0.5 + (x >> 11) as f64 / (1u64 << 53) as f64;
            g.calibrate(est, Duration::from_secs_f64(ratio));
            if i >= 20_000 {
                sum += g.calibration;
            }
        }
        let settled = sum / 20_000.0;
        assert!((1.395..1.425).contains(&settled), "{settled}");
    }

    #[test]
    fn waits_longer_than_estimated_raise_the_estimate_and_short_ones_lower_it_slowly() {
        let a = adm();
        let mut g = a.inner.lock().unwrap();
        g.calibration = 0.0;
        let est = Duration::from_secs(1);
        // Unmeasured, estimates are read as late; the first observation
        // replaces that guess outright.
        assert_eq!(g.factor(), UNMEASURED_FACTOR);
        g.calibrate(est, Duration::from_millis(800));
        assert!((g.calibration - 0.8).abs() < 1e-9, "{}", g.calibration);
        g.calibrate(est, Duration::from_secs(2));
        assert!((g.calibration - 1.1).abs() < 1e-9, "{}", g.calibration);
        for _ in 0..50 {
            g.calibrate(est, Duration::from_secs(2));
        }
        assert!(g.calibration > 1.99, "{}", g.calibration);
        let high = g.calibration;
        g.calibrate(est, Duration::from_millis(500));
        assert!(g.calibration < high && g.calibration > high - 0.05);
        // Tiny estimates teach nothing; absurd ratios are clamped.
        let before = g.calibration;
        g.calibrate(Duration::from_millis(5), Duration::from_secs(60));
        assert_eq!(g.calibration, before);
        for _ in 0..200 {
            g.calibrate(est, Duration::from_secs(3600));
        }
        assert!(g.calibration <= 4.0);
    }

    #[test]
    fn shed_refuses_only_what_admit_would_refuse_for_any_prompt() {
        let a = adm();
        let mut s = EngineStats {
            kv_blocks_free: 1 << 20,
            kv_blocks_total: 1 << 20,
            prefill_tokens_per_second_ewma: 1000.0,
            ..Default::default()
        };
        s.planner.cost.fixed_ms = 4.0;
        s.planner.cost.per_token_ms = 1.0;
        let demand = |m| Demand {
            prompt_tokens: 10,
            max_tokens: m,
            deadline: None,
            tenant: TenantKey::new("default", 1),
        };
        a.shed(&s, &TenantKey::new("default", 1), None).unwrap();
        let mut t = a.admit(demand(400), &s).unwrap();
        t.started();
        // One slot held for 400 tokens at 5 ms: 2 s ahead, within 3 s.
        a.shed(&s, &TenantKey::new("default", 1), None).unwrap();
        let _queued = a.admit(demand(400), &s).unwrap();
        // Two ahead: 4 s, past the objective for any prompt.
        let e = a.shed(&s, &TenantKey::new("default", 1), None).unwrap_err();
        assert!(e.to_string().contains("admission.max_ttft_ms"), "{e}");
        assert!(a.admit(demand(1), &s).is_err());
        // With a deadline that fails too, the refusal names the deadline.
        let e = a
            .shed(
                &s,
                &TenantKey::new("default", 1),
                Some(Duration::from_millis(100)),
            )
            .unwrap_err();
        assert_eq!(
            e.code(),
            stoker_schemas::codes::ErrorCode::DeadlineInfeasible,
            "{e}"
        );
    }
}

/// Two tenants of weight 1: a flooding tenant's backlog never refuses the
/// other, at the queue bounds, the KV headroom and the objective.
mod tenants {
    use super::*;

    fn of(tenant: &str, p: usize, m: usize) -> Demand {
        Demand {
            prompt_tokens: p,
            max_tokens: m,
            deadline: None,
            tenant: TenantKey::new(tenant, 1),
        }
    }

    #[test]
    fn a_full_queue_of_one_tenant_still_admits_another_within_its_share() {
        // 1 slot + 2 waiting: A takes all three.
        let a = adm(1, 2, 10_000);
        let s = stats();
        let mut held: Vec<Ticket> = (0..3)
            .map(|_| a.admit(of("a", 10, 10), &s).unwrap())
            .collect();
        held[0].started();
        let e = a.admit(of("a", 10, 10), &s).unwrap_err();
        assert!(e.to_string().contains("at capacity"), "{e}");
        // B is within half of the limit: admitted, once.
        let _b = a.admit(of("b", 10, 10), &s).unwrap();
        // Its second request would pass its half (2 of 3): refused.
        assert!(a.admit(of("b", 10, 10), &s).is_err());
    }

    #[test]
    fn waiting_tokens_of_one_tenant_do_not_refuse_another() {
        let a = adm(1, 100, 1000);
        let s = stats();
        let mut first = a.admit(of("a", 100, 100), &s).unwrap();
        first.started();
        let _q = a.admit(of("a", 450, 450), &s).unwrap();
        assert!(a.admit(of("a", 100, 100), &s).is_err());
        let _b = a.admit(of("b", 100, 100), &s).unwrap();
    }

    #[test]
    fn kv_headroom_counts_only_what_is_served_first() {
        let a = adm(64, 100, 1 << 20);
        let mut s = stats();
        s.kv_blocks_free = 25;
        let mut first = a.admit(of("a", 32, 32), &s).unwrap();
        first.started();
        // Two waiting 160-token prompts of A need 20 of the 25 free blocks.
        let _a: Vec<Ticket> = (0..2)
            .map(|_| {
                a.admit(of("a", 160, 32), &s)
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        // A's next one waits behind all of A's: refused.
        let e = a.admit(of("a", 160, 32), &s).unwrap_err();
        assert!(e.to_string().contains("KV cache"), "{e}");
        // B's short prompt holds less than its share of the outstanding
        // tokens: the engine preempts A for it, so free blocks do not bound it.
        let _b = a.admit(of("b", 20, 32), &s).unwrap();
    }
}

/// The objective with two tenants: another tenant's backlog counts only by
/// the share of it the engine serves first.
mod tenant_objective {
    use super::objective::{adm, stats};
    use super::*;

    fn of(tenant: &str, p: usize, m: usize) -> Demand {
        Demand {
            prompt_tokens: p,
            max_tokens: m,
            deadline: None,
            tenant: TenantKey::new(tenant, 1),
        }
    }

    #[test]
    fn a_flood_past_the_objective_refuses_its_own_tenant_not_another() {
        // Objective 3 s, 1,000 prompt tokens a second, plenty of slots: the
        // eighth of A's 400-token prompts would start after 2.8 s of the
        // others' prefill.
        let a = adm(64, Some(3000));
        let s = stats();
        let mut first = a.admit(of("a", 400, 32), &s).unwrap();
        first.started();
        let _queued: Vec<Ticket> = (0..6)
            .map(|_| a.admit(of("a", 400, 32), &s).unwrap())
            .collect();
        let e = a.admit(of("a", 400, 32), &s).unwrap_err();
        assert!(e.to_string().contains("admission.max_ttft_ms"), "{e}");
        // B's 30-token prompt waits for about 30 tokens of A's, not 2,800.
        let b = a.admit(of("b", 30, 32), &s).unwrap();
        assert!(
            b.estimated_ttft() < Duration::from_millis(200),
            "{:?}",
            b.estimated_ttft()
        );
    }
}

#[test]
fn refused_requests_are_told_to_come_back_one_after_another() {
    let a = adm(1, 1, 10_000);
    let s = stats();
    let mut t1 = a.admit(demand(10, 10), &s).unwrap();
    t1.started();
    let _t2 = a.admit(demand(10, 10), &s).unwrap();
    let after = |e: ApiError| e.retry_after().expect("a Retry-After").0;
    let r1 = after(a.admit(demand(10, 10), &s).unwrap_err());
    let r2 = after(a.admit(demand(10, 10), &s).unwrap_err());
    let r3 = after(a.admit(demand(10, 10), &s).unwrap_err());
    // Nothing finished yet, so no drain rate: a second apart.
    assert!(r2 >= r1 + Duration::from_millis(990), "{r1:?} {r2:?}");
    assert!(r3 >= r2 + Duration::from_millis(990), "{r2:?} {r3:?}");
}
