//! stoker's HTTP front: the OpenAI protocol over axum, validation with the
//! served revision's limits, admission before any model work, SSE streaming,
//! API keys, Prometheus metrics, health, and the single-process `serve` mode.
//!
//! The binary (`main.rs`) is the composition root; this library holds
//! everything so tests and benchmarks can run the same server in process.

pub mod admin_cli;
pub mod admission;
pub mod auth;
pub mod backend;
pub mod batch_cli;
pub mod batch_exec;
pub mod bench;
pub mod config;
pub mod control;
pub mod distributed;
pub mod envelope;
pub mod error;
pub mod extract;
pub mod generate;
pub mod metrics;
pub mod openapi;
pub mod reqlog;
pub mod routes;
pub mod serve;
pub mod sse;
pub mod state;
pub mod telemetry;
pub mod validate;

pub use config::Config;
pub use error::ApiError;
pub use state::AppState;
