//! The request path between the HTTP surface and the backend, free of HTTP
//! framing: a request's revision (`routing.rs`) and the artifacts loaded for
//! revisions (`artifacts.rs`), its validation against that
//! revision's limits (`validate.rs`, with `echo.rs` for completions' `echo`
//! and `request_fields.rs` for `response_format` and `logit_bias`), generation under an admission ticket
//! (`generate.rs`) and its row in the request log (`reqlog.rs`); the
//! tenants' keys and quotas kept in step with the read models
//! (`tenant_sync.rs`).

pub mod artifacts;
pub mod echo;
pub mod generate;
pub mod reqlog;
pub mod request_fields;
pub mod routing;
pub mod tenant_sync;
pub mod tools;
pub mod validate;
