//! The background writer: the only task that inserts request rows. It owns the
//! receiving end of the queue, so batching needs no lock, and it ends by itself
//! when every [`super::RequestLog`] handle is gone, after writing what was queued.
//!
//! A batch closes when it holds `max_batch` rows, when `max_delay` has passed
//! since its first row, when a flush marker arrives, or when the queue closes.
//! A batch the database refuses is retried with doubling backoff, then dropped
//! and counted: a database outage costs log rows, never the writer (it does not
//! panic and does not stop), and while it retries `record` sheds rows instead
//! of blocking requests.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep, timeout_at};

use super::bounds::make_storable;
use super::{Counters, Msg, RequestLogConfig, RequestRecord, sql};
use crate::store::Db;

/// Longest wait between two attempts at one batch.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

type FlushReply = oneshot::Sender<Result<(), String>>;

pub(super) async fn run(
    db: Db,
    config: RequestLogConfig,
    mut rx: mpsc::Receiver<Msg>,
    counters: Arc<Counters>,
) {
    let max_batch = config.max_batch.max(1);
    let mut rows: Vec<RequestRecord> = Vec::with_capacity(max_batch.min(4_096));
    let mut flushes: Vec<FlushReply> = Vec::new();
    // The last abandoned batch since flush markers were last answered.
    let mut failure: Option<String> = None;
    while let Some(first) = rx.recv().await {
        take(first, &mut rows, &mut flushes);
        let mut closed = false;
        let deadline = Instant::now() + config.max_delay;
        while flushes.is_empty() && rows.len() < max_batch {
            match timeout_at(deadline, rx.recv()).await {
                Ok(Some(msg)) => take(msg, &mut rows, &mut flushes),
                Ok(None) => {
                    closed = true;
                    break;
                }
                Err(_elapsed) => break,
            }
        }
        if !rows.is_empty() {
            if let Err(e) = write(&db, &config, &mut rows, &counters).await {
                failure = Some(e);
            }
            rows.clear();
        }
        if !flushes.is_empty() {
            let answer = failure.take().map_or(Ok(()), Err);
            for reply in flushes.drain(..) {
                // The flusher may have given up waiting; nothing to do then.
                let _ = reply.send(answer.clone());
            }
        }
        if closed {
            break;
        }
    }
    tracing::debug!(
        written = counters.written.load(Ordering::Relaxed),
        dropped = counters.dropped.load(Ordering::Relaxed),
        "request log writer stopped"
    );
}

fn take(msg: Msg, rows: &mut Vec<RequestRecord>, flushes: &mut Vec<FlushReply>) {
    match msg {
        Msg::Row(r) => rows.push(r),
        Msg::Flush(reply) => flushes.push(reply),
    }
}

/// Writes one batch, retrying as configured; on giving up, counts its rows as
/// dropped and returns the last error.
async fn write(
    db: &Db,
    config: &RequestLogConfig,
    rows: &mut [RequestRecord],
    counters: &Counters,
) -> Result<(), String> {
    for r in rows.iter_mut() {
        make_storable(r);
    }
    let mut backoff = config.retry_backoff;
    let mut attempt = 0;
    loop {
        match sql::insert(db, rows).await {
            Ok(inserted) => {
                counters.written.fetch_add(inserted, Ordering::Relaxed);
                return Ok(());
            }
            Err(e) => {
                counters.db_errors.fetch_add(1, Ordering::Relaxed);
                if attempt >= config.retries {
                    counters
                        .dropped
                        .fetch_add(rows.len() as u64, Ordering::Relaxed);
                    tracing::warn!(
                        rows = rows.len(),
                        attempts = attempt + 1,
                        error = %e,
                        "request log batch dropped after retries"
                    );
                    return Err(e.to_string());
                }
                tracing::warn!(
                    rows = rows.len(),
                    attempt = attempt + 1,
                    retry_in_ms = backoff.as_millis() as u64,
                    error = %e,
                    "request log batch failed; retrying"
                );
                sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                attempt += 1;
            }
        }
    }
}
