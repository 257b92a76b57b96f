//! A tiny embedded migrator: the SQL under `migrations/` is compiled into the binary
//! (so `stoker` runs from any directory) and applied once, in order, recording each
//! version in `schema_migrations`. sqlx's `migrate!` would need its `macros` feature.

use sqlx::{PgPool, SqlitePool};

use super::StoreError;

pub(crate) struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sql: &'static str,
}

pub(crate) const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        name: "events",
        sql: include_str!("../../../migrations/postgres/0001_events.sql"),
    },
    Migration {
        version: 2,
        name: "request_log",
        sql: include_str!("../../../migrations/postgres/0002_request_log.sql"),
    },
    Migration {
        version: 3,
        name: "read_models",
        sql: include_str!("../../../migrations/postgres/0003_read_models.sql"),
    },
    Migration {
        version: 4,
        name: "batch",
        sql: include_str!("../../../migrations/postgres/0004_batch.sql"),
    },
    Migration {
        version: 5,
        name: "transport_leases",
        sql: include_str!("../../../migrations/postgres/0005_transport_leases.sql"),
    },
];

pub(crate) const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "events",
        sql: include_str!("../../../migrations/sqlite/0001_events.sql"),
    },
    Migration {
        version: 2,
        name: "request_log",
        sql: include_str!("../../../migrations/sqlite/0002_request_log.sql"),
    },
    Migration {
        version: 3,
        name: "read_models",
        sql: include_str!("../../../migrations/sqlite/0003_read_models.sql"),
    },
    Migration {
        version: 4,
        name: "batch",
        sql: include_str!("../../../migrations/sqlite/0004_batch.sql"),
    },
    Migration {
        version: 5,
        name: "transport_leases",
        sql: include_str!("../../../migrations/sqlite/0005_transport_leases.sql"),
    },
];

/// Serializes concurrent migrators (several API instances starting at once).
const PG_MIGRATE_LOCK: i64 = 0x7374_6f6b_6572_0002;

fn failed(m: &Migration, e: sqlx::Error) -> StoreError {
    StoreError::Migration(format!("{:04}_{}: {e}", m.version, m.name))
}

pub(crate) async fn postgres(pool: &PgPool) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(PG_MIGRATE_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version BIGINT PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .execute(&mut *tx)
    .await?;
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations")
        .fetch_all(&mut *tx)
        .await?;
    for m in POSTGRES.iter().filter(|m| !applied.contains(&m.version)) {
        sqlx::raw_sql(m.sql)
            .execute(&mut *tx)
            .await
            .map_err(|e| failed(m, e))?;
        sqlx::query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)")
            .bind(m.version)
            .bind(m.name)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

pub(crate) async fn sqlite(pool: &SqlitePool) -> Result<(), StoreError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS schema_migrations (
            version INTEGER PRIMARY KEY,
            name TEXT NOT NULL,
            applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))",
    )
    .execute(&mut *tx)
    .await?;
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM schema_migrations")
        .fetch_all(&mut *tx)
        .await?;
    for m in SQLITE.iter().filter(|m| !applied.contains(&m.version)) {
        sqlx::raw_sql(m.sql)
            .execute(&mut *tx)
            .await
            .map_err(|e| failed(m, e))?;
        sqlx::query("INSERT INTO schema_migrations (version, name) VALUES (?, ?)")
            .bind(m.version)
            .bind(m.name)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}
