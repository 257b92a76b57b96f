//! Persistence of the read models: one JSON document per (kind, id) and one
//! checkpoint, written in the same transaction so the two never disagree.

use std::collections::BTreeSet;

use serde_json::Value;

use super::views::{Touched, Views};
use super::{NAME, ProjectionError};
use crate::store::{Db, Position};

fn corrupt(kind: &str, id: &str, e: impl std::fmt::Display) -> ProjectionError {
    ProjectionError::Corrupt {
        kind: kind.to_owned(),
        id: id.to_owned(),
        detail: e.to_string(),
    }
}

/// Every stored document and the checkpoint, as views.
pub(super) async fn load(db: &Db) -> Result<Views, ProjectionError> {
    let mut views = Views::default();
    for (kind, id, doc) in documents(db).await? {
        views
            .load_doc(&kind, id.clone(), doc)
            .map_err(|e| corrupt(&kind, &id, e))?;
    }
    let pos: Option<i64> = match db {
        Db::Postgres(p) => {
            sqlx::query_scalar("SELECT position FROM projection_checkpoints WHERE name = $1")
                .bind(NAME)
                .fetch_optional(p)
                .await?
        }
        Db::Sqlite(p) => {
            sqlx::query_scalar("SELECT position FROM projection_checkpoints WHERE name = ?")
                .bind(NAME)
                .fetch_optional(p)
                .await?
        }
    };
    views.position = Position(pos.unwrap_or(0));
    Ok(views)
}

pub(super) async fn documents(db: &Db) -> Result<Vec<(String, String, Value)>, ProjectionError> {
    const Q: &str = "SELECT kind, id, doc FROM read_models ORDER BY kind, id";
    Ok(match db {
        Db::Postgres(p) => {
            sqlx::query_as::<_, (String, String, Value)>(Q)
                .fetch_all(p)
                .await?
        }
        Db::Sqlite(p) => {
            let rows: Vec<(String, String, String)> = sqlx::query_as(Q).fetch_all(p).await?;
            rows.into_iter()
                .map(|(k, i, d)| {
                    let v = serde_json::from_str(&d).map_err(|e| corrupt(&k, &i, e))?;
                    Ok((k, i, v))
                })
                .collect::<Result<_, ProjectionError>>()?
        }
    })
}

/// Upserts the touched documents and moves the checkpoint, atomically.
pub(super) async fn save(
    db: &Db,
    views: &Views,
    touched: &BTreeSet<Touched>,
) -> Result<(), ProjectionError> {
    write(db, views, touched, false).await
}

/// Writes documents and the checkpoint in one transaction, first emptying the
/// table when `clear` (a rebuild), so readers never see a half-built set.
async fn write(
    db: &Db,
    views: &Views,
    touched: &BTreeSet<Touched>,
    clear: bool,
) -> Result<(), ProjectionError> {
    let pos = views.position.0;
    let docs: Vec<(&str, &str, Value)> = touched
        .iter()
        .filter_map(|(k, id)| views.doc(k, id).map(|d| (*k, id.as_str(), d)))
        .collect();
    match db {
        Db::Postgres(p) => {
            let mut tx = p.begin().await?;
            if clear {
                sqlx::query("DELETE FROM read_models")
                    .execute(&mut *tx)
                    .await?;
            }
            for (k, id, doc) in &docs {
                sqlx::query(
                    "INSERT INTO read_models (kind, id, doc, position) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (kind, id) DO UPDATE SET doc = EXCLUDED.doc, position = EXCLUDED.position",
                )
                .bind(k)
                .bind(id)
                .bind(doc)
                .bind(pos)
                .execute(&mut *tx)
                .await?;
            }
            upsert_checkpoint_pg(&mut tx, pos).await?;
            tx.commit().await?;
        }
        Db::Sqlite(p) => {
            let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
            if clear {
                sqlx::query("DELETE FROM read_models")
                    .execute(&mut *tx)
                    .await?;
            }
            for (k, id, doc) in &docs {
                sqlx::query(
                    "INSERT INTO read_models (kind, id, doc, position) VALUES (?, ?, ?, ?)
                     ON CONFLICT (kind, id) DO UPDATE SET doc = excluded.doc, position = excluded.position",
                )
                .bind(k)
                .bind(id)
                .bind(doc.to_string())
                .bind(pos)
                .execute(&mut *tx)
                .await?;
            }
            upsert_checkpoint_sqlite(&mut tx, pos).await?;
            tx.commit().await?;
        }
    }
    Ok(())
}

/// Replaces every document with the given views; returns how many were written.
pub(super) async fn replace_all(db: &Db, views: &Views) -> Result<u64, ProjectionError> {
    let mut all: BTreeSet<Touched> = BTreeSet::new();
    use super::views::kind;
    all.extend(
        views
            .deployments
            .keys()
            .map(|k| (kind::DEPLOYMENT, k.clone())),
    );
    all.extend(views.rollouts.keys().map(|k| (kind::ROLLOUT, k.clone())));
    all.extend(views.revisions.keys().map(|k| (kind::REVISION, k.clone())));
    all.extend(
        views
            .capacity_profiles
            .keys()
            .map(|k| (kind::CAPACITY_PROFILE, k.clone())),
    );
    all.extend(views.executors.keys().map(|k| (kind::EXECUTOR, k.clone())));
    all.extend(views.batches.keys().map(|k| (kind::BATCH, k.clone())));
    all.extend(views.tenants.keys().map(|k| (kind::TENANT, k.clone())));
    write(db, views, &all, true).await?;
    Ok(all.len() as u64)
}

async fn upsert_checkpoint_pg(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    pos: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO projection_checkpoints (name, position) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET position = EXCLUDED.position",
    )
    .bind(NAME)
    .bind(pos)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn upsert_checkpoint_sqlite(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    pos: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO projection_checkpoints (name, position) VALUES (?, ?)
         ON CONFLICT (name) DO UPDATE SET position = excluded.position",
    )
    .bind(NAME)
    .bind(pos)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
