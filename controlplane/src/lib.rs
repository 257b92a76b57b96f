//! The stoker control plane: event store, aggregates, projections, transport and storage.

pub mod store;
