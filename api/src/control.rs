//! The API's side of the control plane: opening the store, the first-start
//! bootstrap (default deployment and revision as events), loading a revision's
//! artifact next to the primary, and routing each request to a revision.
//!
//! Routing reads only in-memory read models: no database round trip sits on the
//! request path.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sha2::{Digest, Sha256};
use stoker_controlplane::batch::{Batches, Storage};
use stoker_controlplane::domain::{ArtifactCheck, ExecutorCommand};
use stoker_controlplane::projection::ExecutorStatus;
use stoker_controlplane::requestlog::{RequestLog, RequestLogConfig};
use stoker_controlplane::service::{ControlPlane, RevisionSpec, RouteError, meta, route_in};
use stoker_controlplane::store::EventStore;
use stoker_controlplane::{controller, projection::Views};
use stoker_executor::{Engine, LoadOptions, Model, RequestLimits};
use stoker_schemas::events::{DeploymentLimits, SchedulerPolicy};

use crate::config::Config;
use crate::error::ApiError;
use crate::state::{AppState, Provenance, Served, default_revision_id};

/// The actor of what `stoker serve` records by itself at start.
pub const SYSTEM_ACTOR: &str = "stoker-serve";

/// The control plane handles the API holds.
#[derive(Clone, Debug)]
pub struct Control {
    pub cp: ControlPlane,
    pub log: RequestLog,
    /// The deployment `stoker serve` serves by default.
    pub deployment_id: String,
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
        deployment_id: config.deployment_id(),
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

/// Puts in force the capacity profile recorded for the primary artifact (or
/// the static limits when there is none). Reads only the in-memory views.
pub async fn apply_capacity_profile(state: &AppState) {
    let (Some(c), Some(served)) = (state.control(), state.served()) else {
        return;
    };
    // Under the read lock, without cloning every read model.
    let profile = {
        let views = c.cp.projector().views().await;
        crate::envelope::select(&views, &served.provenance.sha256)
    };
    state.admission.set_profile(profile);
}

/// Re-applies the capacity profile after each read-model refresh, so a
/// profile recorded by another API instance takes effect here too.
pub fn spawn_profile_watch(state: &AppState) {
    let every = Duration::from_millis(state.config.control.refresh_interval_ms.max(50));
    let state = state.clone();
    tokio::spawn(async move {
        let mut t = tokio::time::interval(every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            t.tick().await;
            apply_capacity_profile(&state).await;
        }
    });
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

/// First start: records the default deployment and registers the primary
/// model as its revision. Later starts find both and record nothing. When the
/// deployment serves another revision whose artifact is a file here, that
/// artifact is loaded too, so a restart keeps serving what the events say.
pub async fn bootstrap(state: &AppState, c: &Control) -> anyhow::Result<()> {
    let primary = state.served().context("the primary model is not loaded")?;
    let dep = c.deployment_id.clone();
    let m = meta(SYSTEM_ACTOR, Some("first start of stoker serve".into()));
    let views = c.cp.views().await;
    if !views.deployments.contains_key(&dep) {
        let limits = default_limits(&state.config, &primary.limits);
        c.cp.create_deployment(&dep, limits, &m).await?;
    }
    let sha = primary.provenance.sha256.clone();
    let has_primary = views.revisions_of(&dep).any(|r| r.model_sha256 == sha);
    if !has_primary {
        let info = primary.engine.info();
        let spec = RevisionSpec {
            deployment_id: dep.clone(),
            revision_id: if state.config.control.revision.is_empty() {
                default_revision_id(&sha)
            } else {
                state.config.control.revision.clone()
            },
            model_uri: file_uri(&state.config.model),
            model_sha256: sha.clone(),
            tokenizer_hash: info.identity.tokenizer_sha256.clone(),
            chat_template_hash: info.identity.chat_template_sha256.clone(),
            precision: info.identity.precision.clone(),
            runtime_version: runtime_version(),
        };
        c.cp.register_revision(spec, ArtifactCheck::Verified { sha256: sha }, &m)
            .await?;
    }
    // Load what the events route to but this process has not loaded yet.
    let views = c.cp.views().await;
    // An API instance in the distributed mode loads no engines: executors do.
    let loads_engines = state.remote.get().is_none();
    for r in needed_revisions(&views) {
        if loads_engines && state.model_by_sha(&r.1).is_none() {
            let path = path_of(&r.0);
            match load_artifact(state, &path).await {
                Ok(_) => tracing::info!(uri = %r.0, "loaded a routed revision's artifact"),
                Err(e) => {
                    tracing::warn!(uri = %r.0, error = %format!("{e:#}"), "cannot load a routed revision's artifact")
                }
            }
        }
    }
    Ok(())
}

/// [`bootstrap`] and [`register_executor`], retried when another process
/// sharing the store wrote first (a conflict means: re-read and decide again).
pub async fn bootstrap_with_retry(
    state: &AppState,
    c: &Control,
    registers_executor: bool,
) -> anyhow::Result<()> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let r = match bootstrap(state, c).await {
            Ok(()) if registers_executor => register_executor(state, c).await,
            Ok(()) => Ok(()),
            Err(e) => Err(e),
        };
        match r {
            Ok(()) => return Ok(()),
            Err(e) if attempt < 5 => {
                tracing::warn!(attempt, error = %format!("{e:#}"), "bootstrap lost a race; re-reading");
                c.cp.refresh().await?;
                tokio::time::sleep(Duration::from_millis(20 * attempt)).await;
            }
            Err(e) => return Err(e.context("recording the default deployment and executor")),
        }
    }
}

/// (model_uri, sha256) of every revision some deployment routes to now.
fn needed_revisions(v: &Views) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for d in v.deployments.values().filter(|d| !d.retired) {
        let mut revs: Vec<&str> = d.serving_revision.iter().map(String::as_str).collect();
        if let Some(r) = v.active_rollout(&d.deployment_id) {
            revs.push(&r.to_revision);
        }
        for rev in revs {
            if let Some(r) = v.revisions.get(&Views::revision_key(&d.deployment_id, rev)) {
                out.push((r.model_uri.clone(), r.model_sha256.clone()));
            }
        }
    }
    out
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

/// Loads and warms up the model at `path` next to the primary, unless an
/// artifact with the same hash is loaded already.
pub async fn load_artifact(state: &AppState, path: &Path) -> anyhow::Result<Arc<Served>> {
    let st = state.clone();
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || -> anyhow::Result<Arc<Served>> {
        let model = Model::load(&path, LoadOptions::default())
            .with_context(|| format!("loading model {}", path.display()))?;
        if let Some(s) = st.model_by_sha(&model.identity.sha256) {
            return Ok(s);
        }
        let engine = Arc::new(
            Engine::start(model, st.config.engine_config()).context("starting the engine")?,
        );
        engine.warm_up().context("warm-up generation")?;
        Ok(st.install(engine))
    })
    .await
    .context("model loader panicked")?
}

/// Where one request goes: the loaded artifact, the revision's provenance, and
/// the deployment's limits applied over the model's.
#[derive(Clone)]
pub struct Target {
    pub served: Arc<Served>,
    pub provenance: Provenance,
    pub limits: RequestLimits,
    pub deployment_id: String,
    pub rollout_id: Option<String>,
}

fn clamp(model: usize, deployment: u32) -> usize {
    if deployment == 0 {
        model
    } else {
        model.min(deployment as usize)
    }
}

/// Routes a request for `model` (a deployment id; the primary model's id,
/// revision or sha256 name the default deployment) with routing key `key`.
pub async fn target(state: &AppState, model: &str, key: &str) -> Result<Target, ApiError> {
    let primary = state.ready()?;
    let Some(c) = state.control() else {
        return Err(ApiError::Internal("the control plane is not open".into()));
    };
    let views = c.cp.projector().views().await;
    let p = &primary.provenance;
    let dep = if views.deployments.contains_key(model) {
        model
    } else if model == p.model_id || model == p.revision || model == p.sha256 {
        c.deployment_id.as_str()
    } else {
        return Err(ApiError::ModelNotFound(crate::validate::truncate(
            model, 128,
        )));
    };
    let decision = route_in(&views, dep, key).map_err(|e| match e {
        RouteError::UnknownDeployment | RouteError::Retired => {
            ApiError::ModelNotFound(crate::validate::truncate(model, 128))
        }
        RouteError::NoServingRevision => ApiError::NotReady {
            message: format!("deployment `{dep}` has no serving revision yet"),
            retry_after: state.admission.retry_hint(),
        },
    })?;
    let rev = views
        .revisions
        .get(&Views::revision_key(dep, &decision.revision_id))
        .ok_or_else(|| {
            ApiError::Internal(format!(
                "deployment {dep} routes to unregistered revision {}",
                decision.revision_id
            ))
        })?;
    let served = state
        .model_by_sha(&rev.model_sha256)
        .ok_or_else(|| ApiError::NotReady {
            message: format!(
                "revision `{}` of deployment `{dep}` is not loaded on this server",
                decision.revision_id
            ),
            retry_after: state.admission.retry_hint(),
        })?;
    let d = &views.deployments[dep];
    let mut limits = served.limits;
    limits.context_window = clamp(limits.context_window, d.limits.context_window);
    limits.max_input_tokens = clamp(limits.max_input_tokens, d.limits.max_input_tokens);
    limits.max_output_tokens = clamp(limits.max_output_tokens, d.limits.max_output_tokens);
    let provenance = Provenance::of_revision(
        dep.to_owned(),
        decision.revision_id.clone(),
        rev.model_sha256.clone(),
        state.config.executor_id.clone(),
    );
    Ok(Target {
        served,
        provenance,
        limits,
        deployment_id: dep.to_owned(),
        rollout_id: decision.rollout_id,
    })
}

/// Records this process's executor as registered. A previous life that never
/// recorded `drained` (a crash, a kill) is recorded as lost first.
pub async fn register_executor(state: &AppState, c: &Control) -> anyhow::Result<()> {
    let id = state.config.executor_id.clone();
    let status = c.cp.views().await.executors.get(&id).map(|e| e.status);
    if matches!(
        status,
        Some(ExecutorStatus::Active | ExecutorStatus::Draining)
    ) {
        c.cp.executor_command(
            &id,
            ExecutorCommand::MarkLost,
            &meta(
                SYSTEM_ACTOR,
                Some("the previous process ended without draining".into()),
            ),
        )
        .await?;
    }
    let primary = state.served().context("the primary model is not loaded")?;
    let revision_id =
        c.cp.views()
            .await
            .revisions_of(&c.deployment_id)
            .find(|r| r.model_sha256 == primary.provenance.sha256)
            .map(|r| r.revision_id.clone())
            .unwrap_or_else(|| primary.provenance.revision.clone());
    c.cp.executor_command(
        &id,
        ExecutorCommand::Register {
            executor_id: id.clone(),
            deployment_id: c.deployment_id.clone(),
            revision_id,
        },
        &meta(SYSTEM_ACTOR, Some("stoker serve started".into())),
    )
    .await?;
    Ok(())
}

/// After a drain finished: records `drained` when an operator asked for it
/// (the executor is `draining`); a plain SIGTERM drains and records it too.
pub async fn record_drained(state: &AppState, c: &Control) {
    let id = state.config.executor_id.clone();
    let status = c.cp.views().await.executors.get(&id).map(|e| e.status);
    let m = meta(SYSTEM_ACTOR, Some("in-flight requests finished".into()));
    let r = match status {
        Some(ExecutorStatus::Draining) => {
            c.cp.executor_command(&id, ExecutorCommand::MarkDrained, &m)
                .await
        }
        Some(ExecutorStatus::Active) => {
            let drain = meta(SYSTEM_ACTOR, Some("shutdown signal".into()));
            match c
                .cp
                .executor_command(&id, ExecutorCommand::Drain, &drain)
                .await
            {
                Ok(_) => {
                    c.cp.executor_command(&id, ExecutorCommand::MarkDrained, &m)
                        .await
                }
                Err(e) => Err(e),
            }
        }
        _ => return,
    };
    if let Err(e) = r {
        tracing::warn!(error = %e, "could not record the drain");
    }
    if let Err(e) = c.log.flush().await {
        tracing::warn!(error = %e, "could not flush the request log");
    }
}
