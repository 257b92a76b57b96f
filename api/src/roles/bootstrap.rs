//! What a server records about itself in the control plane when it starts
//! and stops: the default deployment and revision (first start only), the
//! other revisions' artifacts the events say it serves, its executor's
//! registration, and `drained` after a drain.

use std::time::Duration;

use anyhow::Context;
use stoker_controlplane::domain::{ArtifactCheck, ExecutorCommand};
use stoker_controlplane::projection::{ExecutorStatus, RevisionView, Views};
use stoker_controlplane::service::{RevisionSpec, meta};
use stoker_schemas::ids::{DeploymentId, RevisionId};

use crate::backend::{Served, default_revision_id};
use crate::control::{Control, SYSTEM_ACTOR, default_limits, file_uri, path_of, runtime_version};
use crate::edge::artifacts::load_artifact;
use crate::state::AppState;

/// First start: records the default deployment and registers the primary
/// model as its revision. Later starts find both and record nothing, unless
/// the model is now served under another chat template ([`record_primary`]).
/// When the deployment serves another revision whose artifact is a file here,
/// that artifact is loaded too, so a restart keeps serving what the events say.
pub async fn bootstrap(state: &AppState, c: &Control) -> anyhow::Result<()> {
    let primary = state.served().context("the primary model is not loaded")?;
    let dep = c.deployment_id.clone();
    let m = meta(SYSTEM_ACTOR, Some("first start of stoker serve".into()));
    let views = c.cp.views().await;
    if !views.deployments.contains_key(dep.as_str()) {
        let limits = default_limits(&state.config, &primary.limits);
        c.cp.create_deployment(&dep, limits, &m).await?;
    }
    record_primary(state, c, primary, &views).await?;
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

/// Records the primary model as a revision of the default deployment unless
/// one already names it. A revision is the file and what shapes its text: the
/// same file under another chat template (`--chat-template`) or tokenizer is
/// another revision, so provenance never names a template that is not served.
/// When the deployment's serving revision is this same file under another
/// template, it is moved to the one this process serves (not during a
/// rollout: the rollout decides).
async fn record_primary(
    state: &AppState,
    c: &Control,
    primary: &Served,
    views: &Views,
) -> anyhow::Result<()> {
    let dep = &c.deployment_id;
    let ident = &primary.artifact.info().identity;
    let sha = &primary.provenance.sha256;
    let origin = primary.artifact.chat_template().origin().to_owned();
    let same_file = |r: &RevisionView| r.model_sha256 == *sha;
    let same = |r: &RevisionView| {
        same_file(r)
            && r.tokenizer_hash == ident.tokenizer_sha256
            && r.chat_template_hash == ident.chat_template_sha256
    };
    let known = views
        .revisions_of(dep)
        .filter(|r| same(r))
        .max_by_key(|r| r.registered_at)
        .map(|r| r.revision_id.clone());
    let first = views.revisions_of(dep).next().is_none();
    let revision = match known {
        Some(r) => r,
        None => {
            let revision_id = revision_id(state, views, dep, sha, &ident.chat_template_sha256)?;
            let reason = if first {
                "first start of stoker serve".to_owned()
            } else {
                format!("stoker serve started with {origin}")
            };
            let spec = RevisionSpec {
                deployment_id: dep.clone(),
                revision_id: revision_id.clone(),
                model_uri: file_uri(&state.config.model),
                model_sha256: sha.clone(),
                tokenizer_hash: ident.tokenizer_sha256.clone(),
                chat_template_hash: ident.chat_template_sha256.clone(),
                chat_template_origin: Some(origin.clone()),
                precision: ident.precision.clone(),
                runtime_version: runtime_version(),
            };
            let check = ArtifactCheck::Verified {
                sha256: sha.clone(),
            };
            c.cp.register_revision(spec, check, &meta(SYSTEM_ACTOR, Some(reason)))
                .await?;
            revision_id
        }
    };
    let views = c.cp.views().await;
    let Some(d) = views.deployments.get(dep.as_str()) else {
        return Ok(());
    };
    let serving = d
        .serving_revision
        .as_ref()
        .and_then(|s| views.revisions.get(&Views::revision_key(dep, s)));
    let stale = serving.is_some_and(|s| same_file(s) && !same(s));
    if stale && d.active_rollout.is_none() {
        let reason = format!(
            "stoker serve started with {origin} (template sha256 {})",
            &ident.chat_template_sha256[..ident.chat_template_sha256.len().min(12)]
        );
        c.cp.set_serving_revision(dep, &revision, &meta(SYSTEM_ACTOR, Some(reason)))
            .await?;
    } else if stale {
        tracing::warn!(
            deployment = %dep,
            "the serving revision names another chat template than this process serves; \
             a rollout is in progress, so it is left to the rollout"
        );
    }
    Ok(())
}

/// The id a newly recorded primary revision gets: `control.revision`, else
/// the first 12 hex digits of its sha256, or, when that id is taken by the
/// same file under another template, those digits and the template's first 8.
fn revision_id(
    state: &AppState,
    views: &Views,
    dep: &DeploymentId,
    sha: &str,
    template_sha: &str,
) -> anyhow::Result<RevisionId> {
    let configured = &state.config.control.revision;
    let id = if configured.is_empty() {
        let plain = default_revision_id(sha);
        if views
            .revisions
            .contains_key(&Views::revision_key(dep, &plain))
        {
            let t: String = template_sha.chars().take(8).collect();
            format!("{plain}-{t}")
        } else {
            plain
        }
    } else {
        configured.clone()
    };
    if let Some(r) = views.revisions.get(&Views::revision_key(dep, &id)) {
        anyhow::bail!(
            "revision {id} of deployment {dep} is recorded with chat template sha256 {} ({}), \
             tokenizer sha256 {}; this start serves template sha256 {template_sha}: \
             set control.revision to a new id",
            r.chat_template_hash,
            r.chat_template_origin
                .as_deref()
                .unwrap_or("origin not recorded"),
            r.tokenizer_hash,
        );
    }
    id.parse()
        .with_context(|| format!("revision id {id:?} (control.revision)"))
}

/// Records this process's executor as registered. A previous life that never
/// recorded `drained` (a crash, a kill) is recorded as lost first.
pub async fn register_executor(state: &AppState, c: &Control) -> anyhow::Result<()> {
    let id = state.config.executor_id.clone();
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
    let registered =
        c.cp.views()
            .await
            .revisions_of(&c.deployment_id)
            .find(|r| r.model_sha256 == primary.provenance.sha256)
            .map(|r| r.revision_id.clone());
    let revision_id: RevisionId = match registered {
        Some(r) => r,
        None => primary.provenance.revision.parse().with_context(|| {
            format!(
                "the served model's revision {:?} is not a valid revision id",
                primary.provenance.revision
            )
        })?,
    };
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
