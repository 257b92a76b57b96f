//! A discrete-event simulator of distributed routing: N API instances, each
//! with its own real [`CapacityView`](stoker_routing::CapacityView) and
//! [`PrefixIndex`](stoker_routing::PrefixIndex), in front of M modelled
//! executors that publish real capacity reports every 500 ms. It measures
//! what the routing policy does to time to first token, goodput and load
//! spread when many instances route on the same stale reports, without a
//! broker and without waiting: the clock is virtual. `benches/route_sim.rs`
//! sweeps it; the tests below keep it honest. A crate of its own: the server
//! build never compiles it.

pub mod events;
pub mod executor;
pub mod stats;
pub mod workload;
mod world;

use events::{MS, Micros};
pub use executor::Cost;
pub use stats::Outcome;
use stoker_routing::RoutingPolicy;
pub use workload::{Arrivals, Mix};

/// The artifact every simulated executor serves.
pub const SHA: &str = "sim";

/// Who routes, and on what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Every API instance on its own view, reports 5-20 ms late, jobs 2-8 ms
    /// on the wire, prefix affinity on.
    Routed(RoutingPolicy),
    /// One router whose view is updated at every event (every send, step and
    /// arrival visible at once, no delays): most headroom on the truth.
    Omniscient,
}

impl Policy {
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Routed(RoutingPolicy::MaxHeadroom) => "max_headroom",
            Policy::Routed(RoutingPolicy::PowerOfChoices { d: 2 }) => "power_of_two",
            Policy::Routed(RoutingPolicy::PowerOfChoices { d: 3 }) => "power_of_three",
            Policy::Routed(RoutingPolicy::PowerOfChoices { .. }) => "power_of_d",
            Policy::Omniscient => "omniscient",
        }
    }
}

/// One run's shape.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub apis: u32,
    pub executors: u32,
    pub policy: Policy,
    pub arrivals: Arrivals,
    /// What the requests are.
    pub mix: Mix,
    /// What an executor's step costs.
    pub cost: Cost,
    /// Offered load as a share of the executors' aggregate capacity.
    pub load: f64,
    /// Seconds before measuring (queues fill), then seconds measured.
    pub warmup_s: f64,
    pub measure_s: f64,
    /// Prefixes each API instance remembers.
    pub prefix_capacity: usize,
    /// Routers prefer the executor caching a request's prefix (as `submit`
    /// does); off, they route by the policy alone.
    pub affinity: bool,
    /// Routers read their own requests out of each report (its
    /// `by_reply_partition`) and count what they have in flight instead,
    /// as `stoker api` does; off, they count their sends since the report,
    /// as against an executor that does not say.
    pub own_accounting: bool,
    /// A job's (or a refusal's) trip across the broker, and a first token's
    /// trip back to the client, drawn uniformly from `[lo, hi]` for routed
    /// policies (the omniscient router has none). The reply's trip is 0 by
    /// default: it would add the same few ms to every routed policy and
    /// nothing to the baseline they are compared with; the agreement bench
    /// sets it to what the real run measured.
    pub job_delay: (Micros, Micros),
    pub reply_delay: (Micros, Micros),
    /// Arrival times to replay (from the start of the run, ascending)
    /// instead of drawing them from `arrivals` at `rate()`: a real run's
    /// schedule.
    pub arrival_trace: Option<Vec<Micros>>,
    pub seed: u64,
}

impl SimConfig {
    pub fn new(apis: u32, executors: u32, policy: Policy) -> Self {
        SimConfig {
            apis,
            executors,
            policy,
            arrivals: Arrivals::Poisson,
            mix: Mix::default(),
            cost: Cost::default(),
            load: 0.8,
            warmup_s: 10.0,
            measure_s: 30.0,
            prefix_capacity: 8192,
            affinity: true,
            own_accounting: true,
            job_delay: (2 * MS, 8 * MS),
            reply_delay: (0, 0),
            arrival_trace: None,
            seed: 1,
        }
    }
}

impl SimConfig {
    /// Requests per second one executor completes with every step full: the
    /// mean request's tokens at the cost model's per-token and per-row
    /// rates and its attention pairs at the per-pair rate, plus the fixed
    /// cost of a full step spread over its tokens.
    pub fn executor_capacity(&self) -> f64 {
        let (prompt, output) = self.mix.mean_tokens();
        let c = &self.cost;
        let tokens = prompt + output;
        let ms = tokens * (c.per_token_ms + c.fixed_ms / executor::MAX_STEP_TOKENS as f64)
            + output * c.per_row_ms
            + c.per_1k_pairs_ms * self.mix.mean_attention_pairs() / 1000.0;
        1000.0 / ms
    }

    /// Requests per second offered: `load` of the executors' capacity.
    pub fn rate(&self) -> f64 {
        self.load * self.executors as f64 * self.executor_capacity()
    }
}

/// Runs one simulation to completion.
pub fn run(config: &SimConfig) -> Outcome {
    world::World::new(config).run()
}

#[cfg(test)]
mod tests;
