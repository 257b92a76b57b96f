//! The event store's reads, written once for both backends. The SQL is the
//! same on Postgres and SQLite (SQLite's copy has its `$N` placeholders
//! numbered `?N`, as the batch tables' queries do), the audit query is built
//! by `QueryBuilder`, which writes each backend's placeholders, and only what
//! differs stays in the backend's file: how a row decodes (`decode`) and how
//! a time is bound (Postgres takes a timestamp, SQLite the fixed-width text
//! it stores).

/// The query text for SQLite: `$N` placeholders become `?N`, which SQLite
/// binds by number wherever they appear (a bare `$N` would be a named
/// parameter numbered by first appearance).
pub(crate) fn sqlite_sql(q: &str) -> String {
    let mut out = String::with_capacity(q.len());
    let mut chars = q.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

/// The columns every read returns, in `decode`'s order.
pub(super) const COLUMNS: &str = "position, stream_type, stream_id, seq, event_type, \
                                  event_version, payload, actor, reason, recorded_at";
/// The first position recorded at or after a time (an O(log n) probe of the
/// `(recorded_at, position)` index), or past the end when there is none.
pub(super) const FIRST_AT_OR_AFTER: &str =
    "COALESCE((SELECT position FROM events WHERE recorded_at >= ";
pub(super) const END: &str = " ORDER BY recorded_at, position LIMIT 1), 9223372036854775807)";

/// A stream's events in order.
pub(super) fn stream_sql() -> String {
    format!("SELECT {COLUMNS} FROM events WHERE stream_type = $1 AND stream_id = $2 ORDER BY seq")
}

/// Up to `$2` events after position `$1`.
pub(super) fn after_sql() -> String {
    format!("SELECT {COLUMNS} FROM events WHERE position > $1 ORDER BY position LIMIT $2")
}

/// The read methods of a backend's store: `read_stream`, `read_all` and
/// `audit`, over `self.pool` (of database `$db`), with the module's `decode`.
/// `$sql` turns the shared query text into the backend's; `$time` turns a
/// time into what the backend binds.
macro_rules! event_reads {
    ($db:ty, sql = $sql:path, time = $time:path) => {
        pub async fn read_stream(&self, stream: &StreamRef) -> Result<Vec<Recorded>, StoreError> {
            let sql = $sql(&super::reads::stream_sql());
            let rows = sqlx::query(&sql)
                .bind(stream.stream_type.as_str())
                .bind(stream.stream_id.as_str())
                .fetch_all(&self.pool)
                .await?;
            rows.iter().map(decode).collect()
        }

        pub async fn read_all(
            &self,
            after: Position,
            limit: i64,
        ) -> Result<Vec<Recorded>, StoreError> {
            let sql = $sql(&super::reads::after_sql());
            let rows = sqlx::query(&sql)
                .bind(after.0)
                .bind(limit)
                .fetch_all(&self.pool)
                .await?;
            rows.iter().map(decode).collect()
        }

        /// Returns up to `limit + 1` rows so the caller knows whether a next
        /// page exists.
        pub async fn audit(&self, q: &AuditQuery, limit: i64) -> Result<Vec<Recorded>, StoreError> {
            use super::reads::{COLUMNS, END, FIRST_AT_OR_AFTER};
            let mut qb = sqlx::QueryBuilder::<$db>::new(format!(
                "SELECT {COLUMNS} FROM events WHERE position > "
            ));
            qb.push_bind(q.after.unwrap_or(Position::START).0);
            if let Some(d) = &q.deployment {
                qb.push(" AND deployment_id = ").push_bind(d.as_str());
            }
            if let Some(t) = &q.event_type {
                qb.push(" AND event_type = ").push_bind(t.as_str());
            }
            if let Some(a) = &q.actor {
                qb.push(" AND actor = ").push_bind(a.as_str());
            }
            if let Some(from) = q.from {
                qb.push(" AND recorded_at >= ").push_bind($time(from));
                qb.push(" AND position >= ")
                    .push(FIRST_AT_OR_AFTER)
                    .push_bind($time(from))
                    .push(END);
            }
            if let Some(to) = q.to {
                qb.push(" AND recorded_at < ").push_bind($time(to));
                qb.push(" AND position < ")
                    .push(FIRST_AT_OR_AFTER)
                    .push_bind($time(to))
                    .push(END);
            }
            qb.push(" ORDER BY position LIMIT ").push_bind(limit + 1);
            let rows = qb.build().fetch_all(&self.pool).await?;
            rows.iter().map(decode).collect()
        }
    };
}
pub(super) use event_reads;

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders_become_numbered_for_sqlite() {
        assert_eq!(
            super::sqlite_sql("SET a = $3 WHERE b = $1 AND c = $12 AND d = '$x'"),
            "SET a = ?3 WHERE b = ?1 AND c = ?12 AND d = '$x'"
        );
    }
}
