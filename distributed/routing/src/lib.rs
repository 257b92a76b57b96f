//! Routing for the distributed mode, as a pure core: the capacity view
//! built from executors' reports (who is alive, who has headroom, the
//! policies that pick one) and the prefix index (which executor holds a
//! prompt's KV blocks). No I/O and no clock of its own (callers pass
//! `Instant`s), so the API's remote backend (`stoker-distributed`) and the
//! routing simulator (`stoker-sim`) run the same code: same reports, same
//! seed, same choice.

pub mod capacity;
pub mod prefix;

pub use capacity::{CapacityView, Demand, Entry, FleetLoad, InFlight, RoutingPolicy};
pub use prefix::{PrefixIndex, block_hashes};
