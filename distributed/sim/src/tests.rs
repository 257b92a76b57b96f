//! The simulator's own checks: runs finish, the omniscient router balances,
//! and two choices spread the herd that the most headroom makes when many
//! API instances route on the same reports.

use stoker_executor::scheduler::StepFeatures;

use super::events::SECOND;
use super::*;

fn quick(apis: u32, executors: u32, policy: Policy) -> Outcome {
    let mut c = SimConfig::new(apis, executors, policy);
    c.warmup_s = 5.0;
    c.measure_s = 20.0;
    run(&c)
}

#[test]
fn a_small_run_serves_its_requests() {
    let o = quick(2, 4, Policy::Routed(RoutingPolicy::PowerOfChoices { d: 2 }));
    assert!(o.requests > 40, "{o:?}");
    assert_eq!(o.refused, 0, "{o:?}");
    assert!(
        o.ttft_p50_ms > 0.0 && o.ttft_p50_ms <= o.ttft_p99_ms,
        "{o:?}"
    );
    assert!(o.goodput > 0.5, "{o:?}");
    assert!(o.prefix_hits > 0, "{o:?}");
}

#[test]
fn two_choices_spread_load_better_than_most_headroom_under_many_apis() {
    let p2 = quick(
        32,
        32,
        Policy::Routed(RoutingPolicy::PowerOfChoices { d: 2 }),
    );
    let max = quick(32, 32, Policy::Routed(RoutingPolicy::MaxHeadroom));
    assert!(
        p2.load_max_over_mean < max.load_max_over_mean,
        "two choices {p2:?}\nmost headroom {max:?}"
    );
    assert!(p2.misrouted < max.misrouted, "{p2:?}\n{max:?}");
}

#[test]
fn every_measured_request_counts_for_the_executor_that_ran_it() {
    let o = quick(2, 4, Policy::Routed(RoutingPolicy::PowerOfChoices { d: 2 }));
    assert_eq!(o.served.len(), 4);
    assert_eq!(o.served.iter().sum::<usize>(), o.requests - o.refused);
    assert!(o.served.iter().all(|&n| n > 0), "{o:?}");
}

#[test]
fn a_fixed_mix_is_the_lengths_it_names_and_sets_the_capacity() {
    let mut c = SimConfig::new(1, 2, Policy::Omniscient);
    c.mix = Mix::fixed(128, 32);
    assert_eq!(c.mix.mean_tokens(), (128.0, 32.0));
    // 160 tokens at 1.5 ms plus 5 ms per 512, 32 sampled rows at 0.3, and
    // 128²/2 + 32 × 128 + 32²/2 attention pairs at 0.4 ms a thousand.
    let ms = 160.0 * (1.5 + 5.0 / 512.0) + 32.0 * 0.3 + 0.4 * 12.8;
    assert!((c.executor_capacity() - 1000.0 / ms).abs() < 1e-9);
    c.load = 0.5;
    assert!((c.rate() - 2.0 * 0.5 * 1000.0 / ms).abs() < 1e-9);
}

/// A lone request's busy time is its steps' cost: one prefill step of the
/// whole prompt, then a decode step per further token.
#[test]
fn busy_time_is_the_steps_a_request_costs() {
    let mut c = SimConfig::new(1, 1, Policy::Omniscient);
    c.mix = Mix::fixed(64, 4);
    c.load = 0.01;
    c.warmup_s = 0.0;
    c.measure_s = 600.0;
    let o = run(&c);
    assert!(o.requests > 5, "{o:?}");
    let cost = c.cost;
    let lone = cost.ms(StepFeatures::chunk(0, 64, true))
        + (0..3)
            .map(|g| cost.ms(StepFeatures::chunk(64 + g, 1, true)))
            .sum::<f64>();
    // Microsecond rounding per step, and the odd overlap of two requests.
    assert!(
        (o.busy_ms_per_request - lone).abs() / lone < 0.02,
        "{} ms a request, {lone} ms alone",
        o.busy_ms_per_request
    );
    let mut doubled = c.clone();
    doubled.cost = cost.scaled(2.0);
    let o2 = run(&doubled);
    assert!((o2.busy_ms_per_request / o.busy_ms_per_request - 2.0).abs() < 0.05);
}

/// A reply's trip adds to every routed request's time to first token and
/// draws nothing when fixed, so the rest of the run is unchanged.
#[test]
fn a_fixed_reply_trip_shifts_the_first_token_and_nothing_else() {
    let routed = Policy::Routed(RoutingPolicy::PowerOfChoices { d: 2 });
    let mut c = SimConfig::new(2, 4, routed);
    c.warmup_s = 5.0;
    c.measure_s = 20.0;
    let base = run(&c);
    c.reply_delay = (40 * MS, 40 * MS);
    let later = run(&c);
    assert_eq!(base.served, later.served);
    assert!(
        (later.ttft_p50_ms - base.ttft_p50_ms - 40.0).abs() < 1e-6,
        "{base:?}\n{later:?}"
    );
    assert!((later.ttft_p99_ms - base.ttft_p99_ms - 40.0).abs() < 1e-6);
}

/// A replayed schedule is what arrives: every time once, at that time, and
/// nothing after it; a lone prompt's first token comes a job's trip plus
/// one prefill step later.
#[test]
fn a_replayed_schedule_is_the_arrivals() {
    let mut c = SimConfig::new(1, 2, Policy::Routed(RoutingPolicy::PowerOfChoices { d: 2 }));
    c.mix = Mix::fixed(64, 2);
    c.arrival_trace = Some((0..20).map(|i| i * SECOND).collect());
    c.warmup_s = 0.0;
    c.measure_s = 19.001;
    let o = run(&c);
    assert_eq!(o.requests, 20, "{o:?}");
    assert_eq!(o.served.iter().sum::<usize>(), 20);
    let prefill = c.cost.ms(StepFeatures::chunk(0, 64, true));
    let (lo, hi) = c.job_delay;
    let (lo, hi) = (lo as f64 / MS as f64, hi as f64 / MS as f64);
    for t in [o.ttft_p50_ms, o.ttft_p99_ms] {
        assert!(
            t >= prefill + lo - 0.01 && t <= prefill + hi + 0.01,
            "{t} ms, prefill {prefill} ms"
        );
    }
}
