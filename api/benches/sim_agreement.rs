//! The routing simulator on one workload named by the environment, for the
//! comparison with a real distributed run of the same workload:
//! `scripts/bench-sim-agreement.sh` measures the real run (one API
//! instance, two executors, Poisson arrivals of fixed-length requests),
//! reads the executors' fitted step cost from their metrics, and calls this
//! with both. Prints one JSON line: TTFT p50/p99 and the requests each
//! executor ran.
//!
//! `STOKER_SIM_RATE` (requests/s), `STOKER_SIM_INPUT` and
//! `STOKER_SIM_OUTPUT` (tokens), `STOKER_SIM_COST`
//! (`fixed,per_token,per_row,per_1k_pairs` in ms), and optionally `STOKER_SIM_APIS` (1), `STOKER_SIM_EXECUTORS` (2),
//! `STOKER_SIM_SECONDS` (measured, 300), `STOKER_SIM_SEED` (1).

use stoker_api::backend::remote::capacity::RoutingPolicy;
use stoker_api::backend::remote::sim::{self, Cost, Mix, Policy, SimConfig};

fn var<T: std::str::FromStr>(name: &str, default: Option<T>) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default.unwrap_or_else(|| panic!("set {name}")),
    }
}

fn main() {
    let apis: u32 = var("STOKER_SIM_APIS", Some(1));
    let executors: u32 = var("STOKER_SIM_EXECUTORS", Some(2));
    let rate: f64 = var("STOKER_SIM_RATE", None);
    let input: u32 = var("STOKER_SIM_INPUT", None);
    let output: u32 = var("STOKER_SIM_OUTPUT", None);
    let cost: String = var("STOKER_SIM_COST", None);
    let terms: Vec<f64> = cost
        .split(',')
        .map(|t| {
            t.parse()
                .expect("STOKER_SIM_COST is fixed,per_token,per_row,per_1k_pairs in ms")
        })
        .collect();
    let [fixed_ms, per_token_ms, per_row_ms, per_1k_pairs_ms] = terms[..] else {
        panic!("STOKER_SIM_COST is fixed,per_token,per_row,per_1k_pairs in ms")
    };
    let mut c = SimConfig::new(apis, executors, Policy::Routed(RoutingPolicy::default()));
    c.mix = Mix::fixed(input, output);
    c.cost = Cost {
        fixed_ms,
        per_token_ms,
        per_row_ms,
        per_1k_pairs_ms,
    };
    c.load = rate / (executors as f64 * c.executor_capacity());
    c.warmup_s = 10.0;
    c.measure_s = var("STOKER_SIM_SECONDS", Some(300.0));
    c.seed = var("STOKER_SIM_SEED", Some(1));
    let o = sim::run(&c);
    println!(
        "{{\"requests\": {}, \"load\": {:.3}, \"ttft_p50_ms\": {:.1}, \"ttft_p99_ms\": {:.1}, \"served\": {:?}, \"refused\": {}}}",
        o.requests, c.load, o.ttft_p50_ms, o.ttft_p99_ms, o.served, o.refused
    );
}
