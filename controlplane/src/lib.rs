//! The stoker control plane: event store, aggregates, projections, transport and storage.

pub mod controller;
pub mod domain;
pub mod projection;
pub mod requestlog;
pub mod routing;
pub mod service;
pub mod store;
