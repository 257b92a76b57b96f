//! Leases on transport slots, kept in Postgres: each executor holds one
//! executor slot and each API instance one API slot, and a slot decides
//! which Kafka partitions the process reads and writes (`Topics`). A holder
//! renews its lease well within its TTL; a process that was killed loses it
//! when the TTL passes, and the next process that asks takes the slot over.
//! Expiry is judged by the database's clock.

use std::time::Duration;

use sqlx::PgPool;

use crate::store::Db;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseKind {
    /// An executor slot (stored as `interactive`).
    Interactive,
    /// An API instance slot (stored as `replies`).
    Replies,
}

impl LeaseKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseKind::Interactive => "interactive",
            LeaseKind::Replies => "replies",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("distributed mode needs Postgres as its store (got sqlite)")]
    NotPostgres,
    #[error(
        "all {0} slots are held by live processes; raise kafka.executor_slots or kafka.api_slots, or stop one"
    )]
    NoneFree(i32),
    #[error("the lease on slot {slot} was taken over by another process")]
    Lost { slot: i32 },
    #[error("lease store: {0}")]
    Db(#[from] sqlx::Error),
}

/// A held lease. Renew it with [`Lease::renew`]; release it with
/// [`Lease::release`] on a clean stop.
#[derive(Clone, Debug)]
pub struct Lease {
    pool: PgPool,
    pub kind: LeaseKind,
    pub slot: i32,
    pub holder: String,
    pub ttl: Duration,
}

const NOW_MS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

impl Lease {
    /// Takes the lowest slot in `0..count` that is free or expired.
    pub async fn acquire(
        db: &Db,
        kind: LeaseKind,
        count: i32,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        let Db::Postgres(pool) = db else {
            return Err(LeaseError::NotPostgres);
        };
        let sql = format!(
            "INSERT INTO transport_leases (kind, slot, holder, expires_at) \
             VALUES ($1, $2, $3, {NOW_MS} + $4) \
             ON CONFLICT (kind, slot) DO UPDATE \
               SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at \
               WHERE transport_leases.expires_at < {NOW_MS} \
                  OR transport_leases.holder = EXCLUDED.holder \
             RETURNING slot"
        );
        for slot in 0..count {
            let got: Option<(i32,)> = sqlx::query_as(&sql)
                .bind(kind.as_str())
                .bind(slot)
                .bind(holder)
                .bind(ttl.as_millis() as i64)
                .fetch_optional(pool)
                .await?;
            if got.is_some() {
                return Ok(Lease {
                    pool: pool.clone(),
                    kind,
                    slot,
                    holder: holder.to_string(),
                    ttl,
                });
            }
        }
        Err(LeaseError::NoneFree(count))
    }

    /// How many leases of `kind` are live now: the processes of that role
    /// (API instances share a tenant's quota between them by this count).
    pub async fn live_count(db: &Db, kind: LeaseKind) -> Result<u32, LeaseError> {
        let Db::Postgres(pool) = db else {
            return Err(LeaseError::NotPostgres);
        };
        let sql = format!(
            "SELECT COUNT(*) FROM transport_leases WHERE kind = $1 AND expires_at >= {NOW_MS}"
        );
        let (n,): (i64,) = sqlx::query_as(&sql)
            .bind(kind.as_str())
            .fetch_one(pool)
            .await?;
        Ok(n.clamp(0, i64::from(u32::MAX)) as u32)
    }

    /// Extends the lease by its TTL; `Lost` when another process holds it now.
    pub async fn renew(&self) -> Result<(), LeaseError> {
        let sql = format!(
            "UPDATE transport_leases SET expires_at = {NOW_MS} + $4 \
             WHERE kind = $1 AND slot = $2 AND holder = $3"
        );
        let r = sqlx::query(&sql)
            .bind(self.kind.as_str())
            .bind(self.slot)
            .bind(&self.holder)
            .bind(self.ttl.as_millis() as i64)
            .execute(&self.pool)
            .await?;
        if r.rows_affected() == 1 {
            Ok(())
        } else {
            Err(LeaseError::Lost { slot: self.slot })
        }
    }

    /// Gives the slot up at once (clean stop).
    pub async fn release(&self) -> Result<(), LeaseError> {
        sqlx::query("DELETE FROM transport_leases WHERE kind = $1 AND slot = $2 AND holder = $3")
            .bind(self.kind.as_str())
            .bind(self.slot)
            .bind(&self.holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
