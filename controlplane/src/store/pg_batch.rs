//! Group commit for the Postgres backend: concurrent appends on one `PgStore`
//! share one transaction, so they share one WAL flush.
//!
//! Callers enqueue their append; one writer task takes the first queued append
//! plus whatever else is already waiting (up to [`MAX_APPENDS`] appends or
//! [`MAX_EVENTS`] events) and runs them in one transaction under the global
//! append lock: one query reads the versions of every stream in the batch, the
//! version checks are decided in memory in queue order (an earlier append in the
//! batch advances its stream), refused appends get `Conflict` and write nothing,
//! and every accepted event goes in with one `INSERT … SELECT FROM UNNEST(…)`.
//! One COMMIT, then every caller is answered.
//!
//! The lock is held by the whole transaction, as for a single append, so appends
//! from other processes stay serialized, positions become visible in order,
//! `recorded_at` stays non-decreasing along position and the version check stays
//! authoritative. A sequential caller sees the same four round trips as before.
//!
//! Failures: if a statement fails with an error the server reports (a unique
//! violation, which only a writer that skips the lock can cause, or a CHECK on one
//! append's events), the transaction is rolled back and nothing of the batch is
//! written; the batch is then rerun one append per transaction, so the error lands
//! on the append that caused it (a unique violation becomes `Conflict`) and the
//! innocent ones still commit. Any other failure (I/O, a lost connection, where a
//! COMMIT's outcome is unknown) is returned to every append of the batch.
//!
//! An append whose caller stops waiting after enqueueing may still be written.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Row, Transaction};
use tokio::sync::{mpsc, oneshot};

use super::types::deployment_of;
use super::{ExpectedVersion, NewEvent, Position, Recorded, StoreError, StreamRef};

const APPEND_LOCK: i64 = 0x7374_6f6b_6572_0001;
/// The most appends one transaction carries.
const MAX_APPENDS: usize = 256;
/// The most events one transaction carries, unless a single append has more.
const MAX_EVENTS: usize = 4_000;

/// One queued append and where its answer goes.
pub(crate) struct Request {
    pub stream: StreamRef,
    pub expected: ExpectedVersion,
    pub events: Vec<NewEvent>,
    pub reply: oneshot::Sender<Result<Vec<Recorded>, StoreError>>,
}

pub(crate) type Queue = mpsc::UnboundedSender<Request>;

/// Starts the writer task; it ends when every sender (every `PgStore` clone) is gone.
pub(crate) fn spawn(pool: PgPool) -> Queue {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(writer(pool, rx));
    tx
}

async fn writer(pool: PgPool, mut rx: mpsc::UnboundedReceiver<Request>) {
    let mut carry: Option<Request> = None;
    loop {
        let first = match carry.take() {
            Some(r) => r,
            None => match rx.recv().await {
                Some(r) => r,
                None => return,
            },
        };
        let mut events = first.events.len();
        let mut batch = vec![first];
        while batch.len() < MAX_APPENDS {
            let Ok(next) = rx.try_recv() else { break };
            if events + next.events.len() > MAX_EVENTS {
                carry = Some(next);
                break;
            }
            events += next.events.len();
            batch.push(next);
        }
        run(&pool, batch).await;
    }
}

/// Runs one batch and answers every request in it; never fails itself.
async fn run(pool: &PgPool, batch: Vec<Request>) {
    let result = commit(pool, &batch).await;
    match result {
        Ok(outcomes) => {
            for (req, out) in batch.into_iter().zip(outcomes) {
                let _ = req.reply.send(out);
            }
        }
        // The server refused a statement: nothing was written. Rerun each append
        // alone so the error lands on the one that caused it.
        Err(sqlx::Error::Database(_)) if batch.len() > 1 => {
            for req in batch {
                let out = alone(pool, &req).await;
                let _ = req.reply.send(out);
            }
        }
        Err(e) => {
            let unique = matches!(&e, sqlx::Error::Database(db) if db.is_unique_violation());
            let unavailable = super::is_unavailable(&e);
            let msg = e.to_string();
            for req in batch {
                let out = if unique {
                    conflict_now(pool, &req).await
                } else if unavailable {
                    Err(StoreError::Unavailable(msg.clone()))
                } else {
                    Err(StoreError::Database(msg.clone()))
                };
                let _ = req.reply.send(out);
            }
        }
    }
}

/// One append in its own transaction (the fallback after a refused batch).
async fn alone(pool: &PgPool, req: &Request) -> Result<Vec<Recorded>, StoreError> {
    match commit(pool, std::slice::from_ref(req)).await {
        Ok(mut outs) => outs.pop().unwrap_or_else(|| Ok(Vec::new())),
        Err(sqlx::Error::Database(db)) if db.is_unique_violation() => conflict_now(pool, req).await,
        Err(e) => Err(e.into()),
    }
}

/// The `Conflict` for an append that lost to a writer that skips the lock.
async fn conflict_now(pool: &PgPool, req: &Request) -> Result<Vec<Recorded>, StoreError> {
    Err(StoreError::Conflict {
        stream: req.stream.clone(),
        expected: req.expected,
        actual: super::pg_version::version(pool, &req.stream).await?,
    })
}

/// One transaction for the whole batch. `Ok` means it committed; each outcome is
/// the append's events or its `Conflict`. `Err` means nothing was written.
async fn commit(
    pool: &PgPool,
    batch: &[Request],
) -> Result<Vec<Result<Vec<Recorded>, StoreError>>, sqlx::Error> {
    // One round trip: BEGIN and the lock (simple protocol allows two statements).
    let mut tx = pool
        .begin_with(format!(
            "BEGIN; SELECT pg_advisory_xact_lock({APPEND_LOCK})"
        ))
        .await?;
    // A new statement, so a new snapshot: it sees every append committed before
    // the lock was granted.
    let (mut versions, floor) = versions(&mut tx, batch).await?;

    // Decide every version check in queue order; accepted appends get seq ranges.
    let mut accepted: Vec<Option<u64>> = Vec::with_capacity(batch.len());
    let mut outcomes: Vec<Option<Result<Vec<Recorded>, StoreError>>> =
        Vec::with_capacity(batch.len());
    for req in batch {
        let v = versions.entry(req.stream.clone()).or_insert(0);
        if req.expected.admits(*v) {
            accepted.push(Some(*v));
            *v += req.events.len() as u64;
            outcomes.push(None);
        } else {
            accepted.push(None);
            outcomes.push(Some(Err(StoreError::Conflict {
                stream: req.stream.clone(),
                expected: req.expected,
                actual: *v,
            })));
        }
    }

    let rows = insert(&mut tx, batch, &accepted, floor).await?;
    for ((req, base), out) in batch.iter().zip(&accepted).zip(&mut outcomes) {
        let Some(base) = *base else { continue };
        let mut recorded = Vec::with_capacity(req.events.len());
        for (i, e) in req.events.iter().enumerate() {
            let seq = base + i as u64 + 1;
            let key = (
                req.stream.stream_type.0.clone(),
                req.stream.stream_id.0.clone(),
                seq as i64,
            );
            let Some(&(position, recorded_at)) = rows.get(&key) else {
                return Err(sqlx::Error::Protocol(format!(
                    "append batch: no row returned for {}#{seq}",
                    req.stream
                )));
            };
            recorded.push(Recorded {
                position: Position(position),
                stream: req.stream.clone(),
                seq,
                event_type: e.event_type.clone(),
                version: e.version,
                payload: e.payload.clone(),
                actor: e.actor.clone(),
                reason: e.reason.clone(),
                recorded_at,
            });
        }
        *out = Some(Ok(recorded));
    }
    tx.commit().await?;
    Ok(outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Ok(Vec::new())))
        .collect())
}

/// The current version of every stream in the batch, and the latest `recorded_at`.
async fn versions(
    tx: &mut Transaction<'static, Postgres>,
    batch: &[Request],
) -> Result<(HashMap<StreamRef, u64>, Option<DateTime<Utc>>), sqlx::Error> {
    let mut types: Vec<&str> = Vec::with_capacity(batch.len());
    let mut ids: Vec<&str> = Vec::with_capacity(batch.len());
    let mut seen = std::collections::HashSet::with_capacity(batch.len());
    for req in batch {
        if seen.insert(&req.stream) {
            types.push(req.stream.stream_type.as_str());
            ids.push(req.stream.stream_id.as_str());
        }
    }
    let rows = sqlx::query(
        "SELECT t.stream_type, t.stream_id, \
                COALESCE((SELECT MAX(e.seq) FROM events e \
                          WHERE e.stream_type = t.stream_type \
                            AND e.stream_id = t.stream_id), 0), \
                (SELECT MAX(recorded_at) FROM events) \
         FROM UNNEST($1::text[], $2::text[]) AS t(stream_type, stream_id)",
    )
    .bind(&types)
    .bind(&ids)
    .fetch_all(&mut **tx)
    .await?;
    let mut versions = HashMap::with_capacity(rows.len());
    let mut floor = None;
    for r in &rows {
        let stream = StreamRef::new(r.try_get::<String, _>(0)?, r.try_get::<String, _>(1)?);
        versions.insert(stream, r.try_get::<i64, _>(2)? as u64);
        floor = r.try_get::<Option<DateTime<Utc>>, _>(3)?;
    }
    Ok((versions, floor))
}

type Stamps = HashMap<(String, String, i64), (i64, DateTime<Utc>)>;

/// Inserts the events of every accepted append with one statement, in queue
/// order then event order, so positions and `recorded_at` follow that order.
/// Returns each row's position and time by (stream type, stream id, seq).
async fn insert(
    tx: &mut Transaction<'static, Postgres>,
    batch: &[Request],
    accepted: &[Option<u64>],
    floor: Option<DateTime<Utc>>,
) -> Result<Stamps, sqlx::Error> {
    let n: usize = batch
        .iter()
        .zip(accepted)
        .filter(|(_, a)| a.is_some())
        .map(|(r, _)| r.events.len())
        .sum();
    if n == 0 {
        return Ok(HashMap::new());
    }
    let mut types: Vec<&str> = Vec::with_capacity(n);
    let mut ids: Vec<&str> = Vec::with_capacity(n);
    let mut seqs: Vec<i64> = Vec::with_capacity(n);
    let mut event_types: Vec<&str> = Vec::with_capacity(n);
    let mut event_versions: Vec<i32> = Vec::with_capacity(n);
    let mut payloads: Vec<&Value> = Vec::with_capacity(n);
    let mut actors: Vec<&str> = Vec::with_capacity(n);
    let mut reasons: Vec<Option<&str>> = Vec::with_capacity(n);
    let mut deployments: Vec<Option<String>> = Vec::with_capacity(n);
    for (req, base) in batch.iter().zip(accepted) {
        let Some(base) = *base else { continue };
        for (i, e) in req.events.iter().enumerate() {
            types.push(req.stream.stream_type.as_str());
            ids.push(req.stream.stream_id.as_str());
            seqs.push((base + i as u64 + 1) as i64);
            event_types.push(e.event_type.as_str());
            event_versions.push(e.version);
            payloads.push(&e.payload);
            actors.push(e.actor.as_str());
            reasons.push(e.reason.as_deref());
            deployments.push(deployment_of(&req.stream, &e.payload));
        }
    }
    let rows = sqlx::query(
        "INSERT INTO events (stream_type, stream_id, seq, event_type, event_version, \
                             payload, actor, reason, deployment_id, recorded_at) \
         SELECT t.st, t.sid, t.seq, t.et, t.ev, t.p, t.a, t.r, t.d, \
                GREATEST(clock_timestamp(), $10) \
         FROM UNNEST($1::text[], $2::text[], $3::int8[], $4::text[], $5::int4[], \
                     $6::jsonb[], $7::text[], $8::text[], $9::text[]) \
              WITH ORDINALITY AS t(st, sid, seq, et, ev, p, a, r, d, ord) \
         ORDER BY t.ord \
         RETURNING stream_type, stream_id, seq, position, recorded_at",
    )
    .bind(&types)
    .bind(&ids)
    .bind(&seqs)
    .bind(&event_types)
    .bind(&event_versions)
    .bind(&payloads)
    .bind(&actors)
    .bind(&reasons)
    .bind(&deployments)
    .bind(floor)
    .fetch_all(&mut **tx)
    .await?;
    let mut stamps = HashMap::with_capacity(rows.len());
    for r in &rows {
        stamps.insert(
            (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?),
            (r.try_get(3)?, r.try_get(4)?),
        );
    }
    Ok(stamps)
}
