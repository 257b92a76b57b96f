//! The routing simulator on one workload named by the environment, for the
//! comparison with a real distributed run of the same workload:
//! `scripts/bench-sim-agreement.sh` measures the real run (one API
//! instance, two executors, Poisson arrivals of fixed-length requests),
//! reads from the executors' metrics their fitted step cost, the time they
//! spent stepping per request and their own time to first token, and calls
//! this with all three. Prints one JSON line.
//!
//! The simulator is calibrated to the measurement, not tuned to the answer:
//! - **Step cost.** The executors' fitted terms give the cost's shape; the
//!   fit decays towards recent steps and is read once at the end, so its
//!   level drifts from run to run. The level is set so that the simulated
//!   executors spend the busy time per request the real ones measured
//!   (`stoker_engine_step_duration_seconds` over the run): the terms are
//!   scaled by a common factor, found by rerunning until it settles.
//! - **The wire.** A real first token also crosses the broker twice and the
//!   API's stream; the client's mean TTFT less the engines' own is the
//!   reply's trip in the simulation (less the job's 2-8 ms it already has).
//! - **The arrivals.** The real run's p50 is one sample of `REQUESTS`
//!   requests, and near saturation the realised arrival rate of so few moves
//!   the queues more than anything modelled. The simulator replays the very
//!   send times `stoker bench serve --seed` planned
//!   (`stoker_bench::spec::open_loop_schedule`), starting empty as the real
//!   run does after its warm-up drains, over several seeds of everything
//!   else (report phases, wire delays, ties), and reports the median and
//!   the range of their p50s.
//!
//! `STOKER_SIM_RATE` (requests/s), `STOKER_SIM_INPUT` and
//! `STOKER_SIM_OUTPUT` (tokens), `STOKER_SIM_COST`
//! (`fixed,per_token,per_row,per_1k_pairs` in ms); optionally
//! `STOKER_SIM_BUSY_MS` (measured step time per request, summed over the
//! executors; unset: the fitted level as it is), `STOKER_SIM_WIRE_MS`
//! (client TTFT less the engines' mean, ms; 0), `STOKER_SIM_REQUESTS` and
//! `STOKER_SIM_BENCH_SEED` (the real run's `--requests` and `--seed`; 200,
//! 1), `STOKER_SIM_SEEDS` (9), `STOKER_SIM_APIS` (1),
//! `STOKER_SIM_EXECUTORS` (2).

use stoker_bench::spec::{Arrival, open_loop_schedule};
use stoker_routing::RoutingPolicy;
use stoker_sim::events::MS;
use stoker_sim::{self as sim, Cost, Mix, Policy, SimConfig};

fn var<T: std::str::FromStr>(name: &str, default: Option<T>) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default.unwrap_or_else(|| panic!("set {name}")),
    }
}

fn parse_cost(cost: &str) -> Cost {
    const SHAPE: &str = "STOKER_SIM_COST is fixed,per_token,per_row,per_1k_pairs in ms";
    let terms: Vec<f64> = cost.split(',').map(|t| t.parse().expect(SHAPE)).collect();
    let [fixed_ms, per_token_ms, per_row_ms, per_1k_pairs_ms] = terms[..] else {
        panic!("{SHAPE}")
    };
    Cost {
        fixed_ms,
        per_token_ms,
        per_row_ms,
        per_1k_pairs_ms,
    }
}

/// The cost's level at which the simulated executors spend `busy_ms` per
/// request on this run's arrivals: the factor is corrected by the ratio of
/// the measured to the simulated busy time until it moves by under 0.5 %
/// (batching, hence the fixed cost's share, moves with the level, so one
/// correction is not enough).
fn calibrate(c: &SimConfig, busy_ms: f64) -> f64 {
    let mut k = 1.0;
    for _ in 0..12 {
        let mut run = c.clone();
        run.cost = c.cost.scaled(k);
        let simulated = sim::run(&run).busy_ms_per_request;
        let next = k * busy_ms / simulated;
        let settled = (next / k - 1.0).abs() < 0.005;
        k = next;
        if settled {
            break;
        }
    }
    k
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let apis: u32 = var("STOKER_SIM_APIS", Some(1));
    let executors: u32 = var("STOKER_SIM_EXECUTORS", Some(2));
    let rate: f64 = var("STOKER_SIM_RATE", None);
    let input: u32 = var("STOKER_SIM_INPUT", None);
    let output: u32 = var("STOKER_SIM_OUTPUT", None);
    let cost = parse_cost(&var::<String>("STOKER_SIM_COST", None));
    let busy_ms: f64 = var("STOKER_SIM_BUSY_MS", Some(f64::NAN));
    let wire_ms: f64 = var("STOKER_SIM_WIRE_MS", Some(0.0));
    let seeds: u64 = var("STOKER_SIM_SEEDS", Some(9));
    let requests: u64 = var("STOKER_SIM_REQUESTS", Some(200));
    let bench_seed: u64 = var("STOKER_SIM_BENCH_SEED", Some(1));
    assert!(seeds >= 1, "STOKER_SIM_SEEDS is at least 1");

    let mut c = SimConfig::new(apis, executors, Policy::Routed(RoutingPolicy::default()));
    c.mix = Mix::fixed(input, output);
    c.cost = cost;
    let schedule: Vec<u64> = open_loop_schedule(&Arrival::Poisson { rate }, bench_seed, requests)
        .iter()
        .map(|d| d.as_micros() as u64)
        .collect();
    let span_s = *schedule.last().expect("STOKER_SIM_REQUESTS is at least 1") as f64 / 1e6;
    c.arrival_trace = Some(schedule);
    c.warmup_s = 0.0;
    c.measure_s = span_s + 0.001;
    // The job's mean trip is in the simulation already.
    let (lo, hi) = c.job_delay;
    let reply = (wire_ms - (lo + hi) as f64 / 2.0 / MS as f64).max(0.0);
    c.reply_delay = ((reply * MS as f64) as u64, (reply * MS as f64) as u64);
    let scale = if busy_ms.is_finite() {
        calibrate(&c, busy_ms)
    } else {
        1.0
    };
    c.cost = cost.scaled(scale);
    c.load = rate / (executors as f64 * c.executor_capacity());

    let (mut p50s, mut p99s, mut e2es) = (Vec::new(), Vec::new(), Vec::new());
    let mut itl = 0.0;
    let mut served = vec![0usize; executors as usize];
    let (mut measured, mut refused, mut busy) = (0, 0, 0.0);
    for seed in 1..=seeds {
        c.seed = seed;
        let o = sim::run(&c);
        p50s.push(o.ttft_p50_ms);
        p99s.push(o.ttft_p99_ms);
        e2es.push(o.e2e_p50_ms);
        itl += o.itl_mean_ms / seeds as f64;
        for (total, n) in served.iter_mut().zip(&o.served) {
            *total += n;
        }
        measured += o.requests;
        refused += o.refused;
        busy += o.busy_ms_per_request / seeds as f64;
    }
    let (lo50, hi50) = (
        p50s.iter().copied().fold(f64::INFINITY, f64::min),
        p50s.iter().copied().fold(0.0, f64::max),
    );
    println!(
        "{{\"requests\": {measured}, \"seeds\": {seeds}, \"span_s\": {span_s:.1}, \"load\": {:.3}, \"scale\": {scale:.3}, \
         \"busy_ms_per_request\": {busy:.1}, \"reply_ms\": {reply:.1}, \
         \"ttft_p50_ms\": {:.1}, \"ttft_p50_range_ms\": [{lo50:.1}, {hi50:.1}], \
         \"ttft_p99_ms\": {:.1}, \"e2e_p50_ms\": {:.1}, \"itl_mean_ms\": {itl:.1}, \
         \"served\": {served:?}, \"refused\": {refused}}}",
        c.load,
        median(&mut p50s),
        median(&mut p99s),
        median(&mut e2es),
    );
}
