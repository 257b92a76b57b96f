//! The HTTP surface: the router and its handlers (`routes/`), extractors
//! that turn bodies and headers into typed requests or typed errors
//! (`extract.rs`; path ids parsed once, `path_id.rs`), SSE streaming (`sse.rs`), the OpenAPI document
//! (`openapi.rs`), the accept loop and its timeouts against slow clients
//! (`serve.rs`, `body_timeout.rs`), and the batch path's row executor, which
//! runs each batch line through the same handlers' code (`batch_rows.rs`).

pub mod batch_rows;
pub mod body_timeout;
pub mod extract;
pub mod logprobs;
pub mod openapi;
pub mod path_id;
pub mod routes;
pub mod serve;
pub mod sse;
pub mod tool_calls;
