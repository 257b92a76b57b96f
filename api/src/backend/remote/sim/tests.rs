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
