//! The executor aggregate: the life of one executor process serving a
//! revision, from registration through draining to drained, or lost.
//!
//! Draining is an operator decision (scale-in, maintenance) and needs a reason
//! for the audit trail; drained and lost are facts reported by the executor or
//! by the control plane's liveness check. An executor id may register again
//! after it drained or was lost: that is a new life of the same stream.
//!
//! ```text
//! Unregistered ──register──▶ Active ──drain──▶ Draining ──mark drained──▶ Drained
//!                              │                  │                          │
//!                          mark lost          mark lost                  register
//!                              ▼                  ▼                          ▼
//!                             Lost ◀──────────────┘      (Lost ──register──▶ Active)
//! ```

use stoker_schemas::events::{
    ExecutorDrained, ExecutorDraining, ExecutorEvent, ExecutorLost, ExecutorRegistered,
};
use stoker_schemas::ids::{DeploymentId, ExecutorId, RevisionId};

use super::{Aggregate, DomainError, Meta};

#[derive(Clone, Debug, PartialEq)]
pub enum ExecutorCommand {
    Register {
        executor_id: ExecutorId,
        deployment_id: DeploymentId,
        revision_id: RevisionId,
    },
    /// Stops new work; needs a reason.
    Drain,
    MarkDrained,
    MarkLost,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExecutorStatus {
    #[default]
    Unregistered,
    Active,
    Draining,
    Drained,
    Lost,
}

impl ExecutorStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutorStatus::Unregistered => "unregistered",
            ExecutorStatus::Active => "active",
            ExecutorStatus::Draining => "draining",
            ExecutorStatus::Drained => "drained",
            ExecutorStatus::Lost => "lost",
        }
    }
}

/// The state of one executor stream; `Default` is one never registered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Executor {
    status: ExecutorStatus,
    executor_id: Option<ExecutorId>,
    deployment_id: Option<DeploymentId>,
    revision_id: Option<RevisionId>,
    /// Registrations so far; more than one means the id came back after it ended.
    lives: u32,
}

impl Executor {
    pub fn status(&self) -> ExecutorStatus {
        self.status
    }

    /// The executor id; empty until registered.
    pub fn executor_id(&self) -> &str {
        self.executor_id.as_deref().unwrap_or_default()
    }

    /// The deployment of the current (or last) life; empty until registered.
    pub fn deployment_id(&self) -> &str {
        self.deployment_id.as_deref().unwrap_or_default()
    }

    /// The revision of the current (or last) life; empty until registered.
    pub fn revision_id(&self) -> &str {
        self.revision_id.as_deref().unwrap_or_default()
    }

    pub fn lives(&self) -> u32 {
        self.lives
    }

    /// The ids the events of a registered executor carry.
    fn ids(&self) -> Result<(ExecutorId, DeploymentId), DomainError> {
        match (&self.executor_id, &self.deployment_id) {
            (Some(e), Some(d)) => Ok((e.clone(), d.clone())),
            _ => Err(self.not_found()),
        }
    }

    fn not_found(&self) -> DomainError {
        DomainError::NotFound {
            kind: "executor",
            id: self.executor_id().to_owned(),
        }
    }
}

impl Aggregate for Executor {
    type Command = ExecutorCommand;
    type Event = ExecutorEvent;

    fn handle(&self, cmd: ExecutorCommand, meta: &Meta) -> Result<Vec<ExecutorEvent>, DomainError> {
        use ExecutorStatus as S;
        // The registered id, for refusals in states that follow registration.
        let known = || self.executor_id.clone().ok_or_else(|| self.not_found());
        let event = match cmd {
            ExecutorCommand::Register {
                executor_id,
                deployment_id,
                revision_id,
            } => match self.status {
                S::Active | S::Draining => {
                    return Err(DomainError::AlreadyRegistered { executor_id });
                }
                S::Unregistered | S::Drained | S::Lost => ExecutorRegistered {
                    executor_id,
                    deployment_id,
                    revision_id,
                }
                .into(),
            },
            ExecutorCommand::Drain => match self.status {
                S::Unregistered => return Err(self.not_found()),
                S::Draining => {
                    return Err(DomainError::AlreadyDraining {
                        executor_id: known()?,
                    });
                }
                S::Drained => {
                    return Err(DomainError::AlreadyDrained {
                        executor_id: known()?,
                    });
                }
                S::Lost => {
                    return Err(DomainError::ExecutorLost {
                        executor_id: known()?,
                    });
                }
                S::Active => {
                    meta.require_reason(|| format!("draining executor {:?}", self.executor_id()))?;
                    let (executor_id, deployment_id) = self.ids()?;
                    ExecutorDraining {
                        executor_id,
                        deployment_id,
                    }
                    .into()
                }
            },
            ExecutorCommand::MarkDrained => match self.status {
                S::Unregistered => return Err(self.not_found()),
                S::Active | S::Drained | S::Lost => {
                    return Err(DomainError::NotDraining {
                        executor_id: known()?,
                    });
                }
                S::Draining => {
                    let (executor_id, deployment_id) = self.ids()?;
                    ExecutorDrained {
                        executor_id,
                        deployment_id,
                    }
                    .into()
                }
            },
            ExecutorCommand::MarkLost => match self.status {
                S::Unregistered => return Err(self.not_found()),
                S::Drained | S::Lost => {
                    return Err(DomainError::ExecutorNotActive {
                        executor_id: known()?,
                        status: self.status.as_str(),
                    });
                }
                S::Active | S::Draining => {
                    let (executor_id, deployment_id) = self.ids()?;
                    ExecutorLost {
                        executor_id,
                        deployment_id,
                    }
                    .into()
                }
            },
        };
        Ok(vec![event])
    }

    fn apply(&mut self, ev: &ExecutorEvent) {
        match ev {
            ExecutorEvent::ExecutorRegistered(e) => {
                self.status = ExecutorStatus::Active;
                self.executor_id = Some(e.executor_id.clone());
                self.deployment_id = Some(e.deployment_id.clone());
                self.revision_id = Some(e.revision_id.clone());
                self.lives += 1;
            }
            ExecutorEvent::ExecutorDraining(_) => self.status = ExecutorStatus::Draining,
            ExecutorEvent::ExecutorDrained(_) => self.status = ExecutorStatus::Drained,
            ExecutorEvent::ExecutorLost(_) => self.status = ExecutorStatus::Lost,
        }
    }
}
