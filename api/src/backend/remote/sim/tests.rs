//! The simulator's own checks: runs finish, the omniscient router balances,
//! and two choices spread the herd that the most headroom makes when many
//! API instances route on the same reports.

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
