//! The event store: one append-only table of events on Postgres (distributed mode)
//! or SQLite (`stoker serve`), with the same behaviour on both.
//!
//! Every control-plane decision is an event in a stream; read models are rebuilt
//! from them, and the audit API reads them in global position order. Appends carry
//! an expected stream version so two concurrent writers can never both win.

mod error;
mod event_store;
mod migrate;
mod pg_batch;
mod pg_version;
mod postgres;
mod reads;
mod sqlite;
mod time;
mod types;
mod upcast;

pub use error::{StoreError, is_full, is_unavailable};
pub use event_store::{Db, EventStore};
pub use types::{
    AUDIT_MAX_LIMIT, Actor, AuditQuery, ExpectedVersion, NewEvent, Page, Position, Recorded,
    StreamId, StreamRef, StreamType,
};
pub use upcast::{UpcastFn, Upcasters};

pub(crate) use reads::sqlite_sql;
