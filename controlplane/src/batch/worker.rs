//! The batch worker: one loop per process that moves batches along. It
//! starts batches left `validating` by a crash, claims unfinished shards that
//! no live runner holds and runs them (up to `max_running_shards`), stops the
//! runners of cancelled and expired batches, and finalizes a batch once no
//! shard of it is running anywhere.
//!
//! Draining (SIGTERM, spot notice) stops new shard work, lets rows in flight
//! finish within the grace period, then commits and releases every shard, so
//! the next process resumes each at its checkpoint.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use stoker_schemas::codes::ErrorCode;
use stoker_schemas::events::BatchOutcome;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::finalize::finalize;
use super::runner::{BatchRef, RowExecutor, ShardEnd, Stop, run_shard};
use super::service::Batches;
use super::{BatchError, StorageError, WORKER_ACTOR, files, now_ms, shards};
use crate::domain::BatchCommand;
use crate::projection::BatchView;
use crate::service::meta;

impl Batches {
    /// Starts the worker loop. `embedded` drops every lease first: with the
    /// embedded store this is the only process, so no runner can be alive.
    pub fn spawn_worker(&self, exec: Arc<dyn RowExecutor>, embedded: bool) -> JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            if embedded {
                match shards::release_all(&this.0.db).await {
                    Ok(n) if n > 0 => {
                        tracing::info!(shards = n, "released leases of a previous run")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "releasing old leases"),
                }
            }
            loop {
                if this.0.draining.load(Ordering::SeqCst) {
                    return;
                }
                if let Err(e) = this.tick(&exec).await {
                    tracing::warn!(error = %e, "batch worker tick failed");
                }
                tokio::select! {
                    _ = this.0.wake.notified() => {}
                    _ = tokio::time::sleep(this.0.settings.poll_interval) => {}
                }
            }
        })
    }

    /// One pass over the open batches.
    pub async fn tick(&self, exec: &Arc<dyn RowExecutor>) -> Result<(), BatchError> {
        let open: Vec<BatchView> = {
            let views = self.0.cp.projector().views().await;
            views
                .batches
                .values()
                .filter(|b| b.is_open())
                .cloned()
                .collect()
        };
        for b in open {
            if let Err(e) = self.advance(&b, exec).await {
                tracing::warn!(batch_id = %b.batch_id, error = %e, "batch step failed");
            }
        }
        Ok(())
    }

    fn local_shards(&self, batch_id: &str) -> HashSet<u64> {
        let running = self.0.running.lock().expect("running lock");
        running
            .keys()
            .filter(|(b, _)| b == batch_id)
            .map(|(_, n)| *n)
            .collect()
    }

    async fn advance(&self, b: &BatchView, exec: &Arc<dyn RowExecutor>) -> Result<(), BatchError> {
        if b.status == "validating" || (b.in_progress_at.is_none() && b.cancel_requested) {
            self.start(&b.batch_id, b.total_rows).await?;
            return Ok(());
        }
        let expired = now_ms() / 1000 >= b.expires_at;
        let stopping = b.cancel_requested || expired;
        if stopping {
            self.stop_runners(&b.batch_id, Stop::Now);
        }
        let shards = shards::list(&self.0.db, &b.batch_id).await?;
        let local = self.local_shards(&b.batch_id);
        let now = now_ms();
        let held_elsewhere = shards.iter().any(|s| {
            !s.done && !local.contains(&s.shard_no) && s.owner.is_some() && s.lease_until >= now
        });
        let all_done = shards.iter().all(|s| s.done);
        if all_done || (stopping && local.is_empty() && !held_elsewhere) {
            let outcome = if b.cancel_requested {
                BatchOutcome::Cancelled
            } else if all_done {
                BatchOutcome::Completed
            } else {
                BatchOutcome::Expired
            };
            return self.finish(b, outcome).await;
        }
        if stopping || self.0.draining.load(Ordering::SeqCst) {
            return Ok(());
        }
        for s in shards
            .iter()
            .filter(|s| !s.done && !local.contains(&s.shard_no))
        {
            // One spare shard beyond the limit may run; the shared row slots
            // bound the engine's load, and the spare fills the slots that a
            // finishing shard's tail leaves idle.
            if self.running_shards() > self.0.settings.max_running_shards {
                break;
            }
            if s.owner.is_some() && s.lease_until >= now {
                continue;
            }
            let lease = self.0.settings.runner.lease.as_millis() as i64;
            let Some(claimed) = shards::claim(
                &self.0.db,
                &b.batch_id,
                s.shard_no,
                &self.0.owner,
                now_ms(),
                lease,
                false,
            )
            .await?
            else {
                continue;
            };
            let input = match self.input(b).await {
                Ok(i) => i,
                Err(
                    e @ (BatchError::NotFound { .. }
                    | BatchError::Storage(StorageError::NotFound(_))),
                ) => {
                    // The input vanished from storage behind our back: the
                    // batch cannot run; say so rather than retry forever.
                    self.0
                        .cp
                        .batch_command(
                            &b.batch_id,
                            BatchCommand::Fail {
                                code: ErrorCode::InputFileMissing.as_str().into(),
                                message: e.to_string(),
                            },
                            &meta(WORKER_ACTOR, None),
                        )
                        .await?;
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            self.spawn_runner(b, claimed, input, exec.clone());
        }
        Ok(())
    }

    async fn input(&self, b: &BatchView) -> Result<Arc<Vec<u8>>, BatchError> {
        if let Some(i) = self.0.inputs.lock().expect("inputs lock").get(&b.batch_id) {
            return Ok(i.clone());
        }
        let f = files::get(&self.0.db, &b.input_file_id)
            .await?
            .ok_or_else(|| BatchError::NotFound {
                what: "file",
                id: b.input_file_id.to_string(),
            })?;
        let bytes = Arc::new(self.0.storage.get(&f.object_key).await?);
        self.0
            .inputs
            .lock()
            .expect("inputs lock")
            .insert(b.batch_id.clone(), bytes.clone());
        Ok(bytes)
    }

    fn spawn_runner(
        &self,
        b: &BatchView,
        shard: shards::Shard,
        input: Arc<Vec<u8>>,
        exec: Arc<dyn RowExecutor>,
    ) {
        let (tx, rx) = watch::channel(Stop::Run);
        let key = (b.batch_id.clone(), shard.shard_no);
        self.0
            .running
            .lock()
            .expect("running lock")
            .insert(key.clone(), tx);
        let this = self.clone();
        let batch = BatchRef {
            batch_id: b.batch_id.clone(),
            tenant: b.tenant.clone(),
            endpoint: b.endpoint.clone(),
        };
        tokio::spawn(async move {
            let (n, epoch, from) = (shard.shard_no, shard.epoch, shard.next_row);
            tracing::info!(batch_id = %batch.batch_id, shard = n, epoch, from_row = from, "shard claimed");
            let t0 = Instant::now();
            let r = run_shard(
                &this.0.db,
                &this.0.storage,
                exec,
                this.0.settings.runner,
                &batch,
                shard,
                &input,
                rx,
                this.0.permits.clone(),
            )
            .await;
            match r {
                Ok(ShardEnd::Done) => tracing::info!(
                    batch_id = %batch.batch_id, shard = n, ms = t0.elapsed().as_millis() as u64, "shard done"
                ),
                Ok(ShardEnd::Stopped) => {
                    tracing::info!(batch_id = %batch.batch_id, shard = n, "shard stopped at its checkpoint")
                }
                Err(e @ BatchError::Fenced { .. }) => {
                    tracing::warn!(batch_id = %batch.batch_id, shard = n, error = %e, "runner superseded")
                }
                Err(e) => {
                    tracing::warn!(batch_id = %batch.batch_id, shard = n, error = %e, "shard run failed")
                }
            }
            this.0.running.lock().expect("running lock").remove(&key);
            this.0.wake.notify_one();
        });
    }

    async fn finish(&self, b: &BatchView, outcome: BatchOutcome) -> Result<(), BatchError> {
        let worker = meta(WORKER_ACTOR, None);
        self.0
            .cp
            .batch_command(&b.batch_id, BatchCommand::Finalize, &worker)
            .await?;
        let input = self.input(b).await?;
        let f = finalize(
            &self.0.db,
            &self.0.storage,
            &b.batch_id,
            &b.tenant,
            &input,
            outcome,
        )
        .await?;
        let reason = match outcome {
            BatchOutcome::Expired => Some(format!(
                "the completion window of {} ended",
                b.completion_window
            )),
            _ => None,
        };
        self.0
            .cp
            .batch_command(
                &b.batch_id,
                BatchCommand::End {
                    outcome,
                    output_file_id: f.output_file_id,
                    error_file_id: f.error_file_id,
                    completed: f.completed,
                    failed: f.failed,
                },
                &meta(WORKER_ACTOR, reason),
            )
            .await?;
        tracing::info!(batch_id = %b.batch_id, ?outcome, completed = f.completed, failed = f.failed, "batch ended");
        self.0
            .inputs
            .lock()
            .expect("inputs lock")
            .remove(&b.batch_id);
        // The segments are folded into the result files; drop them.
        for s in shards::list(&self.0.db, &b.batch_id).await? {
            for seg in s.segments {
                let _ = self.0.storage.delete(&seg.key).await;
            }
        }
        Ok(())
    }

    /// Stops taking shard work, lets rows in flight finish for up to `grace`,
    /// then abandons the rest; every runner commits what completed and
    /// releases its shard before this returns (or `grace` + 5 s pass).
    pub async fn drain(&self, grace: Duration) {
        self.0.draining.store(true, Ordering::SeqCst);
        self.0.wake.notify_one();
        let signal = |stop: Stop| {
            for tx in self.0.running.lock().expect("running lock").values() {
                tx.send_replace(stop);
            }
        };
        signal(Stop::Drain);
        let until = Instant::now() + grace;
        while self.running_shards() > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        signal(Stop::Now);
        let until = Instant::now() + Duration::from_secs(5);
        while self.running_shards() > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        if self.running_shards() > 0 {
            tracing::warn!(
                shards = self.running_shards(),
                "shards still running after drain; their leases will expire"
            );
        }
    }
}
