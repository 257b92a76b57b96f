//! The shard runner: feeds one shard's rows to the engine through a
//! [`RowExecutor`], keeps `row_concurrency` of them in flight, and commits the
//! completed prefix as segments plus a fenced checkpoint every
//! `checkpoint_rows` rows or `checkpoint_interval`, whichever comes first.
//!
//! Rows run and complete out of order (a row that stops early frees its slot
//! for the next at once) but are committed in order: completed rows wait in
//! a small map until the rows before them are done, so a checkpoint is
//! always "every row before `next_row` is in a listed segment". A resumed shard starts at `next_row`;
//! rows that were in flight when a runner died run again, and only the run
//! that is committed appears in the output.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::Value;
use stoker_schemas::batch::{BatchOutputLine, BatchResponse};
use stoker_schemas::ids::{BatchId, RequestId};
use tokio::sync::{Semaphore, watch};

use super::shards::{self, Checkpoint, Segment, Shard};
use super::storage::Storage;
use super::{BatchError, input, now_ms};
use crate::store::Db;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// One row, as the online endpoint would receive it.
#[derive(Clone, Debug)]
pub struct RowRequest {
    pub batch_id: BatchId,
    pub tenant: String,
    /// `/v1/chat/completions` or `/v1/completions`.
    pub endpoint: String,
    pub custom_id: String,
    pub body: Value,
}

/// What running a row gave.
#[derive(Clone, Debug)]
pub enum RowOutcome {
    /// The online API's answer: 200 with its body, or its typed error body.
    Response {
        status_code: u16,
        request_id: RequestId,
        body: Value,
    },
    /// No capacity now (queue full, not ready): try the row again later.
    /// Never written to the output.
    Retry { after: Duration, reason: String },
}

/// The engine's narrow interface as the runner sees it: the API implements it
/// with the same validation and generation code as its online routes.
pub trait RowExecutor: Send + Sync + 'static {
    fn execute(&self, row: RowRequest) -> BoxFuture<RowOutcome>;
}

/// How a runner is told to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    Run,
    /// Start no new rows; finish those in flight, commit, release.
    Drain,
    /// Abandon rows in flight; commit what completed, release.
    Now,
}

#[derive(Clone, Copy, Debug)]
pub struct RunnerConfig {
    pub row_concurrency: usize,
    pub checkpoint_rows: usize,
    pub checkpoint_interval: Duration,
    pub lease: Duration,
}

/// The batch a shard belongs to.
#[derive(Clone, Debug)]
pub struct BatchRef {
    pub batch_id: BatchId,
    pub tenant: String,
    pub endpoint: String,
}

/// How a shard run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardEnd {
    /// Every row is committed and the shard is marked done.
    Done,
    /// Stopped early; the checkpoint holds what completed and the lease is released.
    Stopped,
}

/// The object key of a segment: unique per (shard, epoch, rows), so two
/// runners never overwrite each other's objects.
pub fn segment_key(batch_id: &str, shard_no: u64, epoch: u64, from: u64, to: u64) -> String {
    format!("batches/{batch_id}/shards/{shard_no:05}/e{epoch:06}-{from:08}-{to:08}.jsonl")
}

/// The output-file line of one answered row.
pub fn output_line(
    custom_id: &str,
    status_code: u16,
    request_id: &RequestId,
    body: Value,
) -> Value {
    let line = BatchOutputLine {
        id: RequestId::generate_batch_row(),
        custom_id: custom_id.to_owned(),
        response: Some(BatchResponse {
            status_code,
            request_id: request_id.clone(),
            body,
        }),
        error: None,
    };
    serde_json::to_value(line).expect("output lines serialize")
}

/// Whether an output line goes to the output file (200) or the error file.
pub fn is_success(line: &Value) -> bool {
    line.pointer("/response/status_code")
        .and_then(Value::as_u64)
        == Some(200)
}

/// A claimed shard's committed state, advanced by each checkpoint.
struct Committed<'a> {
    db: &'a Db,
    storage: &'a Storage,
    shard: Shard,
    lease: Duration,
}

impl Committed<'_> {
    /// Writes `lines` (rows from `next_row` on) as a segment and commits the
    /// checkpoint under the claimed epoch. With no lines it only renews the lease.
    async fn commit(
        &mut self,
        lines: Vec<Value>,
        done: bool,
        release: bool,
    ) -> Result<(), BatchError> {
        let s = &mut self.shard;
        let mut segments = s.segments.clone();
        let (mut completed, mut failed) = (s.completed, s.failed);
        let next_row = s.next_row + lines.len() as u64;
        if !lines.is_empty() {
            let key = segment_key(&s.batch_id, s.shard_no, s.epoch, s.next_row, next_row);
            let mut bytes = Vec::with_capacity(lines.len() * 256);
            for l in &lines {
                if is_success(l) {
                    completed += 1;
                } else {
                    failed += 1;
                }
                serde_json::to_writer(&mut bytes, l).expect("JSON values serialize");
                bytes.push(b'\n');
            }
            self.storage.put(&key, bytes).await?;
            segments.push(Segment {
                key,
                from_row: s.next_row,
                to_row: next_row,
            });
        }
        let now = now_ms();
        let lease_until = if release || done {
            0
        } else {
            now + self.lease.as_millis() as i64
        };
        let cp = Checkpoint {
            next_row,
            segments: &segments,
            completed,
            failed,
            done,
            lease_until,
        };
        shards::commit(self.db, &s.batch_id, s.shard_no, s.epoch, &cp, now).await?;
        s.next_row = next_row;
        s.segments = segments;
        s.completed = completed;
        s.failed = failed;
        s.done = done;
        Ok(())
    }
}

/// Resolves once the stop signal satisfies `pred` (never if its sender is gone).
async fn until(rx: &mut watch::Receiver<Stop>, pred: impl Fn(Stop) -> bool) {
    let reached = rx.wait_for(|s| pred(*s)).await.is_ok();
    if !reached {
        std::future::pending::<()>().await;
    }
}

/// Runs one row to an answer, retrying while the engine has no room. `None`
/// when told to stop first.
async fn run_row(
    exec: Arc<dyn RowExecutor>,
    row: RowRequest,
    mut stop: watch::Receiver<Stop>,
) -> Option<Value> {
    loop {
        let outcome = tokio::select! {
            o = exec.execute(row.clone()) => o,
            _ = until(&mut stop, |s| s == Stop::Now) => return None,
        };
        match outcome {
            RowOutcome::Response {
                status_code,
                request_id,
                body,
            } => return Some(output_line(&row.custom_id, status_code, &request_id, body)),
            RowOutcome::Retry { after, reason } => {
                tracing::debug!(custom_id = %row.custom_id, %reason, "batch row deferred");
                let wait = after.clamp(Duration::from_millis(50), Duration::from_secs(5));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = until(&mut stop, |s| s != Stop::Run) => return None,
                }
            }
        }
    }
}

/// Runs a claimed shard from its checkpoint until it is done or told to stop.
/// Each row in flight holds one of `permits`, which the process's shards
/// share: the engine sees a steady number of rows while one shard's last rows
/// finish and the next shard's first ones start.
#[allow(clippy::too_many_arguments)]
pub async fn run_shard(
    db: &Db,
    storage: &Storage,
    exec: Arc<dyn RowExecutor>,
    cfg: RunnerConfig,
    batch: &BatchRef,
    shard: Shard,
    input_bytes: &[u8],
    stop: watch::Receiver<Stop>,
    permits: Arc<Semaphore>,
) -> Result<ShardEnd, BatchError> {
    let rows = input::rows(input_bytes, shard.next_row as usize, shard.end_row as usize)
        .map_err(BatchError::Corrupt)?;
    let end_row = shard.end_row;
    let mut state = Committed {
        db,
        storage,
        shard,
        lease: cfg.lease,
    };
    let gate = stop.clone();
    let feed = futures_util::stream::iter(rows.into_iter().enumerate())
        .take_while(move |_| futures_util::future::ready(*gate.borrow() == Stop::Run))
        .map(|(i, line)| {
            let row = RowRequest {
                batch_id: batch.batch_id.clone(),
                tenant: batch.tenant.clone(),
                endpoint: batch.endpoint.clone(),
                custom_id: line.custom_id,
                body: line.body,
            };
            let run = run_row(exec.clone(), row, stop.clone());
            let (permits, gate) = (permits.clone(), stop.clone());
            async move {
                let Ok(_permit) = permits.acquire_owned().await else {
                    return (i, None);
                };
                // Told to stop while waiting for a slot: do not start.
                if *gate.borrow() != Stop::Run {
                    return (i, None);
                }
                (i, run.await)
            }
        })
        .buffer_unordered(cfg.row_concurrency.max(1));
    let mut feed = std::pin::pin!(feed);
    // Completed rows not yet contiguous with the committed prefix.
    let mut ready: BTreeMap<usize, Value> = BTreeMap::new();
    let mut next_idx = 0;
    let mut pending: Vec<Value> = Vec::new();
    let mut last = Instant::now();
    let mut tick = tokio::time::interval(cfg.checkpoint_interval.max(Duration::from_millis(50)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stop_now = stop.clone();
    loop {
        tokio::select! {
            item = feed.next() => match item {
                Some((i, Some(line))) => {
                    ready.insert(i, line);
                    while let Some(l) = ready.remove(&next_idx) {
                        pending.push(l);
                        next_idx += 1;
                    }
                    if pending.len() >= cfg.checkpoint_rows.max(1)
                        || last.elapsed() >= cfg.checkpoint_interval
                    {
                        state.commit(std::mem::take(&mut pending), false, false).await?;
                        last = Instant::now();
                    }
                }
                // A row that never started (the stop came while it waited
                // for a slot) leaves a gap: rows after it cannot join the
                // committed prefix, but rows already running before it can,
                // so keep collecting until the feed ends. Breaking here
                // dropped answers that finished during a drain.
                Some((_, None)) => {}
                None => break,
            },
            _ = tick.tick() => {
                // Commit what is there, or just renew the lease.
                state.commit(std::mem::take(&mut pending), false, false).await?;
                last = Instant::now();
            }
            _ = until(&mut stop_now, |s| s == Stop::Now) => break,
        }
    }
    let done = state.shard.next_row + pending.len() as u64 == end_row;
    state.commit(pending, done, true).await?;
    Ok(if done {
        ShardEnd::Done
    } else {
        ShardEnd::Stopped
    })
}
