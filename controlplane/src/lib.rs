//! The stoker control plane: event store, aggregates, projections, the batch
//! path with its object storage, the request log, and the Kafka transport
//! that carries jobs between the API and the executors (`transport`).

pub mod batch;
pub mod controller;
pub mod domain;
pub mod projection;
pub mod requestlog;
pub mod routing;
pub mod service;
pub mod store;
pub mod tenants;
pub mod transport;
