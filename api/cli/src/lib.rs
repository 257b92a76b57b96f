//! `stoker admin` and `stoker batch`: client commands that operate a running
//! server over its HTTP API, never by linking it (this crate does not depend
//! on the server library, so the compiler holds that line). One HTTP client
//! and one exit-code rule (`client.rs`), tables (`table.rs`), the admin
//! commands (`admin.rs`; tenants and API keys in `tenants.rs`) and the batch
//! commands (`batch/`).

pub mod admin;
pub mod batch;
pub mod client;
pub mod table;
pub mod tenants;

pub use admin::AdminArgs;
pub use batch::BatchArgs;
