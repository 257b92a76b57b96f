//! The current version of a stream on Postgres: the one query both
//! `postgres` (the store's `stream_version`) and `pg_batch` (the `Conflict` of
//! an append that lost to a writer skipping the lock) run. It lives apart so
//! the store's backend builds on the group-commit writer and not the other way
//! round.

use sqlx::Postgres;

use super::{StoreError, StreamRef};

/// The highest `seq` recorded in `stream` (0 for an empty stream), read
/// through `exec` (a pool or a connection).
pub(crate) async fn version<'e, E>(exec: E, stream: &StreamRef) -> Result<u64, StoreError>
where
    E: sqlx::Executor<'e, Database = Postgres>,
{
    let v: i64 = sqlx::query_scalar(
        "SELECT COALESCE(MAX(seq), 0) FROM events WHERE stream_type = $1 AND stream_id = $2",
    )
    .bind(stream.stream_type.as_str())
    .bind(stream.stream_id.as_str())
    .fetch_one(exec)
    .await?;
    Ok(v as u64)
}
