//! The batch path (DESIGN section 6): files, batches, shards, the runners
//! that feed rows to the engine's batch lane, fenced checkpoints, and
//! finalization into result files in object storage.
//!
//! The lifecycle of a batch is events (the `batch` stream, visible in the
//! audit API); progress inside it is shard state in the database, where each
//! checkpoint is guarded by the epoch its runner claimed. The database is the
//! record of every batch and shard; the worker only carries work, and any
//! unfinished shard that no live runner holds is taken again.

pub mod files;
pub mod finalize;
pub mod input;
pub mod runner;
mod service;
pub mod shards;
pub mod storage;
mod worker;

pub use service::{BatchSettings, Batches, CreateBatch, Listed, batch_id, file_id};
pub use storage::{Storage, StorageError};

use crate::service::CpError;
use stoker_schemas::ids::{BatchId, FileId};

/// The actor of the batch worker's events. Here rather than in `worker` because
/// `service` records events as the worker too, and `worker` builds on `service`.
pub(crate) const WORKER_ACTOR: &str = "batch-worker";

/// Everything the batch path refuses or fails with.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("{what} {id:?} does not exist")]
    NotFound { what: &'static str, id: String },
    #[error(transparent)]
    Input(#[from] input::InputError),
    #[error("{message}")]
    Invalid {
        message: String,
        param: &'static str,
    },
    #[error(
        "the batch backlog holds {backlog} estimated tokens; this batch's {estimate} would pass \
         the ceiling of {ceiling}"
    )]
    BacklogFull {
        backlog: u64,
        estimate: u64,
        ceiling: u64,
        retry_after_secs: u64,
    },
    #[error("file {file_id:?} is the input of batch {batch_id:?}, which has not ended")]
    InUse { file_id: FileId, batch_id: BatchId },
    #[error(
        "shard {shard_no} of batch {batch_id:?} was claimed by a newer runner than epoch {epoch}"
    )]
    Fenced {
        batch_id: BatchId,
        shard_no: u64,
        epoch: u64,
    },
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    ControlPlane(#[from] CpError),
    #[error("stored batch data is unreadable: {0}")]
    Corrupt(String),
}

/// Unix milliseconds now.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Runs one query body on whichever pool `db` holds, with `$N` placeholders
/// rewritten for SQLite.
macro_rules! on_db {
    ($db:expr, $pool:ident, $q:ident => $body:block with $sql:expr) => {
        match $db {
            $crate::store::Db::Postgres($pool) => {
                let $q: &str = $sql;
                $body
            }
            $crate::store::Db::Sqlite($pool) => {
                let text = $crate::store::sqlite_sql($sql);
                let $q: &str = &text;
                $body
            }
        }
    };
}
pub(crate) use on_db;
