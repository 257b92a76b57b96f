//! stoker's server: the OpenAI protocol over axum, validation with the
//! served revision's limits, admission before any model work, SSE streaming,
//! API keys, Prometheus metrics, health, drain, and the three roles a
//! `stoker` process can play (`roles/`).
//!
//! Layers, each using only those listed before it (the tidy test checks that
//! no module imports one that imports it back):
//! - leaves: `config`, `telemetry`, `error` (the one enum and its HTTP
//!   mapping), `auth`, `admission/` (with the capacity envelope), `metrics`,
//!   `kafka` (the distributed mode's transport glue), `backend/` (what
//!   generations run on: the in-process engine or the executors over Kafka),
//!   `control/` (the embedded control plane: store, request log, batches),
//!   `tenancy/` (tenants' quotas and live usage);
//! - `state`: what every request shares;
//! - `edge/`: the request path without HTTP framing;
//! - `http/`: the router, handlers, extractors, SSE, OpenAPI;
//! - `jobs/`: the executor role's Kafka front (jobs in, deltas out);
//! - `roles/`: where each `stoker` sub-command is put together.
//!
//! The `stoker` binary (`api/bin`) is the composition root; the client
//! commands (`stoker-cli`) and the load generator (`stoker-bench`) are crates
//! of their own that reach a server over HTTP only.

pub mod admission;
pub mod auth;
pub mod backend;
pub mod config;
pub mod control;
pub mod edge;
pub mod error;
pub mod http;
pub mod jobs;
pub mod kafka;
pub mod metrics;
pub mod roles;
pub mod state;
pub mod telemetry;
pub mod tenancy;

pub use config::Config;
pub use error::ApiError;
pub use state::AppState;
