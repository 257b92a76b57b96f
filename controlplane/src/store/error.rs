//! One error type for the event store (DESIGN section 9): the API maps `Conflict`
//! to 409 `conflict`, `BadCursor` to 400, `Unavailable` (the database cannot be
//! reached now) to 503 `not_ready` with Retry-After, and everything else to an
//! opaque 500.

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
    /// The database cannot be reached (down, restarting, the network cut):
    /// the same command may succeed later.
    #[error("the database is unreachable: {0}")]
    Unavailable(String),
    /// The database's disk is full: nothing was written, and the same command
    /// may succeed once space is freed.
    #[error("the database's disk is full: {0}")]
    Full(String),
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
        if is_unavailable(&e) {
            StoreError::Unavailable(e.to_string())
        } else if is_full(&e) {
            StoreError::Full(e.to_string())
        } else {
            StoreError::Database(e.to_string())
        }
    }
}

/// Whether `e` says the database could not be reached or went away, rather
/// than that it refused the statement: no connection within the pool's
/// acquire timeout, a socket error, or a server shutting down or starting
/// (SQLSTATE class 08, 57P01-57P03).
pub fn is_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => true,
        sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| c.starts_with("08") || matches!(&*c, "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}

/// Whether `e` says the database ran out of disk: SQLite's `SQLITE_FULL` (13)
/// or Postgres's `disk_full` (SQLSTATE 53100).
pub fn is_full(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => d.code().is_some_and(|c| matches!(&*c, "13" | "53100")),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_trouble_is_unavailable_and_the_rest_is_not() {
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(StoreError::from(io), StoreError::Unavailable(_)));
        assert!(matches!(
            StoreError::from(sqlx::Error::PoolTimedOut),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            StoreError::from(sqlx::Error::RowNotFound),
            StoreError::Database(_)
        ));
    }
}
