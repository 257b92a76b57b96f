//! The control plane's integration tests, one module per area, in one test
//! binary: each extra binary costs a full link of the dependency tree, which
//! is most of this suite's build time.

mod support;

mod aggregates;
mod batch;
mod controller;
mod event_store;
mod projection;
mod repo;
mod request_log;
mod routing;
