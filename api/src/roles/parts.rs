//! The seam between the server every role runs (`roles/mod.rs`) and what a
//! role adds to it. `stoker serve` adds nothing ([`InProcess`]); the
//! distributed roles (`stoker-distributed`) add a remote backend or a job
//! front and the Kafka slots they lease. The server calls these at fixed
//! points of its life: load, start, drain begun, drained.

use futures_util::future::BoxFuture;

use crate::state::AppState;

/// What a role adds to the server, called at fixed points of its life.
pub trait RoleParts: Send + Sync + 'static {
    /// While loading, after the engine (where the role has one) and before
    /// the control plane hears of this process. A role without an engine
    /// installs what it generates with here (`AppState::install`) and
    /// returns once that can serve.
    fn load<'a>(&'a self, _state: &'a AppState) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// After bootstrap, before the server turns ready: start taking work
    /// that arrives other than over HTTP.
    fn start<'a>(&'a self, _state: &'a AppState) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Draining began: tell whoever routes here to stop, and let work already
    /// on its way arrive, before what is in flight is judged.
    fn draining(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Nothing is in flight any more: give up what another process may take
    /// over (slot leases).
    fn drained(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// `stoker serve`: the engine in process, nothing more.
#[derive(Debug, Default)]
pub struct InProcess;

impl RoleParts for InProcess {}
