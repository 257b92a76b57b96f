//! The deployment aggregate: a named service with its limits, the revision that
//! serves it, and at most one rollout moving traffic to another revision.
//!
//! Routing reads exactly what it needs from here (the serving revision, the
//! active rollout's split, the limits). The deployment stream is also the
//! consistency boundary for rollouts: two operators starting rollouts at once
//! both read version n, and only the first append at n succeeds. The per-rollout
//! rules live in `rollout.rs`; this file finds the rollout a command names and
//! keeps the deployment-wide ones (retired, one active rollout, serving revision).

use stoker_schemas::events::{
    DeploymentCreated, DeploymentEvent, DeploymentLimits, DeploymentLimitsChanged,
    DeploymentRetired, GateFigures, RolloutStarted, ServingRevisionSet, SloGates,
};

use stoker_schemas::ids::{DeploymentId, RevisionId, RolloutId};

use super::rollout::{self, FinishedRollout, RolloutOutcome, RolloutState};
use super::{Aggregate, DomainError, Meta};

#[derive(Clone, Debug, PartialEq)]
pub enum DeploymentCommand {
    Create {
        deployment_id: DeploymentId,
        limits: DeploymentLimits,
    },
    ChangeLimits {
        limits: DeploymentLimits,
    },
    /// Retires the deployment for good; no reason is needed.
    Retire,
    SetServingRevision {
        revision_id: RevisionId,
        /// The revision is registered with a verified artifact (looked up by the caller).
        verified: bool,
    },
    StartRollout {
        rollout_id: RolloutId,
        to_revision: RevisionId,
        /// `to_revision` is registered with a verified artifact (looked up by the caller).
        to_revision_verified: bool,
        steps: Vec<u8>,
        gates: SloGates,
    },
    AdvanceRollout {
        rollout_id: RolloutId,
        figures: Option<GateFigures>,
    },
    PauseRollout {
        rollout_id: RolloutId,
    },
    ResumeRollout {
        rollout_id: RolloutId,
    },
    /// Returns all traffic to the serving revision; needs a reason.
    RollBack {
        rollout_id: RolloutId,
        figures: Option<GateFigures>,
    },
    CompleteRollout {
        rollout_id: RolloutId,
    },
}

/// The state of one deployment stream; `Default` is a deployment not yet created.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Deployment {
    /// `None` until `DeploymentCreated`.
    id: Option<DeploymentId>,
    limits: Option<DeploymentLimits>,
    retired: bool,
    serving_revision: Option<RevisionId>,
    active_rollout: Option<RolloutState>,
    history: Vec<FinishedRollout>,
}

impl Deployment {
    pub fn exists(&self) -> bool {
        self.id.is_some()
    }

    /// The deployment id, once created.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    pub fn limits(&self) -> Option<&DeploymentLimits> {
        self.limits.as_ref()
    }

    pub fn is_retired(&self) -> bool {
        self.retired
    }

    /// The revision taking all traffic outside a rollout (and the rest during one).
    pub fn serving_revision(&self) -> Option<&str> {
        self.serving_revision.as_deref()
    }

    /// The running or paused rollout, if any.
    pub fn active_rollout(&self) -> Option<&RolloutState> {
        self.active_rollout.as_ref()
    }

    /// Finished rollouts, oldest first.
    pub fn rollout_history(&self) -> &[FinishedRollout] {
        &self.history
    }

    /// Refuses every command but `Create` on a deployment that is absent or retired.
    fn live_id(&self) -> Result<&DeploymentId, DomainError> {
        match &self.id {
            None => Err(DomainError::NotFound {
                kind: "deployment",
                id: String::new(),
            }),
            Some(id) if self.retired => Err(DomainError::Retired {
                deployment_id: id.clone(),
            }),
            Some(id) => Ok(id),
        }
    }

    /// The active rollout if `rollout_id` names it.
    fn rollout(
        &self,
        id: &DeploymentId,
        rollout_id: RolloutId,
    ) -> Result<&RolloutState, DomainError> {
        match &self.active_rollout {
            Some(r) if r.rollout_id == rollout_id => Ok(r),
            _ => Err(DomainError::RolloutNotActive {
                deployment_id: id.clone(),
                rollout_id,
            }),
        }
    }

    fn no_active_rollout(&self, id: &DeploymentId) -> Result<(), DomainError> {
        match &self.active_rollout {
            Some(r) => Err(DomainError::RolloutActive {
                deployment_id: id.clone(),
                rollout_id: r.rollout_id.clone(),
            }),
            None => Ok(()),
        }
    }

    fn start_rollout(
        &self,
        id: &DeploymentId,
        rollout_id: RolloutId,
        to_revision: RevisionId,
        to_revision_verified: bool,
        steps: Vec<u8>,
        gates: SloGates,
    ) -> Result<DeploymentEvent, DomainError> {
        if let Some(active) = &self.active_rollout {
            return Err(DomainError::RolloutAlreadyActive {
                deployment_id: id.clone(),
                rollout_id: active.rollout_id.clone(),
            });
        }
        if self
            .history
            .iter()
            .any(|f| f.rollout.rollout_id == rollout_id)
        {
            return Err(DomainError::AlreadyExists {
                kind: "rollout",
                id: rollout_id.into_string(),
            });
        }
        let Some(from_revision) = self.serving_revision.clone() else {
            return Err(DomainError::NoServingRevision {
                deployment_id: id.clone(),
            });
        };
        if !to_revision_verified {
            return Err(DomainError::RevisionNotVerified {
                deployment_id: id.clone(),
                revision_id: to_revision,
            });
        }
        if to_revision == from_revision {
            return Err(DomainError::SameRevision {
                deployment_id: id.clone(),
                revision_id: to_revision,
            });
        }
        rollout::check_steps(&steps)?;
        rollout::check_gates(&gates)?;
        Ok(RolloutStarted {
            deployment_id: id.to_owned(),
            rollout_id,
            from_revision,
            to_revision,
            steps,
            gates,
        }
        .into())
    }

    /// Moves the active rollout named `rollout_id` into the history.
    fn finish_rollout(&mut self, rollout_id: &str, outcome: RolloutOutcome) {
        if let Some(r) = self.active_rollout.take_if(|r| r.rollout_id == rollout_id) {
            if outcome == RolloutOutcome::Completed {
                self.serving_revision = Some(r.to_revision.clone());
            }
            self.history.push(FinishedRollout {
                rollout: r,
                outcome,
            });
        }
    }

    fn active_mut(&mut self, rollout_id: &str) -> Option<&mut RolloutState> {
        self.active_rollout
            .as_mut()
            .filter(|r| r.rollout_id == rollout_id)
    }
}

impl Aggregate for Deployment {
    type Command = DeploymentCommand;
    type Event = DeploymentEvent;

    fn handle(
        &self,
        cmd: DeploymentCommand,
        meta: &Meta,
    ) -> Result<Vec<DeploymentEvent>, DomainError> {
        use DeploymentCommand as C;

        if let C::Create {
            deployment_id,
            limits,
        } = cmd
        {
            // A retired deployment still exists: its id is not reused.
            if self.exists() {
                return Err(DomainError::AlreadyExists {
                    kind: "deployment",
                    id: deployment_id.into_string(),
                });
            }
            check_limits(&limits)?;
            return Ok(vec![
                DeploymentCreated {
                    deployment_id,
                    limits,
                }
                .into(),
            ]);
        }

        let id = self.live_id()?;
        let deployment_id = id.to_owned();
        let event = match cmd {
            C::Create { .. } => unreachable!("handled above"),
            C::ChangeLimits { limits } => {
                check_limits(&limits)?;
                DeploymentLimitsChanged {
                    deployment_id,
                    limits,
                }
                .into()
            }
            C::Retire => {
                self.no_active_rollout(id)?;
                DeploymentRetired { deployment_id }.into()
            }
            C::SetServingRevision {
                revision_id,
                verified,
            } => {
                self.no_active_rollout(id)?;
                if !verified {
                    return Err(DomainError::RevisionNotVerified {
                        deployment_id,
                        revision_id,
                    });
                }
                ServingRevisionSet {
                    deployment_id,
                    revision_id,
                }
                .into()
            }
            C::StartRollout {
                rollout_id,
                to_revision,
                to_revision_verified,
                steps,
                gates,
            } => self.start_rollout(
                id,
                rollout_id,
                to_revision,
                to_revision_verified,
                steps,
                gates,
            )?,
            C::AdvanceRollout {
                rollout_id,
                figures,
            } => self.rollout(id, rollout_id)?.advance(id, figures)?,
            C::PauseRollout { rollout_id } => self.rollout(id, rollout_id)?.pause(id)?,
            C::ResumeRollout { rollout_id } => self.rollout(id, rollout_id)?.resume(id)?,
            C::RollBack {
                rollout_id,
                figures,
            } => self.rollout(id, rollout_id)?.roll_back(id, figures, meta)?,
            C::CompleteRollout { rollout_id } => self.rollout(id, rollout_id)?.complete(id)?,
        };
        Ok(vec![event])
    }

    fn apply(&mut self, ev: &DeploymentEvent) {
        use DeploymentEvent as E;
        match ev {
            E::DeploymentCreated(e) => {
                self.id = Some(e.deployment_id.clone());
                self.limits = Some(e.limits.clone());
            }
            E::DeploymentLimitsChanged(e) => self.limits = Some(e.limits.clone()),
            E::DeploymentRetired(_) => self.retired = true,
            E::ServingRevisionSet(e) => self.serving_revision = Some(e.revision_id.clone()),
            E::RolloutStarted(e) => {
                self.active_rollout = Some(RolloutState {
                    rollout_id: e.rollout_id.clone(),
                    from_revision: e.from_revision.clone(),
                    to_revision: e.to_revision.clone(),
                    steps: e.steps.clone(),
                    step: 0,
                    percent: e.steps.first().copied().unwrap_or(100),
                    paused: false,
                    gates: e.gates.clone(),
                    last_figures: None,
                });
            }
            E::RolloutAdvanced(e) => {
                if let Some(r) = self.active_mut(&e.rollout_id) {
                    r.step = e.step;
                    r.percent = e.percent;
                    r.last_figures = e.figures.clone();
                }
            }
            E::RolloutPaused(e) => {
                if let Some(r) = self.active_mut(&e.rollout_id) {
                    r.paused = true;
                }
            }
            E::RolloutResumed(e) => {
                if let Some(r) = self.active_mut(&e.rollout_id) {
                    r.paused = false;
                }
            }
            E::RolloutRolledBack(e) => {
                let figures = e.figures.clone();
                self.finish_rollout(&e.rollout_id, RolloutOutcome::RolledBack { figures });
            }
            E::RolloutCompleted(e) => self.finish_rollout(&e.rollout_id, RolloutOutcome::Completed),
        }
    }
}

/// Limits every request check downstream relies on: a context window, input and
/// output caps that fit in it, and a reserve share in `[0, 1)` (a reserve of 1
/// would starve the batch lane entirely).
fn check_limits(l: &DeploymentLimits) -> Result<(), DomainError> {
    let bad = |detail: String| Err(DomainError::InvalidLimits(detail));
    if l.context_window == 0 {
        return bad("context_window must be at least 1".to_owned());
    }
    for (name, value) in [
        ("max_input_tokens", l.max_input_tokens),
        ("max_output_tokens", l.max_output_tokens),
    ] {
        if value == 0 || value > l.context_window {
            return bad(format!(
                "{name} is {value}; it must lie in 1..={} (the context window)",
                l.context_window
            ));
        }
    }
    let share = l.interactive_reserve_share;
    if !(0.0..1.0).contains(&share) {
        return bad(format!(
            "interactive_reserve_share is {share}; it must lie in [0, 1)"
        ));
    }
    Ok(())
}
