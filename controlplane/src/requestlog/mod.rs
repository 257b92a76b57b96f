//! The request log: one row per request the API served or refused, for rollout
//! gates (per-revision error, overload and TTFT figures) and for support. It
//! holds ids, codes, counts and timings, never prompt or output text (DESIGN
//! section 7).
//!
//! Recording sits on the request path, so [`RequestLog::record`] never waits: it
//! hands the row to a bounded queue and, when the queue is full, drops the row and
//! counts it. A background task ([`writer`]) drains the queue in batches, one
//! multi-row INSERT per transaction, so the database sees a few statements a
//! second however busy the API is. The price is that a crash loses at most the
//! queued rows, and that overload sheds log rows before it sheds requests.

mod bounds;
mod figures;
mod sql;
mod writer;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use stoker_schemas::codes::ErrorCode;
use tokio::sync::{mpsc, oneshot};

use crate::store::Db;

pub use bounds::{MAX_KEY_BYTES, stored_key};
pub use figures::RevisionFigures;

/// One request as the API saw it. Timings are milliseconds; `received_at` is kept
/// to the microsecond (what both backends store).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub request_id: String,
    pub tenant: String,
    pub deployment_id: String,
    /// `None` when the request was refused before a revision was chosen.
    pub revision_id: Option<String>,
    pub executor_id: Option<String>,
    pub lane: String,
    pub rollout_id: Option<String>,
    pub endpoint: String,
    pub status_code: u16,
    pub finish_reason: Option<String>,
    /// A code this build does not know (a newer instance wrote the row)
    /// reads as [`ErrorCode::Unknown`].
    pub error_code: Option<ErrorCode>,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub queue_ms: Option<f64>,
    pub prefill_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub decode_ms: Option<f64>,
    pub e2e_ms: f64,
    pub received_at: DateTime<Utc>,
}

/// How the writer batches and retries.
#[derive(Clone, Debug)]
pub struct RequestLogConfig {
    /// Rows that may wait for the writer; past this `record` drops and counts.
    pub queue_capacity: usize,
    /// Most rows in one INSERT.
    pub max_batch: usize,
    /// Longest a row waits for companions before its batch is written.
    pub max_delay: Duration,
    /// Retries of a batch the database refused, before it is dropped.
    pub retries: u32,
    /// Wait before the first retry; doubles on each further one (capped at 5 s).
    pub retry_backoff: Duration,
}

impl Default for RequestLogConfig {
    fn default() -> Self {
        Self {
            queue_capacity: 16_384,
            max_batch: 512,
            max_delay: Duration::from_millis(100),
            retries: 3,
            retry_backoff: Duration::from_millis(100),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RequestLogError {
    #[error("request log database error: {0}")]
    Database(String),
    /// The writer task is gone (its runtime shut down).
    #[error("the request log writer has stopped")]
    Closed,
}

impl From<sqlx::Error> for RequestLogError {
    fn from(e: sqlx::Error) -> Self {
        RequestLogError::Database(e.to_string())
    }
}

/// What travels to the writer, in order: rows, and flush markers that are
/// answered once every row before them has been dealt with.
enum Msg {
    Row(RequestRecord),
    Flush(oneshot::Sender<Result<(), String>>),
}

/// Counters shared by the handles and the writer.
#[derive(Debug, Default)]
struct Counters {
    written: AtomicU64,
    dropped: AtomicU64,
    db_errors: AtomicU64,
}

/// A cheap-to-clone handle on the request log. When the last handle is dropped
/// the writer writes what is queued and exits.
#[derive(Clone)]
pub struct RequestLog {
    tx: mpsc::Sender<Msg>,
    db: Db,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for RequestLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLog")
            .field("queued", &self.queued())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl RequestLog {
    /// Starts the writer on the current tokio runtime (panics outside one, like
    /// `tokio::spawn`). `db` must have been migrated.
    pub fn spawn(db: Db, config: RequestLogConfig) -> RequestLog {
        let (tx, rx) = mpsc::channel(config.queue_capacity.max(1));
        let counters = Arc::new(Counters::default());
        tokio::spawn(writer::run(db.clone(), config, rx, counters.clone()));
        RequestLog { tx, db, counters }
    }

    /// Queues one row for the writer. Never blocks and never awaits: when the
    /// queue is full the row is dropped and counted in [`RequestLog::dropped`].
    pub fn record(&self, r: RequestRecord) {
        if self.tx.try_send(Msg::Row(r)).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Rows dropped: refused by a full queue, or abandoned after the database
    /// refused their batch on every retry.
    pub fn dropped(&self) -> u64 {
        self.counters.dropped.load(Ordering::Relaxed)
    }

    /// Rows inserted (a duplicate `request_id` is ignored, so not counted).
    pub fn written(&self) -> u64 {
        self.counters.written.load(Ordering::Relaxed)
    }

    /// Failed attempts to write a batch, retries included.
    pub fn db_errors(&self) -> u64 {
        self.counters.db_errors.load(Ordering::Relaxed)
    }

    /// Rows waiting for the writer now.
    pub fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// Resolves once every row recorded before the call has been committed. An
    /// error says some batch since the previous flush was abandoned after its
    /// retries; rows dropped by a full queue are only counted.
    pub async fn flush(&self) -> Result<(), RequestLogError> {
        let (done, answer) = oneshot::channel();
        self.tx
            .send(Msg::Flush(done))
            .await
            .map_err(|_| RequestLogError::Closed)?;
        answer
            .await
            .map_err(|_| RequestLogError::Closed)?
            .map_err(RequestLogError::Database)
    }

    /// The row of one request, if it was written. Ids are looked up the way they
    /// were stored (see [`stored_key`]).
    pub async fn get(&self, request_id: &str) -> Result<Option<RequestRecord>, RequestLogError> {
        sql::get(&self.db, &stored_key(request_id)).await
    }

    /// One revision's requests since `since`, for rollout gates.
    pub async fn revision_figures(
        &self,
        deployment_id: &str,
        revision_id: &str,
        since: DateTime<Utc>,
    ) -> Result<RevisionFigures, RequestLogError> {
        let deployment_id = stored_key(deployment_id);
        let revision_id = stored_key(revision_id);
        let counts = sql::counts(&self.db, &deployment_id, &revision_id, since).await?;
        let p99 = match figures::p99_rank(counts.with_ttft) {
            Some(rank) => {
                sql::nth_ttft(&self.db, &deployment_id, &revision_id, since, rank).await?
            }
            None => None,
        };
        Ok(RevisionFigures::new(counts, p99))
    }

    /// Requests per revision of a deployment since `since`, by revision id.
    /// Requests refused before a revision was chosen are not counted.
    pub async fn split(
        &self,
        deployment_id: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<(String, u64)>, RequestLogError> {
        Ok(sql::split(&self.db, &stored_key(deployment_id), since).await?)
    }
}
