//! `Batches`: what the Files and Batch APIs call, and the worker's shared
//! state. Every operation is scoped to a tenant: another tenant's file or
//! batch does not exist for you.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stoker_schemas::events::BatchCreated;
use stoker_schemas::ids::{BatchId, FileId};
use tokio::sync::{Notify, watch};

use super::files::{self, FileRecord};
use super::input::{self, InputLimits};
use super::runner::{RunnerConfig, Stop};
use super::storage::Storage;
use super::{BatchError, now_ms, shards};
use crate::domain::BatchCommand;
use crate::projection::BatchView;
use crate::service::{ControlPlane, meta};
use crate::store::Db;

/// How the batch path is sized.
#[derive(Clone, Copy, Debug)]
pub struct BatchSettings {
    pub limits: InputLimits,
    /// Rows per shard.
    pub shard_rows: u64,
    /// Estimated tokens that all open batches together may hold.
    pub max_backlog_tokens: u64,
    pub runner: RunnerConfig,
    /// Shards this process runs at once, plus one spare: their rows share
    /// `row_concurrency × max_running_shards` slots (at most `row_concurrency`
    /// per shard), so the spare keeps the slots busy while another shard's
    /// last rows finish.
    pub max_running_shards: usize,
    /// How often the worker looks for work.
    pub poll_interval: Duration,
    /// Longest completion window accepted, in hours.
    pub max_window_hours: u64,
}

impl Default for BatchSettings {
    fn default() -> Self {
        BatchSettings {
            limits: InputLimits {
                max_bytes: 100 << 20,
                max_lines: 50_000,
            },
            shard_rows: 100,
            max_backlog_tokens: 50_000_000,
            runner: RunnerConfig {
                row_concurrency: 8,
                checkpoint_rows: 32,
                checkpoint_interval: Duration::from_secs(1),
                lease: Duration::from_secs(15),
            },
            max_running_shards: 2,
            poll_interval: Duration::from_millis(250),
            max_window_hours: 168,
        }
    }
}

/// `POST /v1/batches`, checked by the caller for shape.
#[derive(Clone, Debug)]
pub struct CreateBatch {
    /// Parsed by the caller with [`file_id`], so a malformed id is refused
    /// like an unknown one.
    pub input_file_id: FileId,
    pub endpoint: String,
    pub completion_window: String,
    pub metadata: BTreeMap<String, String>,
}

/// A batch with its live row counts.
#[derive(Clone, Debug)]
pub struct Listed {
    pub view: BatchView,
    pub completed: u64,
    pub failed: u64,
}

pub(super) struct Inner {
    pub cp: ControlPlane,
    pub db: Db,
    pub storage: Storage,
    pub settings: BatchSettings,
    /// This process's name on the leases it takes.
    pub owner: String,
    /// Runners of this process: (batch, shard) → their stop signal.
    pub running: Mutex<HashMap<(BatchId, u64), watch::Sender<Stop>>>,
    /// Input files of running batches, read once.
    pub inputs: Mutex<HashMap<BatchId, Arc<Vec<u8>>>>,
    /// Wakes the worker early (a batch was created or cancelled, a shard ended).
    pub wake: Notify,
    /// No new shard work (draining).
    pub draining: std::sync::atomic::AtomicBool,
    /// Rows in the engine's batch lane at once, across this process's shards.
    pub permits: Arc<tokio::sync::Semaphore>,
}

/// A cheap-to-clone handle on the batch path.
#[derive(Clone)]
pub struct Batches(pub(super) Arc<Inner>);

impl std::fmt::Debug for Batches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batches")
            .field("owner", &self.0.owner)
            .finish()
    }
}

fn not_found(what: &'static str, id: &str) -> BatchError {
    BatchError::NotFound {
        what,
        id: id.to_owned(),
    }
}

/// Parses a file id a client sent: a malformed one names no file, so it is
/// refused like an unknown one.
pub fn file_id(id: &str) -> Result<FileId, BatchError> {
    id.parse().map_err(|_| not_found("file", id))
}

/// Parses a batch id a client sent; a malformed one is refused like an unknown one.
pub fn batch_id(id: &str) -> Result<BatchId, BatchError> {
    id.parse().map_err(|_| not_found("batch", id))
}

impl Batches {
    pub fn new(cp: ControlPlane, storage: Storage, settings: BatchSettings, owner: String) -> Self {
        let db = cp.store().db();
        Batches(Arc::new(Inner {
            cp,
            db,
            storage,
            settings,
            owner,
            running: Mutex::new(HashMap::new()),
            inputs: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            draining: std::sync::atomic::AtomicBool::new(false),
            permits: Arc::new(tokio::sync::Semaphore::new(
                settings.runner.row_concurrency.max(1) * settings.max_running_shards.max(1),
            )),
        }))
    }

    pub fn settings(&self) -> &BatchSettings {
        &self.0.settings
    }

    pub fn storage(&self) -> &Storage {
        &self.0.storage
    }

    // ---- files ----

    /// Stores an upload after checking every line's structure; on any refusal
    /// nothing is stored.
    pub async fn upload(
        &self,
        tenant: &str,
        filename: &str,
        purpose: &str,
        bytes: Vec<u8>,
    ) -> Result<FileRecord, BatchError> {
        if purpose != "batch" {
            return Err(BatchError::Invalid {
                message: format!(
                    "`purpose` must be \"batch\"; {:?} is not supported",
                    input_clip(purpose)
                ),
                param: "purpose",
            });
        }
        let summary = input::validate(&bytes, None, self.0.settings.limits)?;
        let id = FileId::generate();
        let key = format!("files/{id}.jsonl");
        let record = FileRecord {
            id,
            tenant: tenant.to_owned(),
            filename: filename.to_owned(),
            purpose: purpose.to_owned(),
            bytes: bytes.len() as u64,
            lines: summary.lines as u64,
            object_key: key.clone(),
            endpoint: Some(summary.endpoint),
            estimated_tokens: summary.estimated_tokens,
            created_at: now_ms(),
        };
        self.0.storage.put(&key, bytes).await?;
        if let Err(e) = files::put(&self.0.db, &record).await {
            let _ = self.0.storage.delete(&key).await;
            return Err(e);
        }
        Ok(record)
    }

    pub async fn file(&self, tenant: &str, id: &FileId) -> Result<FileRecord, BatchError> {
        match files::get(&self.0.db, id).await? {
            Some(f) if f.tenant == tenant => Ok(f),
            _ => Err(not_found("file", id)),
        }
    }

    pub async fn file_content(&self, tenant: &str, id: &FileId) -> Result<Vec<u8>, BatchError> {
        let f = self.file(tenant, id).await?;
        Ok(self.0.storage.get(&f.object_key).await?)
    }

    /// Bytes of every file `tenant` stores.
    pub async fn tenant_file_bytes(&self, tenant: &str) -> Result<u64, BatchError> {
        files::tenant_bytes(&self.0.db, tenant).await
    }

    pub async fn files(&self, tenant: &str, limit: u32) -> Result<Vec<FileRecord>, BatchError> {
        files::list(&self.0.db, tenant, limit).await
    }

    /// Deletes a file unless an open batch reads it.
    pub async fn delete_file(&self, tenant: &str, id: &FileId) -> Result<(), BatchError> {
        let f = self.file(tenant, id).await?;
        {
            let views = self.0.cp.projector().views().await;
            if let Some(b) = views
                .batches
                .values()
                .find(|b| &b.input_file_id == id && b.is_open())
            {
                return Err(BatchError::InUse {
                    file_id: id.clone(),
                    batch_id: b.batch_id.clone(),
                });
            }
        }
        files::delete(&self.0.db, id).await?;
        self.0.storage.delete(&f.object_key).await?;
        Ok(())
    }

    // ---- batches ----

    /// Accepts a batch: its file re-checked against the endpoint, the backlog
    /// checked, the `BatchCreated` event written, the shards created, the
    /// `BatchStarted` event written.
    pub async fn create(
        &self,
        tenant: &str,
        actor: &str,
        req: CreateBatch,
    ) -> Result<Listed, BatchError> {
        let s = &self.0.settings;
        if !input::ENDPOINTS.contains(&req.endpoint.as_str()) {
            return Err(BatchError::Invalid {
                message: format!(
                    "`endpoint` must be /v1/chat/completions or /v1/completions, not {:?}",
                    input_clip(&req.endpoint)
                ),
                param: "endpoint",
            });
        }
        let hours = parse_window(&req.completion_window)
            .filter(|h| (1..=s.max_window_hours).contains(h))
            .ok_or_else(|| BatchError::Invalid {
                message: format!(
                    "`completion_window` must be a number of hours such as \"24h\" (1h to {}h)",
                    s.max_window_hours
                ),
                param: "completion_window",
            })?;
        let file = self.file(tenant, &req.input_file_id).await?;
        if file.purpose != "batch" {
            return Err(BatchError::Invalid {
                message: format!(
                    "file {:?} has purpose {:?}; a batch reads a file uploaded with purpose \"batch\"",
                    file.id, file.purpose
                ),
                param: "input_file_id",
            });
        }
        let bytes = self.0.storage.get(&file.object_key).await?;
        let summary = input::validate(&bytes, Some(&req.endpoint), s.limits)?;
        let estimate = summary.estimated_tokens;
        if estimate > s.max_backlog_tokens {
            return Err(BatchError::Invalid {
                message: format!(
                    "the batch needs about {estimate} tokens, more than the whole backlog ceiling \
                     of {}; split the file",
                    s.max_backlog_tokens
                ),
                param: "input_file_id",
            });
        }
        let backlog = self.backlog_tokens().await;
        if backlog + estimate > s.max_backlog_tokens {
            return Err(BatchError::BacklogFull {
                backlog,
                estimate,
                ceiling: s.max_backlog_tokens,
                retry_after_secs: 30,
            });
        }
        let batch_id = BatchId::generate();
        let created = BatchCreated {
            batch_id: batch_id.clone(),
            tenant: tenant.to_owned(),
            input_file_id: file.id.clone(),
            endpoint: req.endpoint,
            completion_window: req.completion_window,
            expires_at: now_ms() / 1000 + (hours * 3600) as i64,
            total_rows: summary.lines as u64,
            shard_rows: s.shard_rows.max(1),
            estimated_tokens: estimate,
            metadata: req.metadata,
        };
        let m = meta(actor, None);
        self.0
            .cp
            .batch_command(&batch_id, BatchCommand::Create(created), &m)
            .await?;
        self.start(&batch_id, summary.lines as u64).await?;
        self.0.wake.notify_one();
        self.get(tenant, &batch_id).await
    }

    /// Creates the shards and records the start (idempotent).
    pub(super) async fn start(&self, batch_id: &str, total_rows: u64) -> Result<(), BatchError> {
        let n = shards::create(
            &self.0.db,
            batch_id,
            total_rows,
            self.0.settings.shard_rows.max(1),
            now_ms(),
        )
        .await?;
        self.0
            .cp
            .batch_command(
                batch_id,
                BatchCommand::Start { shards: n },
                &meta(super::WORKER_ACTOR, None),
            )
            .await?;
        Ok(())
    }

    /// Estimated tokens of every open batch.
    pub async fn backlog_tokens(&self) -> u64 {
        let views = self.0.cp.projector().views().await;
        views
            .batches
            .values()
            .filter(|b| b.is_open())
            .map(|b| b.estimated_tokens)
            .sum()
    }

    async fn counts(&self, v: &BatchView) -> Result<(u64, u64), BatchError> {
        match (v.completed, v.failed) {
            (Some(c), Some(f)) => Ok((c, f)),
            _ => shards::progress(&self.0.db, &v.batch_id).await,
        }
    }

    pub async fn get(&self, tenant: &str, id: &BatchId) -> Result<Listed, BatchError> {
        let view = {
            let views = self.0.cp.projector().views().await;
            match views.batches.get(id.as_str()) {
                Some(b) if b.tenant == tenant => b.clone(),
                _ => return Err(not_found("batch", id)),
            }
        };
        let (completed, failed) = self.counts(&view).await?;
        Ok(Listed {
            view,
            completed,
            failed,
        })
    }

    /// A tenant's batches, newest first, after the batch `after` (paging).
    /// Returns the page and whether more follow.
    pub async fn list(
        &self,
        tenant: &str,
        after: Option<&BatchId>,
        limit: usize,
    ) -> Result<(Vec<Listed>, bool), BatchError> {
        let mut mine: Vec<BatchView> = {
            let views = self.0.cp.projector().views().await;
            views
                .batches
                .values()
                .filter(|b| b.tenant == tenant)
                .cloned()
                .collect()
        };
        mine.sort_by(|a, b| (b.created_at, &b.batch_id).cmp(&(a.created_at, &a.batch_id)));
        let start = match after {
            Some(a) => match mine.iter().position(|b| &b.batch_id == a) {
                Some(i) => i + 1,
                None => return Err(not_found("batch", a)),
            },
            None => 0,
        };
        let page: Vec<BatchView> = mine.iter().skip(start).take(limit).cloned().collect();
        let has_more = mine.len() > start + page.len();
        let mut out = Vec::with_capacity(page.len());
        for view in page {
            let (completed, failed) = self.counts(&view).await?;
            out.push(Listed {
                view,
                completed,
                failed,
            });
        }
        Ok((out, has_more))
    }

    /// Asks a batch to stop; the worker stops its runners and finalizes.
    pub async fn cancel(
        &self,
        tenant: &str,
        actor: &str,
        id: &BatchId,
    ) -> Result<Listed, BatchError> {
        self.get(tenant, id).await?;
        self.0
            .cp
            .batch_command(id, BatchCommand::Cancel, &meta(actor, None))
            .await?;
        self.stop_runners(id, Stop::Now);
        self.0.wake.notify_one();
        self.get(tenant, id).await
    }

    /// Signals every local runner of `batch_id`.
    pub(super) fn stop_runners(&self, batch_id: &str, stop: Stop) {
        let running = self.0.running.lock().expect("running lock");
        for ((b, _), tx) in running.iter() {
            if b == batch_id {
                tx.send_replace(stop);
            }
        }
    }

    /// Shards this process is running now.
    pub fn running_shards(&self) -> usize {
        self.0.running.lock().expect("running lock").len()
    }
}

fn parse_window(w: &str) -> Option<u64> {
    w.strip_suffix('h')?.parse().ok()
}

fn input_clip(s: &str) -> String {
    s.chars().take(64).collect()
}
