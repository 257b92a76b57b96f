//! The Postgres backend (distributed mode).
//!
//! Appends take one transaction-scoped advisory lock, so positions (a BIGSERIAL)
//! become visible in the order they were assigned: a reader paging by position can
//! never skip an event that commits later with a smaller position. The version
//! check under that lock makes conflicts typed; the primary key is the backstop.
//! Under the same lock `recorded_at` is floored at the latest stored one, so time
//! never decreases along position and the audit turns time bounds into positions.
//! Concurrent appends on one handle share that transaction (group commit, see
//! [`super::pg_batch`]), so they share one WAL flush.

use serde_json::Value;
use sqlx::postgres::{PgPool, PgPoolOptions, PgRow};
use sqlx::{Postgres, Row};
use tokio::sync::oneshot;

use super::pg_batch;
use super::pg_version::version;
use super::reads::event_reads;
use super::{
    Actor, AuditQuery, ExpectedVersion, NewEvent, Position, Recorded, StoreError, StreamRef,
};

#[derive(Clone, Debug)]
pub(crate) struct PgStore {
    pool: PgPool,
    /// The group-commit writer's queue; the writer ends when every clone is dropped.
    appends: pg_batch::Queue,
}

impl PgStore {
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let pool = PgPoolOptions::new()
            .max_connections(16)
            // While the database is unreachable a caller learns it within
            // seconds (503 not_ready), not after sqlx's default 30 s.
            .acquire_timeout(std::time::Duration::from_secs(3))
            .connect(url)
            .await?;
        let appends = pg_batch::spawn(pool.clone());
        Ok(Self { pool, appends })
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        super::migrate::postgres(&self.pool).await
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub async fn version(&self, stream: &StreamRef) -> Result<u64, StoreError> {
        version(&self.pool, stream).await
    }

    /// Queues the append for the group-commit writer ([`super::pg_batch`]), which
    /// runs it in one transaction with whatever other appends are waiting.
    pub async fn append(
        &self,
        stream: &StreamRef,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Recorded>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let request = pg_batch::Request {
            stream: stream.clone(),
            expected,
            events: events.to_vec(),
            reply,
        };
        let stopped = || StoreError::Database("the append writer has stopped".to_owned());
        self.appends.send(request).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    event_reads!(Postgres, sql = str::to_owned, time = std::convert::identity);
}

fn decode(r: &PgRow) -> Result<Recorded, StoreError> {
    let seq: i64 = r.try_get("seq")?;
    Ok(Recorded {
        position: Position(r.try_get("position")?),
        stream: StreamRef::new(
            r.try_get::<String, _>("stream_type")?,
            r.try_get::<String, _>("stream_id")?,
        ),
        seq: seq as u64,
        event_type: r.try_get("event_type")?,
        version: r.try_get("event_version")?,
        payload: r.try_get::<Value, _>("payload")?,
        actor: Actor(r.try_get("actor")?),
        reason: r.try_get("reason")?,
        recorded_at: r.try_get("recorded_at")?,
    })
}
