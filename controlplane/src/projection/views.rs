//! The read models and the fold that builds them from events.
//!
//! A view is a plain document: what the admin API lists and what routing reads
//! on every request. The fold is a pure function of the events in position
//! order, so replaying every event from the start gives the same views as
//! folding them one by one as they were appended: that is what makes
//! `rebuild-projections` safe.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use stoker_schemas::events::{
    BatchEvent, BatchOutcome, CapacityEnvelope, CapacityProfileEvent, DeploymentEvent,
    DeploymentLimits, EventPayload, ExecutorEvent, GateFigures, RevisionEvent, SloGates,
    TenantEvent,
};
use stoker_schemas::ids::{
    BatchId, DeploymentId, ExecutorId, FileId, KeyId, RevisionId, RolloutId, TenantId,
};

use super::tenants::{self, TenantView};
use crate::store::{Position, Recorded};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeploymentView {
    pub deployment_id: DeploymentId,
    pub limits: DeploymentLimits,
    pub serving_revision: Option<RevisionId>,
    pub active_rollout: Option<RolloutId>,
    pub retired: bool,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
    /// The deployment stream's version: pass it back to detect lost updates.
    pub version: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutStatus {
    Running,
    Paused,
    RolledBack,
    Completed,
}

impl RolloutStatus {
    pub fn is_active(self) -> bool {
        matches!(self, RolloutStatus::Running | RolloutStatus::Paused)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutView {
    pub rollout_id: RolloutId,
    pub deployment_id: DeploymentId,
    pub from_revision: RevisionId,
    pub to_revision: RevisionId,
    pub steps: Vec<u8>,
    pub step: u32,
    /// Share of traffic on `to_revision` now; 0 once rolled back, 100 once completed.
    pub percent: u8,
    pub status: RolloutStatus,
    pub gates: SloGates,
    pub last_figures: Option<GateFigures>,
    pub started_at: DateTime<Utc>,
    pub started_by: String,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
    pub last_reason: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RevisionView {
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
    pub model_uri: String,
    pub model_sha256: String,
    pub tokenizer_hash: String,
    pub chat_template_hash: String,
    /// Where the chat template came from: the model file's own, or the file
    /// given with `--chat-template`; `null` for revisions recorded before
    /// the origin was kept.
    #[serde(default)]
    pub chat_template_origin: Option<String>,
    pub precision: String,
    pub runtime_version: String,
    pub registered_at: DateTime<Utc>,
    pub registered_by: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CapacityProfileView {
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
    pub workload: String,
    pub envelope: CapacityEnvelope,
    pub recorded_at: DateTime<Utc>,
    pub recorded_by: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutorStatus {
    Active,
    Draining,
    Drained,
    Lost,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutorView {
    pub executor_id: ExecutorId,
    pub deployment_id: DeploymentId,
    pub revision_id: Option<RevisionId>,
    pub status: ExecutorStatus,
    pub reason: Option<String>,
    pub updated_at: DateTime<Utc>,
    pub updated_by: String,
}

/// One batch as the Batch API shows it, less the live row counts (those come
/// from the shard checkpoints while it runs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchView {
    pub batch_id: BatchId,
    pub tenant: String,
    pub input_file_id: FileId,
    pub endpoint: String,
    pub completion_window: String,
    pub metadata: BTreeMap<String, String>,
    /// OpenAI's status: validating, in_progress, finalizing, completed,
    /// failed, expired, cancelling, cancelled.
    pub status: String,
    pub cancel_requested: bool,
    pub total_rows: u64,
    pub shards: u64,
    pub estimated_tokens: u64,
    pub expires_at: i64,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub in_progress_at: Option<DateTime<Utc>>,
    pub cancelling_at: Option<DateTime<Utc>>,
    pub finalizing_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub output_file_id: Option<FileId>,
    pub error_file_id: Option<FileId>,
    /// Final counts, once ended.
    pub completed: Option<u64>,
    pub failed: Option<u64>,
    /// Why it failed, when it did: (code, message).
    pub error: Option<(String, String)>,
}

impl BatchView {
    /// Whether runners may still work on it (it counts against the backlog).
    pub fn is_open(&self) -> bool {
        matches!(
            self.status.as_str(),
            "validating" | "in_progress" | "finalizing" | "cancelling"
        )
    }
}

/// The kinds of document, as stored in `read_models.kind`.
pub mod kind {
    pub const DEPLOYMENT: &str = "deployment";
    pub const ROLLOUT: &str = "rollout";
    pub const REVISION: &str = "revision";
    pub const CAPACITY_PROFILE: &str = "capacity_profile";
    pub const EXECUTOR: &str = "executor";
    pub const BATCH: &str = "batch";
    pub const TENANT: &str = "tenant";
}

/// Every read model, keyed for deterministic order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Views {
    /// The last event folded in.
    pub position: Position,
    pub deployments: BTreeMap<String, DeploymentView>,
    pub rollouts: BTreeMap<String, RolloutView>,
    /// Keyed `{deployment}/{revision}`.
    pub revisions: BTreeMap<String, RevisionView>,
    /// Keyed `{deployment}/{revision}/{workload}`; the latest recording wins.
    pub capacity_profiles: BTreeMap<String, CapacityProfileView>,
    pub executors: BTreeMap<String, ExecutorView>,
    #[serde(default)]
    pub batches: BTreeMap<String, BatchView>,
    /// Keyed by tenant id.
    #[serde(default)]
    pub tenants: BTreeMap<String, TenantView>,
}

/// A document the fold changed: (kind, id).
pub type Touched = (&'static str, String);

/// Why an event could not be folded: its payload does not parse as the current
/// schema. Folding stops there rather than building views that skip history.
#[derive(Debug, thiserror::Error)]
#[error("event at position {position} ({event_type}) does not fold: {detail}")]
pub struct FoldError {
    pub position: i64,
    pub event_type: String,
    pub detail: String,
}

fn decode<E: EventPayload>(ev: &Recorded) -> Result<E, FoldError> {
    E::from_parts(&ev.event_type, ev.payload.clone()).map_err(|e| FoldError {
        position: ev.position.0,
        event_type: ev.event_type.clone(),
        detail: e.to_string(),
    })
}

impl Views {
    /// The tenant holding `key_id`, if any key has that id.
    pub fn tenant_of_key(&self, key_id: &KeyId) -> Option<&TenantId> {
        self.tenants
            .values()
            .find(|t| t.keys.contains_key(key_id))
            .map(|t| &t.tenant_id)
    }

    pub fn revision_key(deployment: &str, revision: &str) -> String {
        format!("{deployment}/{revision}")
    }

    /// The revisions of one deployment.
    pub fn revisions_of<'a>(
        &'a self,
        deployment: &'a str,
    ) -> impl Iterator<Item = &'a RevisionView> + 'a {
        self.revisions
            .values()
            .filter(move |r| r.deployment_id == deployment)
    }

    /// The active rollout of a deployment, if any.
    pub fn active_rollout(&self, deployment: &str) -> Option<&RolloutView> {
        let d = self.deployments.get(deployment)?;
        self.rollouts.get(d.active_rollout.as_deref()?)
    }

    /// Folds one event in; returns the documents it changed. Events of stream
    /// types this fold does not know (e.g. batches) change nothing.
    pub fn fold(&mut self, ev: &Recorded) -> Result<Vec<Touched>, FoldError> {
        let touched = match ev.stream.stream_type.as_str() {
            DeploymentEvent::STREAM_TYPE => self.fold_deployment(ev, decode(ev)?),
            RevisionEvent::STREAM_TYPE => self.fold_revision(ev, decode(ev)?),
            CapacityProfileEvent::STREAM_TYPE => self.fold_capacity(ev, decode(ev)?),
            ExecutorEvent::STREAM_TYPE => self.fold_executor(ev, decode(ev)?),
            BatchEvent::STREAM_TYPE => self.fold_batch(ev, decode(ev)?),
            TenantEvent::STREAM_TYPE => tenants::fold(&mut self.tenants, ev, decode(ev)?)
                .map(|id| (kind::TENANT, id))
                .into_iter()
                .collect(),
            _ => Vec::new(),
        };
        self.position = ev.position;
        Ok(touched)
    }

    fn fold_deployment(&mut self, ev: &Recorded, e: DeploymentEvent) -> Vec<Touched> {
        let at = ev.recorded_at;
        let by = ev.actor.0.clone();
        let dep_id = ev.stream.stream_id.0.clone();
        let mut touched = vec![(kind::DEPLOYMENT, dep_id.clone())];
        if let DeploymentEvent::DeploymentCreated(c) = &e {
            self.deployments.insert(
                dep_id.clone(),
                DeploymentView {
                    deployment_id: c.deployment_id.clone(),
                    limits: c.limits.clone(),
                    serving_revision: None,
                    active_rollout: None,
                    retired: false,
                    created_at: at,
                    created_by: by.clone(),
                    updated_at: at,
                    version: ev.seq,
                },
            );
            return touched;
        }
        let Some(d) = self.deployments.get_mut(&dep_id) else {
            return Vec::new();
        };
        d.updated_at = at;
        d.version = ev.seq;
        let mut rollout_change =
            |rollouts: &mut BTreeMap<String, RolloutView>,
             id: &str,
             f: &mut dyn FnMut(&mut RolloutView)| {
                if let Some(r) = rollouts.get_mut(id) {
                    f(r);
                    r.updated_at = at;
                    r.updated_by = by.clone();
                    r.last_reason = ev.reason.clone();
                    touched.push((kind::ROLLOUT, id.to_owned()));
                }
            };
        match e {
            DeploymentEvent::DeploymentCreated(_) => {}
            DeploymentEvent::DeploymentLimitsChanged(c) => d.limits = c.limits,
            DeploymentEvent::DeploymentRetired(_) => d.retired = true,
            DeploymentEvent::ServingRevisionSet(s) => d.serving_revision = Some(s.revision_id),
            DeploymentEvent::RolloutStarted(s) => {
                d.active_rollout = Some(s.rollout_id.clone());
                self.rollouts.insert(
                    s.rollout_id.to_string(),
                    RolloutView {
                        rollout_id: s.rollout_id.clone(),
                        deployment_id: s.deployment_id,
                        from_revision: s.from_revision,
                        to_revision: s.to_revision,
                        percent: s.steps.first().copied().unwrap_or(0),
                        steps: s.steps,
                        step: 0,
                        status: RolloutStatus::Running,
                        gates: s.gates,
                        last_figures: None,
                        started_at: at,
                        started_by: by.clone(),
                        updated_at: at,
                        updated_by: by.clone(),
                        last_reason: ev.reason.clone(),
                    },
                );
                touched.push((kind::ROLLOUT, s.rollout_id.into_string()));
            }
            DeploymentEvent::RolloutAdvanced(a) => {
                rollout_change(&mut self.rollouts, &a.rollout_id, &mut |r| {
                    r.step = a.step;
                    r.percent = a.percent;
                    if a.figures.is_some() {
                        r.last_figures = a.figures.clone();
                    }
                });
            }
            DeploymentEvent::RolloutPaused(p) => {
                rollout_change(&mut self.rollouts, &p.rollout_id, &mut |r| {
                    r.status = RolloutStatus::Paused
                });
            }
            DeploymentEvent::RolloutResumed(p) => {
                rollout_change(&mut self.rollouts, &p.rollout_id, &mut |r| {
                    r.status = RolloutStatus::Running
                });
            }
            DeploymentEvent::RolloutRolledBack(b) => {
                d.active_rollout = None;
                rollout_change(&mut self.rollouts, &b.rollout_id, &mut |r| {
                    r.status = RolloutStatus::RolledBack;
                    r.percent = 0;
                    if b.figures.is_some() {
                        r.last_figures = b.figures.clone();
                    }
                });
            }
            DeploymentEvent::RolloutCompleted(c) => {
                d.active_rollout = None;
                d.serving_revision = Some(c.revision_id.clone());
                rollout_change(&mut self.rollouts, &c.rollout_id, &mut |r| {
                    r.status = RolloutStatus::Completed;
                    r.percent = 100;
                });
            }
        }
        touched
    }

    fn fold_revision(&mut self, ev: &Recorded, e: RevisionEvent) -> Vec<Touched> {
        let RevisionEvent::RevisionRegistered(r) = e;
        let key = Self::revision_key(&r.deployment_id, &r.revision_id);
        self.revisions.insert(
            key.clone(),
            RevisionView {
                deployment_id: r.deployment_id,
                revision_id: r.revision_id,
                model_uri: r.model_uri,
                model_sha256: r.model_sha256,
                tokenizer_hash: r.tokenizer_hash,
                chat_template_hash: r.chat_template_hash,
                chat_template_origin: r.chat_template_origin,
                precision: r.precision,
                runtime_version: r.runtime_version,
                registered_at: ev.recorded_at,
                registered_by: ev.actor.0.clone(),
            },
        );
        vec![(kind::REVISION, key)]
    }

    fn fold_capacity(&mut self, ev: &Recorded, e: CapacityProfileEvent) -> Vec<Touched> {
        let CapacityProfileEvent::CapacityProfileRecorded(p) = e;
        let key = format!("{}/{}/{}", p.deployment_id, p.revision_id, p.workload);
        self.capacity_profiles.insert(
            key.clone(),
            CapacityProfileView {
                deployment_id: p.deployment_id,
                revision_id: p.revision_id,
                workload: p.workload,
                envelope: p.envelope,
                recorded_at: ev.recorded_at,
                recorded_by: ev.actor.0.clone(),
            },
        );
        vec![(kind::CAPACITY_PROFILE, key)]
    }

    fn fold_executor(&mut self, ev: &Recorded, e: ExecutorEvent) -> Vec<Touched> {
        let id = ev.stream.stream_id.0.clone();
        let (status, executor_id, deployment_id, revision_id) = match e {
            ExecutorEvent::ExecutorRegistered(r) => (
                ExecutorStatus::Active,
                r.executor_id,
                r.deployment_id,
                Some(r.revision_id),
            ),
            ExecutorEvent::ExecutorDraining(d) => (
                ExecutorStatus::Draining,
                d.executor_id,
                d.deployment_id,
                None,
            ),
            ExecutorEvent::ExecutorDrained(d) => (
                ExecutorStatus::Drained,
                d.executor_id,
                d.deployment_id,
                None,
            ),
            ExecutorEvent::ExecutorLost(d) => {
                (ExecutorStatus::Lost, d.executor_id, d.deployment_id, None)
            }
        };
        let prev_revision = self.executors.get(&id).and_then(|x| x.revision_id.clone());
        self.executors.insert(
            id.clone(),
            ExecutorView {
                executor_id,
                deployment_id,
                revision_id: revision_id.or(prev_revision),
                status,
                reason: ev.reason.clone(),
                updated_at: ev.recorded_at,
                updated_by: ev.actor.0.clone(),
            },
        );
        vec![(kind::EXECUTOR, id)]
    }

    fn fold_batch(&mut self, ev: &Recorded, e: BatchEvent) -> Vec<Touched> {
        let id = ev.stream.stream_id.0.clone();
        let at = ev.recorded_at;
        if let BatchEvent::BatchCreated(c) = &e {
            self.batches.insert(
                id.clone(),
                BatchView {
                    batch_id: c.batch_id.clone(),
                    tenant: c.tenant.clone(),
                    input_file_id: c.input_file_id.clone(),
                    endpoint: c.endpoint.clone(),
                    completion_window: c.completion_window.clone(),
                    metadata: c.metadata.clone(),
                    status: "validating".into(),
                    cancel_requested: false,
                    total_rows: c.total_rows,
                    shards: 0,
                    estimated_tokens: c.estimated_tokens,
                    expires_at: c.expires_at,
                    created_at: at,
                    created_by: ev.actor.0.clone(),
                    in_progress_at: None,
                    cancelling_at: None,
                    finalizing_at: None,
                    ended_at: None,
                    output_file_id: None,
                    error_file_id: None,
                    completed: None,
                    failed: None,
                    error: None,
                },
            );
            return vec![(kind::BATCH, id)];
        }
        let Some(b) = self.batches.get_mut(&id) else {
            return Vec::new();
        };
        match e {
            BatchEvent::BatchCreated(_) => {}
            BatchEvent::BatchStarted(s) => {
                b.shards = s.shards;
                b.in_progress_at = Some(at);
                if !b.cancel_requested {
                    b.status = "in_progress".into();
                }
            }
            BatchEvent::BatchCancelRequested(_) => {
                b.cancel_requested = true;
                b.cancelling_at = Some(at);
                b.status = "cancelling".into();
            }
            BatchEvent::BatchFinalizing(_) => {
                b.finalizing_at = Some(at);
                if !b.cancel_requested {
                    b.status = "finalizing".into();
                }
            }
            BatchEvent::BatchEnded(end) => {
                b.ended_at = Some(at);
                b.status = match end.outcome {
                    BatchOutcome::Completed => "completed",
                    BatchOutcome::Cancelled => "cancelled",
                    BatchOutcome::Expired => "expired",
                }
                .into();
                b.output_file_id = end.output_file_id;
                b.error_file_id = end.error_file_id;
                b.completed = Some(end.completed);
                b.failed = Some(end.failed);
            }
            BatchEvent::BatchFailed(f) => {
                b.ended_at = Some(at);
                b.status = "failed".into();
                b.error = Some((f.code, f.message));
            }
        }
        vec![(kind::BATCH, id)]
    }

    /// The document of (kind, id) as stored, if it exists.
    pub fn doc(&self, kind: &str, id: &str) -> Option<serde_json::Value> {
        let v = match kind {
            kind::DEPLOYMENT => serde_json::to_value(self.deployments.get(id)?),
            kind::ROLLOUT => serde_json::to_value(self.rollouts.get(id)?),
            kind::REVISION => serde_json::to_value(self.revisions.get(id)?),
            kind::CAPACITY_PROFILE => serde_json::to_value(self.capacity_profiles.get(id)?),
            kind::EXECUTOR => serde_json::to_value(self.executors.get(id)?),
            kind::BATCH => serde_json::to_value(self.batches.get(id)?),
            kind::TENANT => serde_json::to_value(self.tenants.get(id)?),
            _ => return None,
        };
        v.ok()
    }

    /// Puts a stored document back (loading views from the database).
    pub fn load_doc(
        &mut self,
        kind: &str,
        id: String,
        doc: serde_json::Value,
    ) -> Result<(), serde_json::Error> {
        match kind {
            kind::DEPLOYMENT => {
                self.deployments.insert(id, serde_json::from_value(doc)?);
            }
            kind::ROLLOUT => {
                self.rollouts.insert(id, serde_json::from_value(doc)?);
            }
            kind::REVISION => {
                self.revisions.insert(id, serde_json::from_value(doc)?);
            }
            kind::CAPACITY_PROFILE => {
                self.capacity_profiles
                    .insert(id, serde_json::from_value(doc)?);
            }
            kind::EXECUTOR => {
                self.executors.insert(id, serde_json::from_value(doc)?);
            }
            kind::BATCH => {
                self.batches.insert(id, serde_json::from_value(doc)?);
            }
            kind::TENANT => {
                self.tenants.insert(id, serde_json::from_value(doc)?);
            }
            _ => {}
        }
        Ok(())
    }
}
