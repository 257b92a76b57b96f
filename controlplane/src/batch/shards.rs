//! Shards and their fenced checkpoints.
//!
//! A runner claims a shard by raising its epoch (only when no live lease holds
//! it); every checkpoint it commits names that epoch and changes nothing once
//! another runner has claimed a higher one. Segments are written to object
//! storage before the checkpoint that lists them, so a committed checkpoint
//! never lists a missing segment, and a superseded runner's segments are
//! never listed at all: late writes are ignored by construction.

use serde::{Deserialize, Serialize};

use crate::store::Db;
use stoker_schemas::ids::BatchId;

use super::{BatchError, on_db};

/// Rows `[from_row, to_row)` of the batch's input, as output lines in one object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub key: String,
    pub from_row: u64,
    pub to_row: u64,
}

/// One shard as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub batch_id: BatchId,
    pub shard_no: u64,
    pub first_row: u64,
    pub end_row: u64,
    pub epoch: u64,
    pub owner: Option<String>,
    /// Unix ms until which the owner's claim holds.
    pub lease_until: i64,
    /// Rows before this one are committed.
    pub next_row: u64,
    pub segments: Vec<Segment>,
    pub completed: u64,
    pub failed: u64,
    pub done: bool,
}

type Row = (
    String,
    i64,
    i64,
    i64,
    i64,
    Option<String>,
    i64,
    i64,
    String,
    i64,
    i64,
    i64,
);

const COLUMNS: &str = "batch_id, shard_no, first_row, end_row, epoch, owner, lease_until, \
                       next_row, segments, completed, failed, done";

fn from_row(r: Row) -> Result<Shard, BatchError> {
    let segments = serde_json::from_str(&r.8)
        .map_err(|e| BatchError::Corrupt(format!("segments of shard {}/{}: {e}", r.0, r.1)))?;
    let batch_id =
        BatchId::new(r.0).map_err(|e| BatchError::Corrupt(format!("a shard's batch id: {e}")))?;
    Ok(Shard {
        batch_id,
        shard_no: r.1 as u64,
        first_row: r.2 as u64,
        end_row: r.3 as u64,
        epoch: r.4 as u64,
        owner: r.5,
        lease_until: r.6,
        next_row: r.7 as u64,
        segments,
        completed: r.9 as u64,
        failed: r.10 as u64,
        done: r.11 != 0,
    })
}

/// Creates the shards of a batch of `total_rows` rows; shards that exist are
/// left alone, so a retry after a crash is harmless. Returns the shard count.
pub async fn create(
    db: &Db,
    batch_id: &str,
    total_rows: u64,
    shard_rows: u64,
    now_ms: i64,
) -> Result<u64, BatchError> {
    const Q: &str = "INSERT INTO batch_shards (batch_id, shard_no, first_row, end_row, epoch, \
         owner, lease_until, next_row, segments, completed, failed, done, updated_at) \
         VALUES ($1, $2, $3, $4, 0, NULL, 0, $3, '[]', 0, 0, 0, $5) \
         ON CONFLICT (batch_id, shard_no) DO NOTHING";
    let shard_rows = shard_rows.max(1);
    let count = total_rows.div_ceil(shard_rows);
    on_db!(db, pool, q => {
        let mut tx = pool.begin().await?;
        for n in 0..count {
            let first = n * shard_rows;
            let end = (first + shard_rows).min(total_rows);
            sqlx::query(q)
                .bind(batch_id)
                .bind(n as i64)
                .bind(first as i64)
                .bind(end as i64)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
    } with Q);
    Ok(count)
}

/// Every shard of a batch in order.
pub async fn list(db: &Db, batch_id: &str) -> Result<Vec<Shard>, BatchError> {
    let text = format!("SELECT {COLUMNS} FROM batch_shards WHERE batch_id = $1 ORDER BY shard_no");
    let rows: Vec<Row> = on_db!(db, pool, q => {
        sqlx::query_as(q).bind(batch_id).fetch_all(pool).await?
    } with &text);
    rows.into_iter().map(from_row).collect()
}

/// Takes the shard for `owner` at a new epoch if it is unfinished and no live
/// lease holds it (or `force`, for tests and operators). Returns the shard as
/// claimed, or `None` when someone else holds it or it is done.
pub async fn claim(
    db: &Db,
    batch_id: &str,
    shard_no: u64,
    owner: &str,
    now_ms: i64,
    lease_ms: i64,
    force: bool,
) -> Result<Option<Shard>, BatchError> {
    let text = format!(
        "UPDATE batch_shards SET epoch = epoch + 1, owner = $3, lease_until = $4, updated_at = $5 \
         WHERE batch_id = $1 AND shard_no = $2 AND done = 0 \
         AND (owner IS NULL OR lease_until < $5 OR $6 = 1) \
         RETURNING {COLUMNS}"
    );
    let row: Option<Row> = on_db!(db, pool, q => {
        sqlx::query_as(q)
            .bind(batch_id)
            .bind(shard_no as i64)
            .bind(owner)
            .bind(now_ms + lease_ms)
            .bind(now_ms)
            .bind(i64::from(force))
            .fetch_optional(pool)
            .await?
    } with &text);
    row.map(from_row).transpose()
}

/// What a checkpoint commits.
#[derive(Clone, Debug)]
pub struct Checkpoint<'a> {
    pub next_row: u64,
    pub segments: &'a [Segment],
    pub completed: u64,
    pub failed: u64,
    pub done: bool,
    /// The new lease end (unix ms); 0 releases the shard.
    pub lease_until: i64,
}

/// Commits a checkpoint if `epoch` is still the shard's; otherwise nothing
/// changes and the runner has been superseded ([`BatchError::Fenced`]).
pub async fn commit(
    db: &Db,
    batch_id: &BatchId,
    shard_no: u64,
    epoch: u64,
    c: &Checkpoint<'_>,
    now_ms: i64,
) -> Result<(), BatchError> {
    const Q: &str = "UPDATE batch_shards SET next_row = $4, segments = $5, completed = $6, \
         failed = $7, done = $8, lease_until = $9, updated_at = $10, \
         owner = CASE WHEN $9 = 0 THEN NULL ELSE owner END \
         WHERE batch_id = $1 AND shard_no = $2 AND epoch = $3";
    let segments = serde_json::to_string(c.segments).expect("segments serialize");
    let n = on_db!(db, pool, q => {
        sqlx::query(q)
            .bind(batch_id.as_str())
            .bind(shard_no as i64)
            .bind(epoch as i64)
            .bind(c.next_row as i64)
            .bind(&segments)
            .bind(c.completed as i64)
            .bind(c.failed as i64)
            .bind(i64::from(c.done))
            .bind(c.lease_until)
            .bind(now_ms)
            .execute(pool)
            .await?
            .rows_affected()
    } with Q);
    if n == 0 {
        return Err(BatchError::Fenced {
            batch_id: batch_id.clone(),
            shard_no,
            epoch,
        });
    }
    Ok(())
}

/// Drops every lease on unfinished shards: the embedded store has one process,
/// so at its start no runner can be alive.
pub async fn release_all(db: &Db) -> Result<u64, BatchError> {
    const Q: &str = "UPDATE batch_shards SET owner = NULL, lease_until = 0 WHERE done = 0";
    Ok(on_db!(db, pool, q => {
        sqlx::query(q).execute(pool).await?.rows_affected()
    } with Q))
}

/// Rows committed so far across a batch's shards: (completed, failed).
pub async fn progress(db: &Db, batch_id: &str) -> Result<(u64, u64), BatchError> {
    const Q: &str = "SELECT CAST(COALESCE(SUM(completed), 0) AS BIGINT), \
                     CAST(COALESCE(SUM(failed), 0) AS BIGINT) \
                     FROM batch_shards WHERE batch_id = $1";
    let (c, f): (i64, i64) = on_db!(db, pool, q => {
        sqlx::query_as(q).bind(batch_id).fetch_one(pool).await?
    } with Q);
    Ok((c.max(0) as u64, f.max(0) as u64))
}
