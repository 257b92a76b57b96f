//! What `GET /admin/v1/executors` shows live beside the events: the
//! executors' latest capacity reports as this process heard them. Only a
//! process that routes to executors has any (the distributed API role
//! registers its capacity view with [`AppState::set_fleet`]); everywhere
//! else the live part of the listing is empty.
//!
//! [`AppState::set_fleet`]: crate::state::AppState::set_fleet

use std::time::Duration;

use stoker_schemas::transport::CapacityReport;

/// The executors a process routes to, as their reports describe them.
pub trait Fleet: Send + Sync + 'static {
    fn executors(&self) -> Vec<LiveExecutor>;
}

/// One executor's latest report and whether it still counts as alive.
#[derive(Clone, Debug)]
pub struct LiveExecutor {
    pub report: CapacityReport,
    /// Its reports arrive within the executor timeout.
    pub alive: bool,
    /// Since its latest report arrived here.
    pub since_report: Duration,
}
