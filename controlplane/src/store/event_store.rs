//! `EventStore`: the one handle the rest of the control plane uses, whichever
//! backend the URL names. It owns the upcasters, so callers only see current
//! event versions.

use std::sync::Arc;

use super::postgres::PgStore;
use super::sqlite::SqliteStore;
use super::{
    AUDIT_MAX_LIMIT, AuditQuery, ExpectedVersion, NewEvent, Page, Position, Recorded, StoreError,
    StreamRef, Upcasters,
};

/// The pool of whichever backend the store runs on.
#[derive(Clone, Debug)]
pub enum Db {
    Postgres(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
}

#[derive(Clone, Debug)]
enum Backend {
    Postgres(PgStore),
    Sqlite(SqliteStore),
}

/// A cheap-to-clone handle on the event store.
#[derive(Clone, Debug)]
pub struct EventStore {
    backend: Backend,
    upcasters: Arc<Upcasters>,
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $body:expr) => {
        match &$self.backend {
            Backend::Postgres($s) => $body,
            Backend::Sqlite($s) => $body,
        }
    };
}

impl EventStore {
    /// Connects to `postgres://…`, `postgresql://…` or `sqlite:…` (a SQLite file is
    /// created if missing). Does not migrate; call [`EventStore::migrate`].
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let backend = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres(PgStore::connect(url).await?)
        } else if url.starts_with("sqlite:") {
            Backend::Sqlite(SqliteStore::connect(url).await?)
        } else {
            return Err(StoreError::BadUrl(url.to_owned()));
        };
        Ok(Self {
            backend,
            upcasters: Arc::new(Upcasters::new()),
        })
    }

    /// Replaces the upcasters applied to every event read.
    pub fn with_upcasters(mut self, upcasters: Upcasters) -> Self {
        self.upcasters = Arc::new(upcasters);
        self
    }

    /// The connection pool underneath, for read models and the request log that
    /// live in the same database as the events.
    pub fn db(&self) -> Db {
        match &self.backend {
            Backend::Postgres(s) => Db::Postgres(s.pool().clone()),
            Backend::Sqlite(s) => Db::Sqlite(s.pool().clone()),
        }
    }

    /// `"postgres"` or `"sqlite"`.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Postgres(_) => "postgres",
            Backend::Sqlite(_) => "sqlite",
        }
    }

    /// Applies the embedded migrations that have not been applied yet.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        dispatch!(self, s => s.migrate().await)
    }

    pub async fn close(&self) {
        dispatch!(self, s => s.close().await)
    }

    /// Appends `events` to `stream` in one transaction if the stream is at
    /// `expected`; otherwise nothing is written and the error is
    /// [`StoreError::Conflict`] with the actual version. Sequence numbers continue
    /// from the stream's version with no gaps.
    pub async fn append(
        &self,
        stream: &StreamRef,
        expected: ExpectedVersion,
        events: Vec<NewEvent>,
    ) -> Result<Vec<Recorded>, StoreError> {
        let recorded = dispatch!(self, s => s.append(stream, expected, &events).await)?;
        Ok(self.upcast(recorded))
    }

    /// The stream's version: its last `seq`, 0 when it has no events.
    pub async fn stream_version(&self, stream: &StreamRef) -> Result<u64, StoreError> {
        dispatch!(self, s => s.version(stream).await)
    }

    /// All events of one stream in `seq` order (empty when the stream does not exist).
    pub async fn read_stream(&self, stream: &StreamRef) -> Result<Vec<Recorded>, StoreError> {
        let events = dispatch!(self, s => s.read_stream(stream).await)?;
        Ok(self.upcast(events))
    }

    /// Up to `limit` events after `after` in global position order (projections).
    pub async fn read_all(&self, after: Position, limit: u32) -> Result<Vec<Recorded>, StoreError> {
        let limit = i64::from(limit.max(1));
        let events = dispatch!(self, s => s.read_all(after, limit).await)?;
        Ok(self.upcast(events))
    }

    /// One page of the audit trail in global position order.
    pub async fn audit(&self, query: &AuditQuery) -> Result<Page, StoreError> {
        let limit = query.effective_limit();
        debug_assert!(limit <= i64::from(AUDIT_MAX_LIMIT));
        let mut events = dispatch!(self, s => s.audit(query, limit).await)?;
        let next_cursor = if events.len() as i64 > limit {
            events.truncate(limit as usize);
            events.last().map(|e| e.position)
        } else {
            None
        };
        Ok(Page {
            events: self.upcast(events),
            next_cursor,
        })
    }

    fn upcast(&self, events: Vec<Recorded>) -> Vec<Recorded> {
        if self.upcasters.is_empty() {
            return events;
        }
        events
            .into_iter()
            .map(|e| self.upcasters.apply(e))
            .collect()
    }
}
