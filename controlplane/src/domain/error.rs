//! `DomainError`: every reason an aggregate refuses a command, one variant each.
//!
//! The API turns these into HTTP in one place: [`DomainError::kind`] picks the
//! status class (404, 409 or 400) and [`DomainError::error_code`] the code of
//! the error body, from the one error catalogue (`ErrorCode`). Messages are
//! sentences that name the ids involved, because they reach operators
//! unchanged.

use stoker_schemas::codes::ErrorCode;
use stoker_schemas::ids::{
    BatchId, DeploymentId, ExecutorId, KeyId, RevisionId, RolloutId, TenantId,
};

/// The HTTP class of a refusal: 404, 409 or 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The thing the command names does not exist (404).
    NotFound,
    /// The command contradicts the current state; re-read and decide again (409).
    Conflict,
    /// The command itself is malformed or lacks a precondition (400).
    Invalid,
}

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DomainError {
    #[error("{kind} {id:?} already exists")]
    AlreadyExists { kind: &'static str, id: String },
    #[error("{kind} {id:?} does not exist")]
    NotFound { kind: &'static str, id: String },
    #[error("deployment {deployment_id:?} is retired and accepts no further changes")]
    Retired { deployment_id: DeploymentId },
    #[error("{kind} id {id:?} is invalid: {detail}")]
    InvalidId {
        kind: &'static str,
        id: String,
        detail: String,
    },
    #[error("the deployment limits are invalid: {0}")]
    InvalidLimits(String),
    #[error(
        "revision {revision_id:?} of deployment {deployment_id:?} is not registered with a \
         verified artifact"
    )]
    RevisionNotVerified {
        deployment_id: DeploymentId,
        revision_id: RevisionId,
    },
    #[error(
        "deployment {deployment_id:?} has rollout {rollout_id:?} in progress; finish or roll it \
         back first"
    )]
    RolloutActive {
        deployment_id: DeploymentId,
        rollout_id: RolloutId,
    },
    #[error("deployment {deployment_id:?} has no serving revision to roll out from")]
    NoServingRevision { deployment_id: DeploymentId },
    #[error("revision {revision_id:?} already serves deployment {deployment_id:?}")]
    SameRevision {
        deployment_id: DeploymentId,
        revision_id: RevisionId,
    },
    #[error(
        "deployment {deployment_id:?} already has rollout {rollout_id:?} in progress; only one \
         rollout may be active at a time"
    )]
    RolloutAlreadyActive {
        deployment_id: DeploymentId,
        rollout_id: RolloutId,
    },
    #[error("the rollout steps are invalid: {0}")]
    InvalidSteps(String),
    #[error("the rollout gates are invalid: {0}")]
    InvalidGates(String),
    #[error("the gate figures are invalid: {0}")]
    InvalidFigures(String),
    #[error("rollout {rollout_id:?} is not the active rollout of deployment {deployment_id:?}")]
    RolloutNotActive {
        deployment_id: DeploymentId,
        rollout_id: RolloutId,
    },
    #[error("rollout {rollout_id:?} of deployment {deployment_id:?} is paused")]
    RolloutPaused {
        deployment_id: DeploymentId,
        rollout_id: RolloutId,
    },
    #[error("rollout {rollout_id:?} of deployment {deployment_id:?} is not paused")]
    RolloutNotPaused {
        deployment_id: DeploymentId,
        rollout_id: RolloutId,
    },
    #[error(
        "rollout {rollout_id:?} of deployment {deployment_id:?} is already at its last step \
         ({percent} %); complete it instead"
    )]
    RolloutAtLastStep {
        deployment_id: DeploymentId,
        rollout_id: RolloutId,
        percent: u8,
    },
    #[error(
        "rollout {rollout_id:?} of deployment {deployment_id:?} sends {percent} % of traffic to \
         the new revision; it can complete only at 100 %"
    )]
    RolloutNotAtFullTraffic {
        deployment_id: DeploymentId,
        rollout_id: RolloutId,
        percent: u8,
    },
    #[error("{action} requires a non-empty reason")]
    ReasonRequired { action: String },
    /// Permanent: the artifact is not at `model_uri`, so retrying the same
    /// registration cannot succeed.
    #[error(
        "no artifact exists at {model_uri:?} for revision {revision_id:?} of deployment \
         {deployment_id:?}"
    )]
    RevisionAbsent {
        deployment_id: DeploymentId,
        revision_id: RevisionId,
        model_uri: String,
    },
    #[error(
        "the artifact at {model_uri:?} for revision {revision_id:?} could not be read: {detail}"
    )]
    ArtifactUnreadable {
        revision_id: RevisionId,
        model_uri: String,
        detail: String,
    },
    #[error(
        "the artifact of revision {revision_id:?} has sha256 {actual}, but the registration \
         expects {expected}: its content changed since that hash was taken (a model \
         directory's hash covers every model file in it; `stoker inspect` lists each file's)"
    )]
    HashMismatch {
        revision_id: RevisionId,
        expected: String,
        actual: String,
    },
    #[error("the capacity envelope is invalid: {0}")]
    InvalidEnvelope(String),
    #[error("executor {executor_id:?} is already registered")]
    AlreadyRegistered { executor_id: ExecutorId },
    #[error("executor {executor_id:?} is already draining")]
    AlreadyDraining { executor_id: ExecutorId },
    #[error("executor {executor_id:?} has already drained")]
    AlreadyDrained { executor_id: ExecutorId },
    #[error("executor {executor_id:?} is not draining")]
    NotDraining { executor_id: ExecutorId },
    #[error("executor {executor_id:?} was lost")]
    ExecutorLost { executor_id: ExecutorId },
    #[error("executor {executor_id:?} is no longer active (it is {status})")]
    ExecutorNotActive {
        executor_id: ExecutorId,
        status: &'static str,
    },
    /// A batch command that its current status does not allow (e.g. cancelling
    /// a completed batch).
    #[error("batch {batch_id:?} is {status}; it cannot be {action}")]
    BatchStatus {
        batch_id: BatchId,
        status: &'static str,
        action: &'static str,
    },
    #[error("API key {key_id:?} of tenant {tenant_id:?} is already revoked")]
    KeyRevoked { tenant_id: TenantId, key_id: KeyId },
    #[error("the API key is invalid: {0}")]
    InvalidKey(String),
    #[error("the tenant quota is invalid: {0}")]
    InvalidQuota(String),
    #[error("the tenant is invalid: {0}")]
    InvalidTenant(String),
}

impl DomainError {
    /// The HTTP class of this refusal.
    pub fn kind(&self) -> ErrorKind {
        use DomainError::*;
        match self {
            NotFound { .. } | RevisionAbsent { .. } => ErrorKind::NotFound,
            AlreadyExists { .. }
            | Retired { .. }
            | RolloutActive { .. }
            | RolloutAlreadyActive { .. }
            | RolloutNotActive { .. }
            | RolloutPaused { .. }
            | RolloutNotPaused { .. }
            | RolloutAtLastStep { .. }
            | RolloutNotAtFullTraffic { .. }
            | AlreadyRegistered { .. }
            | AlreadyDraining { .. }
            | AlreadyDrained { .. }
            | NotDraining { .. }
            | ExecutorLost { .. }
            | ExecutorNotActive { .. }
            | BatchStatus { .. }
            | KeyRevoked { .. } => ErrorKind::Conflict,
            InvalidId { .. }
            | InvalidLimits(_)
            | RevisionNotVerified { .. }
            | NoServingRevision { .. }
            | SameRevision { .. }
            | InvalidSteps(_)
            | InvalidGates(_)
            | InvalidFigures(_)
            | ReasonRequired { .. }
            | ArtifactUnreadable { .. }
            | HashMismatch { .. }
            | InvalidEnvelope(_)
            | InvalidKey(_)
            | InvalidQuota(_)
            | InvalidTenant(_) => ErrorKind::Invalid,
        }
    }

    /// Its code in the one error catalogue: the class's code (`not_found`,
    /// `conflict`, `invalid_value`), except a revision whose artifact is
    /// gone (`revision_absent`). The message says which refusal it is.
    pub fn error_code(&self) -> ErrorCode {
        match (self, self.kind()) {
            (DomainError::RevisionAbsent { .. }, _) => ErrorCode::RevisionAbsent,
            (_, ErrorKind::NotFound) => ErrorCode::NotFound,
            (_, ErrorKind::Conflict) => ErrorCode::Conflict,
            (_, ErrorKind::Invalid) => ErrorCode::InvalidValue,
        }
    }
}
