//! stoker's distributed mode: the API instances and the executors talk over
//! Kafka (DESIGN section 8). Both sides of the transport live here, on top
//! of the server `stoker-api` runs in every role:
//! - `remote`: the API's backend, which routes each request to an executor
//!   (by `stoker-routing`'s pure capacity view and prefix index) and streams
//!   its replies back;
//! - `jobs/`: the executor's front, which takes jobs from its partition, runs
//!   them on the engine in process and publishes capacity;
//! - `wire`: the conversions between the engine's types and the transport's
//!   bodies, so both ends agree;
//! - `kafka`: settings, the consume loop and slot-lease renewal both sides
//!   share;
//! - `roles`: the [`RoleParts`](stoker_api::roles::RoleParts) of `stoker api`
//!   and `stoker executor`, which the binary hands to the server.
//!
//! `stoker-api` depends on nothing here: the server role knows nothing of
//! Kafka (the compiler holds that: this crate depends on it, not the other
//! way round).

pub mod jobs;
pub mod kafka;
pub mod remote;
pub mod roles;
pub mod wire;

pub use roles::parts;
