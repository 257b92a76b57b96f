//! The control plane's business rules as event-sourced aggregates: a
//! deployment (with its rollouts), a revision, a capacity profile, an executor,
//! a batch job and a tenant (with its API keys and quotas).
//!
//! Each aggregate decides in [`Aggregate::handle`], which reads the state and
//! returns the events a command causes or the [`DomainError`] that refuses it,
//! and folds in [`Aggregate::apply`], which never refuses: events are facts.
//! The split follows cqrs-es; it makes the rules pure functions testable
//! without a database (`tests/aggregates.rs`) and leaves persistence and
//! optimistic concurrency to [`repo`]. Commands carry every outside fact they
//! depend on (does the revision exist, did its artifact verify): the service
//! layer looks those up first, so aggregates never do I/O.

mod batch;
mod capacity;
mod deployment;
mod error;
mod executor;
pub mod repo;
mod revision;
mod rollout;
mod tenant;

pub use batch::{Batch, BatchCommand, BatchPhase};
pub use capacity::{CapacityProfile, CapacityProfileCommand};
pub use deployment::{Deployment, DeploymentCommand};
pub use error::{DomainError, ErrorKind};
pub use executor::{Executor, ExecutorCommand, ExecutorStatus};
pub use repo::{Loaded, RepoError, execute, execute_loaded, load};
pub use revision::{ArtifactCheck, RegisteredRevision, Revision, RevisionCommand};
pub use rollout::{FinishedRollout, RolloutOutcome, RolloutState};
pub use tenant::{MAX_KEYS_PER_TENANT, Tenant, TenantCommand, check_quota};

use stoker_schemas::events::EventPayload;

use crate::store::Actor;

/// Who issues a command and why; both land on every event it causes.
#[derive(Clone, Debug, PartialEq)]
pub struct Meta {
    pub actor: Actor,
    pub reason: Option<String>,
}

impl Meta {
    pub fn new(actor: impl Into<String>) -> Self {
        Self {
            actor: Actor::new(actor),
            reason: None,
        }
    }

    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// The reason, when one was given that is not blank.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref().filter(|r| !r.trim().is_empty())
    }

    pub(crate) fn require_reason(
        &self,
        action: impl FnOnce() -> String,
    ) -> Result<(), DomainError> {
        match self.reason() {
            Some(_) => Ok(()),
            None => Err(DomainError::ReasonRequired { action: action() }),
        }
    }
}

/// One event-sourced aggregate: the state of one stream.
pub trait Aggregate: Default + Clone + Send + Sync {
    type Command;
    type Event: EventPayload + Clone;
    /// The store's `stream_type`: the event enum's.
    const STREAM_TYPE: &'static str = <Self::Event as EventPayload>::STREAM_TYPE;

    /// Decides what `cmd` causes given the current state; never mutates.
    fn handle(&self, cmd: Self::Command, meta: &Meta) -> Result<Vec<Self::Event>, DomainError>;

    /// Folds one event into the state; never fails and never refuses.
    fn apply(&mut self, ev: &Self::Event);

    /// The state after `events`, from the empty state.
    fn from_events<'a>(events: impl IntoIterator<Item = &'a Self::Event>) -> Self
    where
        Self::Event: 'a,
    {
        let mut state = Self::default();
        for ev in events {
            state.apply(ev);
        }
        state
    }
}

/// Ids that become part of stream ids (`{deployment}/{revision}/{workload}`)
/// are 1 to 64 characters of `[A-Za-z0-9._-]`, so they can neither contain the
/// separator nor need escaping in URLs.
pub(crate) fn check_id(kind: &'static str, id: &str) -> Result<(), DomainError> {
    // Deployment, revision and rollout ids are newtypes with this rule in their
    // constructor, parsed before a command is built; workloads are checked here.
    let detail = if id.is_empty() {
        "it is empty".to_owned()
    } else if id.chars().count() > 64 {
        format!(
            "it has {} characters; at most 64 are allowed",
            id.chars().count()
        )
    } else if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        format!("{c:?} is not allowed; use letters, digits, '.', '_' and '-'")
    } else {
        return Ok(());
    };
    Err(DomainError::InvalidId {
        kind,
        id: id.to_owned(),
        detail,
    })
}
