//! What a server records about itself in the control plane when it starts
//! and stops: the default deployment and revision (first start only), the
//! other revisions' artifacts the events say it serves, its executor's
//! registration, and `drained` after a drain.

use std::time::Duration;

use anyhow::Context;
use stoker_controlplane::domain::{ArtifactCheck, ExecutorCommand};
use stoker_controlplane::projection::{ExecutorStatus, Views};
use stoker_controlplane::service::{RevisionSpec, meta};
use stoker_schemas::ids::{ExecutorId, RevisionId};

use crate::backend::default_revision_id;
use crate::control::{Control, SYSTEM_ACTOR, default_limits, file_uri, path_of, runtime_version};
use crate::edge::artifacts::load_artifact;
use crate::state::AppState;

/// First start: records the default deployment and registers the primary
/// model as its revision. Later starts find both and record nothing. When the
/// deployment serves another revision whose artifact is a file here, that
/// artifact is loaded too, so a restart keeps serving what the events say.
pub async fn bootstrap(state: &AppState, c: &Control) -> anyhow::Result<()> {
    let primary = state.served().context("the primary model is not loaded")?;
    let dep = c.deployment_id.clone();
    let m = meta(SYSTEM_ACTOR, Some("first start of stoker serve".into()));
    let views = c.cp.views().await;
    if !views.deployments.contains_key(dep.as_str()) {
        let limits = default_limits(&state.config, &primary.limits);
        c.cp.create_deployment(&dep, limits, &m).await?;
    }
    let sha = primary.provenance.sha256.clone();
    let has_primary = views.revisions_of(&dep).any(|r| r.model_sha256 == sha);
    if !has_primary {
        let info = primary.artifact.info();
        let spec = RevisionSpec {
            deployment_id: dep.clone(),
            revision_id: revision_id(state, &sha)?,
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
    let loads_engines = state.role.has_engine();
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
        let mut revs: Vec<&str> = d.serving_revision.iter().map(|r| r.as_str()).collect();
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

/// The primary model's revision id: `control.revision`, else the first 12
/// hex digits of its sha256.
fn revision_id(state: &AppState, sha: &str) -> anyhow::Result<RevisionId> {
    let configured = &state.config.control.revision;
    if configured.is_empty() {
        Ok(default_revision_id(sha).parse()?)
    } else {
        configured
            .parse()
            .with_context(|| format!("control.revision {configured:?}"))
    }
}

/// This process's executor id, from `executor_id` in its config.
fn executor_id(state: &AppState) -> anyhow::Result<ExecutorId> {
    let id = &state.config.executor_id;
    id.parse().with_context(|| format!("executor_id {id:?}"))
}

/// Records this process's executor as registered. A previous life that never
/// recorded `drained` (a crash, a kill) is recorded as lost first.
pub async fn register_executor(state: &AppState, c: &Control) -> anyhow::Result<()> {
    let id = executor_id(state)?;
    let status =
        c.cp.views()
            .await
            .executors
            .get(id.as_str())
            .map(|e| e.status);
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
            .map(|r| r.revision_id.to_string())
            .unwrap_or_else(|| primary.provenance.revision.clone());
    c.cp.executor_command(
        &id,
        ExecutorCommand::Register {
            executor_id: id.to_string(),
            deployment_id: c.deployment_id.to_string(),
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
    let Ok(id) = executor_id(state) else {
        // It could not have registered either.
        return;
    };
    let status =
        c.cp.views()
            .await
            .executors
            .get(id.as_str())
            .map(|e| e.status);
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
