//! The SQLite backend (the embedded default of `stoker serve`).
//!
//! SQLite allows one writer at a time. Appends from this process queue on an async
//! gate (no busy-spinning), and each runs as `BEGIN IMMEDIATE`, which takes the
//! write lock before the version is read, so a second process cannot interleave
//! (it waits up to `busy_timeout`). WAL lets readers run beside the writer.
//! Inside that transaction `recorded_at` is floored at the latest stored one, so
//! time never decreases along position and the audit turns time bounds into
//! positions.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
};
use sqlx::{QueryBuilder, Row, Sqlite};
use tokio::sync::Mutex;

use super::reads::event_reads;
use super::time::{from_text, now_micros, to_text};
use super::types::deployment_of;
use super::{
    Actor, AuditQuery, ExpectedVersion, NewEvent, Position, Recorded, StoreError, StreamRef,
};

/// Rows per INSERT statement (10 binds each, below SQLite's 32766 bind limit).
const CHUNK: usize = 500;

#[derive(Clone, Debug)]
pub(crate) struct SqliteStore {
    pool: SqlitePool,
    /// The in-process writer gate.
    gate: Arc<Mutex<()>>,
}

/// Whether a connection coming back to the pool is outside any transaction.
///
/// When the disk fills, a COMMIT fails with `SQLITE_FULL` after SQLite has
/// already rolled the transaction back, so the ROLLBACK sqlx sends when the
/// transaction is dropped fails too ("no transaction is active") and sqlx's
/// count of open transactions on the connection stays at one. Pooled again,
/// that connection would refuse every later `begin` ("non-zero transaction
/// depth") long after space is freed. Such a connection is closed instead, and
/// the pool opens a fresh one.
fn settled(conn: &mut sqlx::SqliteConnection) -> bool {
    use sqlx::TransactionManager as _;
    let depth = <sqlx::Sqlite as sqlx::Database>::TransactionManager::get_transaction_depth(conn);
    if depth != 0 {
        tracing::warn!(
            depth,
            "closing a database connection left inside a transaction"
        );
    }
    depth == 0
}

impl SqliteStore {
    pub(crate) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let memory = url.contains(":memory:") || url.contains("mode=memory");
        let mut opts = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        if !memory {
            opts = opts.journal_mode(SqliteJournalMode::Wal);
        }
        // An in-memory database lives and dies with its one connection.
        let pool = if memory {
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        } else {
            SqlitePoolOptions::new()
                .max_connections(8)
                .after_release(|conn, _| Box::pin(async move { Ok(settled(conn)) }))
        }
        .connect_with(opts)
        .await?;
        Ok(Self {
            pool,
            gate: Arc::new(Mutex::new(())),
        })
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        let _gate = self.gate.lock().await;
        super::migrate::sqlite(&self.pool).await
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub async fn version(&self, stream: &StreamRef) -> Result<u64, StoreError> {
        version(&self.pool, stream).await
    }

    pub async fn append(
        &self,
        stream: &StreamRef,
        expected: ExpectedVersion,
        events: &[NewEvent],
    ) -> Result<Vec<Recorded>, StoreError> {
        let _gate = self.gate.lock().await;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let (actual, floor): (i64, Option<String>) = sqlx::query_as(
            "SELECT COALESCE((SELECT MAX(seq) FROM events \
                              WHERE stream_type = ? AND stream_id = ?), 0), \
                    (SELECT MAX(recorded_at) FROM events)",
        )
        .bind(stream.stream_type.as_str())
        .bind(stream.stream_id.as_str())
        .fetch_one(&mut *tx)
        .await?;
        let actual = actual as u64;
        if !expected.admits(actual) {
            return Err(StoreError::Conflict {
                stream: stream.clone(),
                expected,
                actual,
            });
        }
        let floor = floor.as_deref().and_then(from_text);
        let recorded_at = floor.map_or_else(now_micros, |f| now_micros().max(f));
        let stamp = to_text(recorded_at);
        let mut out = Vec::with_capacity(events.len());
        for (c, chunk) in events.chunks(CHUNK).enumerate() {
            let first_seq = actual + (c * CHUNK) as u64 + 1;
            let payloads = chunk
                .iter()
                .map(|e| e.payload.to_string())
                .collect::<Vec<_>>();
            let mut qb = QueryBuilder::<Sqlite>::new(
                "INSERT INTO events (stream_type, stream_id, seq, event_type, event_version, \
                 payload, actor, reason, deployment_id, recorded_at) ",
            );
            qb.push_values(
                chunk.iter().zip(&payloads).enumerate(),
                |mut b, (i, (e, p))| {
                    b.push_bind(stream.stream_type.as_str())
                        .push_bind(stream.stream_id.as_str())
                        .push_bind((first_seq + i as u64) as i64)
                        .push_bind(e.event_type.as_str())
                        .push_bind(e.version)
                        .push_bind(p.as_str())
                        .push_bind(e.actor.as_str())
                        .push_bind(e.reason.as_deref())
                        .push_bind(deployment_of(stream, &e.payload))
                        .push_bind(stamp.as_str());
                },
            );
            qb.push(" RETURNING position, seq");
            let rows = match qb.build().fetch_all(&mut *tx).await {
                Ok(rows) => rows,
                Err(sqlx::Error::Database(db)) if db.is_unique_violation() => {
                    drop(tx);
                    return Err(StoreError::Conflict {
                        stream: stream.clone(),
                        expected,
                        actual: version(&self.pool, stream).await?,
                    });
                }
                Err(e) => return Err(e.into()),
            };
            let mut assigned = rows
                .iter()
                .map(|r| -> Result<(i64, i64), sqlx::Error> { Ok((r.try_get(0)?, r.try_get(1)?)) })
                .collect::<Result<Vec<_>, _>>()?;
            assigned.sort_by_key(|&(_, seq)| seq);
            for ((position, seq), e) in assigned.into_iter().zip(chunk) {
                out.push(Recorded {
                    position: Position(position),
                    stream: stream.clone(),
                    seq: seq as u64,
                    event_type: e.event_type.clone(),
                    version: e.version,
                    payload: e.payload.clone(),
                    actor: e.actor.clone(),
                    reason: e.reason.clone(),
                    recorded_at,
                });
            }
        }
        tx.commit().await?;
        Ok(out)
    }

    event_reads!(Sqlite, sql = super::sqlite_sql, time = to_text);
}

async fn version<'e, E>(exec: E, stream: &StreamRef) -> Result<u64, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    let v: i64 = sqlx::query_scalar(
        "SELECT COALESCE(MAX(seq), 0) FROM events WHERE stream_type = ? AND stream_id = ?",
    )
    .bind(stream.stream_type.as_str())
    .bind(stream.stream_id.as_str())
    .fetch_one(exec)
    .await?;
    Ok(v as u64)
}

fn decode(r: &SqliteRow) -> Result<Recorded, StoreError> {
    let position: i64 = r.try_get("position")?;
    let corrupt = |detail: String| StoreError::Corrupt { position, detail };
    let payload: String = r.try_get("payload")?;
    let recorded_at: String = r.try_get("recorded_at")?;
    let seq: i64 = r.try_get("seq")?;
    Ok(Recorded {
        position: Position(position),
        stream: StreamRef::new(
            r.try_get::<String, _>("stream_type")?,
            r.try_get::<String, _>("stream_id")?,
        ),
        seq: seq as u64,
        event_type: r.try_get("event_type")?,
        version: r.try_get("event_version")?,
        payload: serde_json::from_str(&payload).map_err(|e| corrupt(e.to_string()))?,
        actor: Actor(r.try_get("actor")?),
        reason: r.try_get("reason")?,
        recorded_at: from_text(&recorded_at)
            .ok_or_else(|| corrupt(format!("recorded_at {recorded_at:?}")))?,
    })
}
