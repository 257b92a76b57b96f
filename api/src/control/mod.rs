//! The API's handles on the control plane ([`Control`]): opening and
//! migrating the store, the request-log writer, the batch service, the
//! background refresh and rollout controller, and the facts about artifacts
//! that registration records (URIs, hashes, default limits). What uses the
//! server's state lives above it: request routing in `edge/routing.rs`,
//! artifact loading in `edge/artifacts.rs`, the first-start bootstrap in
//! `roles/bootstrap.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use sha2::{Digest, Sha256};
use stoker_controlplane::batch::{Batches, Storage};
use stoker_controlplane::controller;
use stoker_controlplane::domain::ArtifactCheck;
use stoker_controlplane::requestlog::{RequestLog, RequestLogConfig};
use stoker_controlplane::service::ControlPlane;
use stoker_controlplane::store::EventStore;
use stoker_executor::RequestLimits;
use stoker_schemas::events::{DeploymentLimits, SchedulerPolicy};
use stoker_schemas::ids::DeploymentId;

use crate::config::Config;

/// The actor of what `stoker serve` records by itself at start.
pub const SYSTEM_ACTOR: &str = "stoker-serve";

/// The control plane handles the API holds.
#[derive(Clone, Debug)]
pub struct Control {
    pub cp: ControlPlane,
    pub log: RequestLog,
    /// The deployment `stoker serve` serves by default.
    pub deployment_id: DeploymentId,
    /// Files and batches.
    pub batches: Batches,
}

/// Opens (and migrates) the configured store and starts the request-log writer.
pub async fn open(config: &Config) -> anyhow::Result<Control> {
    let url = config.store_url();
    let store = EventStore::connect(&url)
        .await
        .with_context(|| format!("opening the event store {}", redact(&url)))?;
    store.migrate().await.context("migrating the event store")?;
    let deployment = config.deployment_id();
    let deployment_id: DeploymentId = deployment.parse().with_context(|| {
        format!(
            "the default deployment {deployment:?} (control.deployment, else the model id) \
             cannot name a deployment; set control.deployment"
        )
    })?;
    let cp = ControlPlane::open(store.clone())
        .await
        .context("loading the read models")?;
    let log = RequestLog::spawn(
        store.db(),
        RequestLogConfig {
            queue_capacity: config.control.request_log_queue.max(1),
            ..RequestLogConfig::default()
        },
    );
    let storage_url = config.batch_storage_url();
    let storage = Storage::open(&storage_url)
        .with_context(|| format!("opening batch storage {}", redact(&storage_url)))?;
    let owner = format!(
        "{}-{}",
        config.executor_id,
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let batches = Batches::new(cp.clone(), storage, config.batch_settings(), owner);
    Ok(Control {
        cp,
        log,
        deployment_id,
        batches,
    })
}

/// A URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_owned(),
    }
}

/// Starts the background work: read-model refresh and the rollout controller.
pub fn spawn_background(c: &Control, config: &Config) {
    let refresh = Duration::from_millis(config.control.refresh_interval_ms.max(50));
    let cp = c.cp.clone();
    tokio::spawn(async move {
        let mut t = tokio::time::interval(refresh);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            t.tick().await;
            if let Err(e) = cp.refresh().await {
                tracing::warn!(error = %e, "read-model refresh failed");
            }
        }
    });
    if config.control.rollout_controller_interval_ms > 0 {
        let every = Duration::from_millis(config.control.rollout_controller_interval_ms);
        tokio::spawn(controller::run(c.cp.clone(), c.log.clone(), every));
    }
}

/// The limits a new deployment gets from what the primary model serves.
pub fn default_limits(config: &Config, l: &RequestLimits) -> DeploymentLimits {
    DeploymentLimits {
        context_window: l.context_window as u32,
        max_input_tokens: l.max_input_tokens as u32,
        max_output_tokens: l.max_output_tokens as u32,
        max_waiting_requests: config.admission.max_waiting_requests as u32,
        max_waiting_tokens: config.admission.max_waiting_tokens as u64,
        interactive_reserve_share: f64::from(config.engine.interactive_reserve_share),
        scheduler_policy: SchedulerPolicy::InteractiveFirst,
    }
}

pub fn runtime_version() -> String {
    format!("stoker {} (candle cpu)", env!("CARGO_PKG_VERSION"))
}

/// `file://` + the absolute path.
pub fn file_uri(p: &Path) -> String {
    let abs = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    format!("file://{}", abs.display())
}

/// The local path a model URI names (`file://…` or a plain path).
pub fn path_of(uri: &str) -> PathBuf {
    PathBuf::from(uri.strip_prefix("file://").unwrap_or(uri))
}

/// Hashes the artifact at `path` on a blocking thread: what registration verifies.
pub async fn check_artifact(path: &Path) -> ArtifactCheck {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        if path.is_dir() {
            // A directory's identity is its manifest (executor's `hf::manifest`).
            return match stoker_executor::model::hf::HfArtifact::open(&path) {
                Ok(a) => ArtifactCheck::Verified {
                    sha256: a.manifest.sha256,
                },
                Err(e) => ArtifactCheck::Unreadable(e.to_string()),
            };
        }
        let mut f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ArtifactCheck::Absent,
            Err(e) => return ArtifactCheck::Unreadable(e.to_string()),
        };
        let mut h = Sha256::new();
        match std::io::copy(&mut f, &mut h) {
            Ok(_) => ArtifactCheck::Verified {
                sha256: hex::encode(h.finalize()),
            },
            Err(e) => ArtifactCheck::Unreadable(e.to_string()),
        }
    })
    .await
    .unwrap_or_else(|e| ArtifactCheck::Unreadable(e.to_string()))
}
