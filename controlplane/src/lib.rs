//! The stoker control plane: event store, aggregates, projections, the batch
//! path with its object storage, and the request log.

pub mod batch;
pub mod controller;
pub mod domain;
pub mod projection;
pub mod requestlog;
pub mod routing;
pub mod service;
pub mod store;
pub mod transport;
