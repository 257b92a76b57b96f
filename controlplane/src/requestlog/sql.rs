//! The request log's SQL on each backend. The statements are written once with
//! `?` placeholders and numbered for Postgres; the backends differ only in how a
//! timestamp travels: a TIMESTAMPTZ on Postgres, fixed-width RFC 3339 UTC text on
//! SQLite (the events table's format, so text order is time order).

use chrono::{DateTime, SecondsFormat, Utc};
use sqlx::{Postgres, QueryBuilder, Row, Sqlite};
use stoker_schemas::codes::ErrorCode;

use super::bounds::stored_time;
use super::figures::{Counts, overload_sql};
use super::{RequestLogError, RequestRecord};
use crate::store::Db;

const COLUMNS: &str = "request_id, tenant, deployment_id, revision_id, executor_id, lane, \
                       rollout_id, endpoint, status_code, finish_reason, error_code, \
                       prompt_tokens, completion_tokens, queue_ms, prefill_ms, ttft_ms, \
                       decode_ms, e2e_ms, received_at";

/// Rows per INSERT: 19 binds each stays below SQLite's 32,766 and Postgres's
/// 65,535 bind limits. The default batch (512) is one statement.
const CHUNK: usize = 1_000;

const REVISION_WINDOW: &str = "deployment_id = ? AND revision_id = ? AND received_at >= ?";

/// As `store::time::to_text` writes `recorded_at` (that module is private to the
/// store): microseconds, `Z`, fixed width.
fn sqlite_time(t: DateTime<Utc>) -> String {
    stored_time(t).to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// `?` placeholders numbered `$1, $2, …` for Postgres (our SQL has no `?` in
/// literals).
fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    for c in sql.chars() {
        if c == '?' {
            n += 1;
            out.push_str(&format!("${n}"));
        } else {
            out.push(c);
        }
    }
    out
}

/// Binds one row's columns in [`COLUMNS`]' order; `$time` is the stamp as the
/// backend stores it.
macro_rules! push_row {
    ($b:ident, $r:ident, $time:expr) => {
        $b.push_bind(&$r.request_id)
            .push_bind(&$r.tenant)
            .push_bind(&$r.deployment_id)
            .push_bind(&$r.revision_id)
            .push_bind(&$r.executor_id)
            .push_bind(&$r.lane)
            .push_bind(&$r.rollout_id)
            .push_bind(&$r.endpoint)
            .push_bind(i32::from($r.status_code))
            .push_bind(&$r.finish_reason)
            .push_bind($r.error_code.map(ErrorCode::as_str))
            .push_bind(i64::from($r.prompt_tokens))
            .push_bind(i64::from($r.completion_tokens))
            .push_bind($r.queue_ms)
            .push_bind($r.prefill_ms)
            .push_bind($r.ttft_ms)
            .push_bind($r.decode_ms)
            .push_bind($r.e2e_ms)
            .push_bind($time)
    };
}

/// Inserts `rows` in one transaction, ignoring request ids already stored.
/// Returns the number of rows inserted.
pub(crate) async fn insert(db: &Db, rows: &[RequestRecord]) -> Result<u64, sqlx::Error> {
    let head = format!("INSERT INTO request_log ({COLUMNS}) ");
    let tail = " ON CONFLICT (request_id) DO NOTHING";
    let mut inserted = 0;
    match db {
        Db::Postgres(pool) => {
            let mut tx = pool.begin().await?;
            for chunk in rows.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Postgres>::new(&head);
                qb.push_values(chunk, |mut b, r| {
                    push_row!(b, r, stored_time(r.received_at));
                });
                qb.push(tail);
                inserted += qb.build().execute(&mut *tx).await?.rows_affected();
            }
            tx.commit().await?;
        }
        Db::Sqlite(pool) => {
            // Take the write lock up front: waiting for it honours busy_timeout,
            // upgrading a read lock later would not.
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
            for chunk in rows.chunks(CHUNK) {
                let mut qb = QueryBuilder::<Sqlite>::new(&head);
                qb.push_values(chunk, |mut b, r| {
                    push_row!(b, r, sqlite_time(r.received_at));
                });
                qb.push(tail);
                inserted += qb.build().execute(&mut *tx).await?.rows_affected();
            }
            tx.commit().await?;
        }
    }
    Ok(inserted)
}

/// Decodes the columns both backends store alike; `$received_at` is the stamp.
macro_rules! decode {
    ($row:expr, $received_at:expr) => {{
        let row = $row;
        let tokens = |name: &str| -> Result<u32, RequestLogError> {
            let n: i64 = row.try_get(name)?;
            u32::try_from(n).map_err(|_| corrupt(name, n))
        };
        let status: i32 = row.try_get("status_code")?;
        RequestRecord {
            request_id: row.try_get("request_id")?,
            tenant: row.try_get("tenant")?,
            deployment_id: row.try_get("deployment_id")?,
            revision_id: row.try_get("revision_id")?,
            executor_id: row.try_get("executor_id")?,
            lane: row.try_get("lane")?,
            rollout_id: row.try_get("rollout_id")?,
            endpoint: row.try_get("endpoint")?,
            status_code: u16::try_from(status).map_err(|_| corrupt("status_code", status))?,
            finish_reason: row.try_get("finish_reason")?,
            error_code: row
                .try_get::<Option<String>, _>("error_code")?
                .map(|c| ErrorCode::parse(&c)),
            prompt_tokens: tokens("prompt_tokens")?,
            completion_tokens: tokens("completion_tokens")?,
            queue_ms: row.try_get("queue_ms")?,
            prefill_ms: row.try_get("prefill_ms")?,
            ttft_ms: row.try_get("ttft_ms")?,
            decode_ms: row.try_get("decode_ms")?,
            e2e_ms: row.try_get("e2e_ms")?,
            received_at: $received_at,
        }
    }};
}

fn corrupt(column: &str, value: impl std::fmt::Display) -> RequestLogError {
    RequestLogError::Database(format!("stored {column} {value} is out of range"))
}

pub(crate) async fn get(
    db: &Db,
    request_id: &str,
) -> Result<Option<RequestRecord>, RequestLogError> {
    let sql = format!("SELECT {COLUMNS} FROM request_log WHERE request_id = ?");
    match db {
        Db::Postgres(pool) => {
            let row = sqlx::query(&numbered(&sql))
                .bind(request_id)
                .fetch_optional(pool)
                .await?;
            row.map(|row| Ok(decode!(&row, row.try_get("received_at")?)))
                .transpose()
        }
        Db::Sqlite(pool) => {
            let row = sqlx::query(&sql)
                .bind(request_id)
                .fetch_optional(pool)
                .await?;
            row.map(|row| {
                let text: String = row.try_get("received_at")?;
                let at = DateTime::parse_from_rfc3339(&text)
                    .map_err(|_| corrupt("received_at", &text))?
                    .to_utc();
                Ok(decode!(&row, at))
            })
            .transpose()
        }
    }
}

pub(crate) async fn counts(
    db: &Db,
    deployment_id: &str,
    revision_id: &str,
    since: DateTime<Utc>,
) -> Result<Counts, sqlx::Error> {
    let overloads = overload_sql();
    let sql = format!(
        "SELECT COUNT(*), \
                COALESCE(SUM(CASE WHEN (error_code IS NULL OR error_code NOT IN {overloads}) \
                                   AND (status_code >= 500 \
                                        OR (status_code BETWEEN 200 AND 299 \
                                            AND error_code IS NOT NULL)) \
                                  THEN 1 ELSE 0 END), 0), \
                COALESCE(SUM(CASE WHEN error_code IN {overloads} THEN 1 ELSE 0 END), 0), \
                COUNT(ttft_ms) \
         FROM request_log WHERE {REVISION_WINDOW}"
    );
    let (requests, errors, overloads, with_ttft): (i64, i64, i64, i64) = match db {
        Db::Postgres(pool) => {
            sqlx::query_as(&numbered(&sql))
                .bind(deployment_id)
                .bind(revision_id)
                .bind(stored_time(since))
                .fetch_one(pool)
                .await?
        }
        Db::Sqlite(pool) => {
            sqlx::query_as(&sql)
                .bind(deployment_id)
                .bind(revision_id)
                .bind(sqlite_time(since))
                .fetch_one(pool)
                .await?
        }
    };
    let n = |v: i64| v.max(0) as u64;
    Ok(Counts {
        requests: n(requests),
        errors: n(errors),
        overloads: n(overloads),
        with_ttft: n(with_ttft),
    })
}

/// The `rank`-th smallest TTFT (1-based) in the window.
pub(crate) async fn nth_ttft(
    db: &Db,
    deployment_id: &str,
    revision_id: &str,
    since: DateTime<Utc>,
    rank: u64,
) -> Result<Option<f64>, sqlx::Error> {
    let sql = format!(
        "SELECT ttft_ms FROM request_log WHERE {REVISION_WINDOW} AND ttft_ms IS NOT NULL \
         ORDER BY ttft_ms LIMIT 1 OFFSET ?"
    );
    let offset = i64::try_from(rank.saturating_sub(1)).unwrap_or(i64::MAX);
    match db {
        Db::Postgres(pool) => {
            sqlx::query_scalar(&numbered(&sql))
                .bind(deployment_id)
                .bind(revision_id)
                .bind(stored_time(since))
                .bind(offset)
                .fetch_optional(pool)
                .await
        }
        Db::Sqlite(pool) => {
            sqlx::query_scalar(&sql)
                .bind(deployment_id)
                .bind(revision_id)
                .bind(sqlite_time(since))
                .bind(offset)
                .fetch_optional(pool)
                .await
        }
    }
}

/// Requests per revision, sorted by revision id (byte order on both backends).
pub(crate) async fn split(
    db: &Db,
    deployment_id: &str,
    since: DateTime<Utc>,
) -> Result<Vec<(String, u64)>, sqlx::Error> {
    let sql = "SELECT revision_id, COUNT(*) FROM request_log \
               WHERE deployment_id = ? AND received_at >= ? AND revision_id IS NOT NULL \
               GROUP BY revision_id";
    let rows: Vec<(String, i64)> = match db {
        Db::Postgres(pool) => {
            sqlx::query_as(&numbered(sql))
                .bind(deployment_id)
                .bind(stored_time(since))
                .fetch_all(pool)
                .await?
        }
        Db::Sqlite(pool) => {
            sqlx::query_as(sql)
                .bind(deployment_id)
                .bind(sqlite_time(since))
                .fetch_all(pool)
                .await?
        }
    };
    let mut split: Vec<(String, u64)> = rows
        .into_iter()
        .map(|(rev, n)| (rev, n.max(0) as u64))
        .collect();
    split.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Ok(split)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_for_postgres() {
        assert_eq!(numbered("a = ? AND b >= ?"), "a = $1 AND b >= $2");
    }

    #[test]
    fn sqlite_stamps_are_fixed_width() {
        let t = DateTime::parse_from_rfc3339("2025-01-02T03:04:05.123456789Z")
            .unwrap()
            .to_utc();
        assert_eq!(sqlite_time(t), "2025-01-02T03:04:05.123456Z");
        let whole = DateTime::parse_from_rfc3339("2025-01-02T03:04:05Z")
            .unwrap()
            .to_utc();
        assert_eq!(sqlite_time(whole), "2025-01-02T03:04:05.000000Z");
    }
}
