//! stoker's server: the OpenAI protocol over axum, validation with the
//! served revision's limits, admission before any model work, SSE streaming,
//! API keys, Prometheus metrics, health, drain, and the three roles a
//! `stoker` process can play (`roles/`).
//!
//! Layers, each using only those listed before it (the tidy test checks that
//! no module imports one that imports it back):
//! - leaves: `config`, `telemetry`, `error` (the one enum and its HTTP
//!   mapping), `auth`, `admission/` (with the capacity envelope), `metrics`,
//!   `backend/` (what generations run on: the traits the in-process engine
//!   and the distributed mode's remote backend implement),
//!   `control/` (the embedded control plane: store, request log, batches),
//!   `tenancy/` (tenants' quotas and live usage);
//! - `state`: what every request shares;
//! - `edge/`: the request path without HTTP framing;
//! - `http/`: the router, handlers, extractors, SSE, OpenAPI;
//! - `roles/`: the server every `stoker` sub-command runs, with the seam
//!   (`RoleParts`) where a role adds to it.
//!
//! Distributed mode (the Kafka transport's both sides and routing) is
//! `stoker-distributed`, built on this crate; this crate knows nothing of
//! Kafka. The `stoker` binary (`api/bin`) is the composition root; the client
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
pub mod metrics;
pub mod roles;
pub mod state;
pub mod telemetry;
pub mod tenancy;

pub use config::Config;
pub use error::ApiError;
pub use state::AppState;
