//! The control plane's one entry point for writers: each operator action looks
//! up the facts its aggregate needs in the read models, runs the command
//! against the event stream with optimistic concurrency, and folds the new
//! events into the read models before returning, so a write is visible to the
//! writer's next read.
//!
//! Its methods take typed ids ([`DeploymentId`], ...): callers parse what
//! they were sent at their edge, so a malformed id never reaches a command.

use stoker_schemas::events::{CapacityEnvelope, DeploymentLimits, GateFigures, SloGates};
use stoker_schemas::ids::{DeploymentId, ExecutorId, RevisionId, RolloutId};

use crate::domain::repo::{self, RepoError};
use crate::domain::{
    ArtifactCheck, CapacityProfile, CapacityProfileCommand, Deployment, DeploymentCommand,
    DomainError, Executor, ExecutorCommand, Meta, Revision, RevisionCommand,
};
use crate::projection::{ProjectionError, Projector, RolloutView, Views};
use crate::routing::{self, RolloutRoute};
use crate::store::{Actor, AuditQuery, EventStore, Page, Recorded, StoreError};

/// The actor of the rollout controller's decisions.
pub const CONTROLLER_ACTOR: &str = "rollout-controller";

#[derive(Debug, thiserror::Error)]
pub enum CpError {
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    #[error("{what} {id:?} does not exist")]
    NotFound { what: &'static str, id: String },
    #[error("stored event is unreadable: {0}")]
    Decode(String),
}

impl From<RepoError> for CpError {
    fn from(e: RepoError) -> Self {
        match e {
            RepoError::Domain(d) => CpError::Domain(d),
            RepoError::Store(s) => CpError::Store(s),
            other => CpError::Decode(other.to_string()),
        }
    }
}

/// The facts of a revision being registered; the artifact check is done by the
/// caller (it needs to read the model file).
#[derive(Clone, Debug)]
pub struct RevisionSpec {
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
    pub model_uri: String,
    pub model_sha256: String,
    pub tokenizer_hash: String,
    pub chat_template_hash: String,
    /// Where the chat template came from (the model file, `--chat-template`).
    pub chat_template_origin: Option<String>,
    pub precision: String,
    pub runtime_version: String,
}

/// Where one request goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteDecision {
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
    pub rollout_id: Option<RolloutId>,
}

/// Why a request could not be routed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteError {
    UnknownDeployment,
    Retired,
    NoServingRevision,
}

#[derive(Clone, Debug)]
pub struct ControlPlane {
    projector: Projector,
}

impl ControlPlane {
    /// Opens the control plane on a migrated store: loads the read models and
    /// catches up with the events.
    pub async fn open(store: EventStore) -> Result<ControlPlane, CpError> {
        Ok(ControlPlane {
            projector: Projector::open(store).await?,
        })
    }

    pub fn store(&self) -> &EventStore {
        self.projector.store()
    }

    pub fn projector(&self) -> &Projector {
        &self.projector
    }

    /// A consistent snapshot of the read models.
    pub async fn views(&self) -> Views {
        self.projector.views().await.clone()
    }

    /// Folds what other processes appended; called on a timer.
    pub async fn refresh(&self) -> Result<(), CpError> {
        self.projector.catch_up().await?;
        Ok(())
    }

    pub(crate) async fn run<A: crate::domain::Aggregate>(
        &self,
        stream_id: &str,
        cmd: A::Command,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        let written = repo::execute::<A>(self.store(), stream_id, cmd, meta).await?;
        self.projector.catch_up().await?;
        Ok(written)
    }

    /// Runs a command against a batch stream.
    pub async fn batch_command(
        &self,
        batch_id: &str,
        cmd: crate::domain::BatchCommand,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        self.run::<crate::domain::Batch>(batch_id, cmd, meta).await
    }

    // --- deployments ---

    pub async fn create_deployment(
        &self,
        deployment_id: &DeploymentId,
        limits: DeploymentLimits,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        let cmd = DeploymentCommand::Create {
            deployment_id: deployment_id.clone(),
            limits,
        };
        self.run::<Deployment>(deployment_id, cmd, meta).await
    }

    pub async fn change_limits(
        &self,
        deployment_id: &DeploymentId,
        limits: DeploymentLimits,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        let cmd = DeploymentCommand::ChangeLimits { limits };
        self.run::<Deployment>(deployment_id, cmd, meta).await
    }

    pub async fn retire_deployment(
        &self,
        deployment_id: &DeploymentId,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        self.run::<Deployment>(deployment_id, DeploymentCommand::Retire, meta)
            .await
    }

    async fn revision_known(&self, deployment_id: &str, revision_id: &str) -> bool {
        self.projector
            .views()
            .await
            .revisions
            .contains_key(&Views::revision_key(deployment_id, revision_id))
    }

    pub async fn set_serving_revision(
        &self,
        deployment_id: &DeploymentId,
        revision_id: &RevisionId,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        let verified = self.revision_known(deployment_id, revision_id).await;
        let cmd = DeploymentCommand::SetServingRevision {
            revision_id: revision_id.clone(),
            verified,
        };
        self.run::<Deployment>(deployment_id, cmd, meta).await
    }

    // --- revisions ---

    /// Registers a revision whose artifact the caller checked. The first revision
    /// of a deployment with no serving revision also becomes its serving revision.
    pub async fn register_revision(
        &self,
        spec: RevisionSpec,
        artifact: ArtifactCheck,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        let (deployment_exists, needs_serving) = {
            let v = self.projector.views().await;
            match v.deployments.get(spec.deployment_id.as_str()) {
                Some(d) => (!d.retired, d.serving_revision.is_none()),
                None => (false, false),
            }
        };
        let stream_id = Views::revision_key(&spec.deployment_id, &spec.revision_id);
        let cmd = RevisionCommand::Register {
            deployment_id: spec.deployment_id.clone(),
            revision_id: spec.revision_id.clone(),
            model_uri: spec.model_uri,
            model_sha256: spec.model_sha256,
            tokenizer_hash: spec.tokenizer_hash,
            chat_template_hash: spec.chat_template_hash,
            chat_template_origin: spec.chat_template_origin,
            precision: spec.precision,
            runtime_version: spec.runtime_version,
            artifact,
            deployment_exists,
        };
        let mut written = self.run::<Revision>(&stream_id, cmd, meta).await?;
        if needs_serving {
            let m = Meta {
                actor: meta.actor.clone(),
                reason: Some("first revision of the deployment".into()),
            };
            written.extend(
                self.set_serving_revision(&spec.deployment_id, &spec.revision_id, &m)
                    .await?,
            );
        }
        Ok(written)
    }

    // --- rollouts ---

    pub async fn start_rollout(
        &self,
        deployment_id: &DeploymentId,
        to_revision: &RevisionId,
        steps: Vec<u8>,
        gates: SloGates,
        meta: &Meta,
    ) -> Result<(RolloutId, Vec<Recorded>), CpError> {
        let rollout_id = RolloutId::generate();
        let verified = self.revision_known(deployment_id, to_revision).await;
        let cmd = DeploymentCommand::StartRollout {
            rollout_id: rollout_id.clone(),
            to_revision: to_revision.clone(),
            to_revision_verified: verified,
            steps,
            gates,
        };
        let written = self.run::<Deployment>(deployment_id, cmd, meta).await?;
        Ok((rollout_id, written))
    }

    /// The rollout's view, or NotFound.
    pub async fn rollout(&self, rollout_id: &RolloutId) -> Result<RolloutView, CpError> {
        self.projector
            .views()
            .await
            .rollouts
            .get(rollout_id.as_str())
            .cloned()
            .ok_or_else(|| CpError::NotFound {
                what: "rollout",
                id: rollout_id.to_string(),
            })
    }

    /// Advances, pauses, resumes, rolls back or completes a rollout by its id.
    pub async fn rollout_action(
        &self,
        rollout_id: &RolloutId,
        action: RolloutAction,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        let r = self.rollout(rollout_id).await?;
        let rollout_id = rollout_id.clone();
        let cmd = match action {
            RolloutAction::Advance(figures) => DeploymentCommand::AdvanceRollout {
                rollout_id,
                figures,
            },
            RolloutAction::Pause => DeploymentCommand::PauseRollout { rollout_id },
            RolloutAction::Resume => DeploymentCommand::ResumeRollout { rollout_id },
            RolloutAction::RollBack(figures) => DeploymentCommand::RollBack {
                rollout_id,
                figures,
            },
            RolloutAction::Complete => DeploymentCommand::CompleteRollout { rollout_id },
        };
        self.run::<Deployment>(&r.deployment_id, cmd, meta).await
    }

    // --- capacity profiles ---

    pub async fn record_capacity_profile(
        &self,
        deployment_id: &DeploymentId,
        revision_id: &RevisionId,
        workload: &str,
        envelope: CapacityEnvelope,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        let revision_registered = self.revision_known(deployment_id, revision_id).await;
        let stream_id = format!("{deployment_id}/{revision_id}/{workload}");
        let cmd = CapacityProfileCommand::Record {
            deployment_id: deployment_id.clone(),
            revision_id: revision_id.clone(),
            workload: workload.to_owned(),
            envelope,
            revision_registered,
        };
        self.run::<CapacityProfile>(&stream_id, cmd, meta).await
    }

    // --- executors ---

    pub async fn executor_command(
        &self,
        executor_id: &ExecutorId,
        cmd: ExecutorCommand,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        self.run::<Executor>(executor_id, cmd, meta).await
    }

    // --- reads ---

    pub async fn audit(&self, q: &AuditQuery) -> Result<Page, CpError> {
        Ok(self.store().audit(q).await?)
    }

    /// Routes one request of `deployment_id` by the active rollout: `key` is the
    /// request's `user` (or its id), hashed so one user stays on one revision.
    pub async fn route(&self, deployment_id: &str, key: &str) -> Result<RouteDecision, RouteError> {
        let v = self.projector.views().await;
        route_in(&v, deployment_id, key)
    }
}

/// [`ControlPlane::route`] on a snapshot of the views.
pub fn route_in(v: &Views, deployment_id: &str, key: &str) -> Result<RouteDecision, RouteError> {
    let d = v
        .deployments
        .get(deployment_id)
        .ok_or(RouteError::UnknownDeployment)?;
    if d.retired {
        return Err(RouteError::Retired);
    }
    let serving = d
        .serving_revision
        .as_ref()
        .ok_or(RouteError::NoServingRevision)?;
    let rollout = v.active_rollout(deployment_id);
    let chosen = routing::route(
        deployment_id,
        serving.as_str(),
        rollout.map(|r| RolloutRoute {
            rollout_id: &r.rollout_id,
            to_revision: &r.to_revision,
            percent: r.percent,
        }),
        key,
    );
    let revision_id = match rollout {
        Some(r) if chosen == r.to_revision.as_str() => r.to_revision.clone(),
        _ => serving.clone(),
    };
    Ok(RouteDecision {
        deployment_id: d.deployment_id.clone(),
        revision_id,
        rollout_id: rollout.map(|r| r.rollout_id.clone()),
    })
}

/// What an operator (or the controller) does to a running rollout.
#[derive(Clone, Debug)]
pub enum RolloutAction {
    Advance(Option<GateFigures>),
    Pause,
    Resume,
    RollBack(Option<GateFigures>),
    Complete,
}

/// Metadata of a write by `actor`.
pub fn meta(actor: &str, reason: Option<String>) -> Meta {
    Meta {
        actor: Actor::from(actor),
        reason,
    }
}
