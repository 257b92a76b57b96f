//! Sweeps the routing simulator (`stoker_sim`): each
//! policy over API instances x executors at 80% of the executors' aggregate
//! capacity, against the omniscient router, and prints the 50 x 500 line
//! the scale issue sets targets for (load max/mean <= 1.25, TTFT p99 within
//! 1.5x of omniscient), measured over 120 s. `STOKER_SIM_QUICK=1` runs a
//! small smoke sweep; `STOKER_SIM_TARGET_ONLY=1` stops after the target
//! line, `STOKER_SIM_SWEEP_ONLY=1` skips it; `STOKER_SIM_ROWS=power_of_two,max_headroom`
//! runs only the rows named (and the omniscient baselines).

use std::time::Instant;

use stoker_routing::RoutingPolicy;
use stoker_sim::{self as sim, Arrivals, Outcome, Policy, SimConfig};

/// A row: its label, the policy, whether routers prefer the executor
/// caching the prefix, whether they read their own requests out of the
/// reports (`SimConfig::own_accounting`).
type Variant = (&'static str, Policy, bool, bool);

const MAX_HEADROOM: Policy = Policy::Routed(RoutingPolicy::MaxHeadroom);
const TWO: Policy = Policy::Routed(RoutingPolicy::PowerOfChoices { d: 2 });

const THREE: Policy = Policy::Routed(RoutingPolicy::PowerOfChoices { d: 3 });

/// The sweep's rows; the omniscient router last, the baseline of the ratio.
const SWEEP: [Variant; 4] = [
    ("max_headroom", MAX_HEADROOM, true, true),
    ("power_of_two", TWO, true, true),
    ("power_of_three", THREE, true, true),
    ("omniscient", Policy::Omniscient, true, true),
];

/// The target line's rows: the sweep's, and without prefix affinity.
const FOUR: Policy = Policy::Routed(RoutingPolicy::PowerOfChoices { d: 4 });
/// API instances and executors of the target line.
const TARGET: (u32, u32) = (50, 500);

const TARGET_ROWS: [Variant; 9] = [
    ("max_headroom, no affinity", MAX_HEADROOM, false, true),
    ("power_of_two, no affinity", TWO, false, true),
    ("omniscient, no affinity", Policy::Omniscient, false, true),
    ("max_headroom", MAX_HEADROOM, true, true),
    ("power_of_two (sends since report)", TWO, true, false),
    ("power_of_two", TWO, true, true),
    ("power_of_three", THREE, true, true),
    ("power_of_four", FOUR, true, true),
    ("omniscient", Policy::Omniscient, true, true),
];

/// The target line's measured window, seconds: long enough that a time
/// average over 500 executors measures routing, not which executor drew a
/// few long requests (at 20 s, each executor serves about 16 requests, and
/// even the omniscient router's max/mean is 1.2).
const TARGET_MEASURE_S: f64 = 120.0;

fn config(apis: u32, executors: u32, v: &Variant, arrivals: Arrivals, quick: bool) -> SimConfig {
    let mut c = SimConfig::new(apis, executors, v.1);
    c.affinity = v.2;
    c.own_accounting = v.3;
    c.arrivals = arrivals;
    // Enough measured requests for a p99 at few executors, a bounded run
    // at many.
    let rate = c.rate();
    let (warm, least, most) = if quick {
        (5.0, 10.0, 60.0)
    } else {
        (10.0, 20.0, 400.0)
    };
    let want = if quick { 300.0 } else { 3000.0 };
    c.warmup_s = warm;
    c.measure_s = (want / rate).clamp(least, most);
    if !quick && (apis, executors) == TARGET {
        c.measure_s = TARGET_MEASURE_S;
    }
    c
}

fn row(label: &str, apis: u32, executors: u32, o: &Outcome, base: &Outcome, secs: f64) {
    println!(
        "| {label} | {apis} | {executors} | {} | {:.0} | {:.0} | {:.2} | {:.3} | {:.2} | {} | {} | {:.1} |",
        o.requests,
        o.ttft_p50_ms,
        o.ttft_p99_ms,
        o.ttft_p99_ms / base.ttft_p99_ms,
        o.goodput,
        o.load_max_over_mean,
        o.refused,
        o.misrouted,
        secs,
    );
}

const HEADER: &str = "| policy | APIs | executors | requests | TTFT p50 ms | TTFT p99 ms | p99 / omniscient | goodput | load max/mean | refused | misrouted | run s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

fn compare(
    apis: u32,
    executors: u32,
    arrivals: Arrivals,
    variants: &[Variant],
    quick: bool,
) -> Vec<(&'static str, Outcome)> {
    let mut outs = Vec::new();
    // `STOKER_SIM_ROWS=a,b`: only these rows (and the omniscient baseline).
    let only = std::env::var("STOKER_SIM_ROWS").ok();
    let wanted = |label: &str| {
        only.as_deref()
            .is_none_or(|o| label.starts_with("omniscient") || o.split(',').any(|r| r == label))
    };
    for v in variants.iter().filter(|v| wanted(v.0)) {
        let t = Instant::now();
        let o = sim::run(&config(apis, executors, v, arrivals, quick));
        outs.push((v.0, o, t.elapsed().as_secs_f64()));
    }
    let base = outs.last().expect("omniscient ran").1.clone();
    for (label, o, secs) in &outs {
        row(label, apis, executors, o, &base, *secs);
    }
    outs.into_iter().map(|(l, o, _)| (l, o)).collect()
}

fn main() {
    let quick = std::env::var("STOKER_SIM_QUICK").is_ok_and(|v| v == "1");
    let started = Instant::now();
    println!(
        "executor capacity {:.3} req/s (cost model prior), offered load 80%",
        SimConfig::new(1, 1, Policy::Omniscient).executor_capacity()
    );
    let (apis, execs): (&[u32], &[u32]) = if quick {
        (&[1, 16], &[2, 16])
    } else {
        (&[1, 4, 16, 50, 64], &[2, 16, 100, 500, 1000])
    };
    let (ta, te) = if quick { (16, 16) } else { TARGET };
    let sweep_only = std::env::var("STOKER_SIM_SWEEP_ONLY").is_ok_and(|v| v == "1");
    for arrivals in [Arrivals::Poisson, Arrivals::Bursty] {
        if sweep_only {
            break;
        }
        println!("\n## target: {ta} APIs x {te} executors, {arrivals:?} arrivals\n\n{HEADER}");
        let outs = compare(ta, te, arrivals, &TARGET_ROWS, quick);
        let base = &outs.last().expect("omniscient ran").1;
        let line: Vec<String> = outs
            .iter()
            .map(|(label, o)| {
                format!(
                    "{label}: max/mean {:.2} p99 {:.2}x",
                    o.load_max_over_mean,
                    o.ttft_p99_ms / base.ttft_p99_ms
                )
            })
            .collect();
        println!("\nTARGET {ta}x{te} {arrivals:?}: {}", line.join(" | "));
    }
    if std::env::var("STOKER_SIM_TARGET_ONLY").is_ok_and(|v| v == "1") {
        return;
    }
    println!("\n## sweep, Poisson arrivals\n\n{HEADER}");
    for &e in execs {
        for &a in apis {
            if (a, e) == (ta, te) {
                continue;
            }
            compare(a, e, Arrivals::Poisson, &SWEEP, quick);
        }
    }
    println!("\nwhole sweep {:.1} s", started.elapsed().as_secs_f64());
}
