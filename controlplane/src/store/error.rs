//! One error type for the event store (DESIGN section 9): the API maps `Conflict`
//! to 409 `conflict`, `BadCursor` to 400, and everything else to an opaque 500.

use super::{ExpectedVersion, StreamRef};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Someone else appended first: re-read the stream and retry the command.
    #[error("conflict on stream {stream}: expected version {expected}, actual {actual}")]
    Conflict {
        stream: StreamRef,
        expected: ExpectedVersion,
        actual: u64,
    },
    #[error("stream {0} not found")]
    NotFound(StreamRef),
    #[error("bad audit cursor {0:?}")]
    BadCursor(String),
    #[error("bad store url {0:?}: expected postgres://, postgresql:// or sqlite:")]
    BadUrl(String),
    #[error("stored event at position {position} is unreadable: {detail}")]
    Corrupt { position: i64, detail: String },
    #[error("migration failed: {0}")]
    Migration(String),
    #[error("database error: {0}")]
    Database(String),
}

impl StoreError {
    /// Whether the caller should re-read and retry (HTTP 409).
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Database(e.to_string())
    }
}
