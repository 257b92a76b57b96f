//! The rollout entity: the state machine that shifts a deployment's traffic
//! from its serving revision to a new one in steps, gated by SLO figures.
//!
//! A rollout is not an aggregate of its own. Its events live in the deployment
//! stream, so the deployment's optimistic append is what makes "one active
//! rollout per deployment" hold under concurrent writers; this module holds the
//! per-rollout rules the deployment delegates to once it has found the active
//! rollout a command names.
//!
//! ```text
//!   started ──advance──▶ step k ──advance──▶ … ──▶ last step (100 %) ──complete──▶ completed
//!      │  ▲                  │                           │
//!    pause│resume          pause/resume               roll back (any time, reason required)
//!      ▼  │                  ▼                           ▼
//!    paused ─────────────── roll back ──────────────▶ rolled back
//! ```

use stoker_schemas::events::{
    DeploymentEvent, GateFigures, RolloutAdvanced, RolloutCompleted, RolloutPaused, RolloutResumed,
    RolloutRolledBack, SloGates,
};
use stoker_schemas::ids::{DeploymentId, RevisionId, RolloutId};

use super::{DomainError, Meta};

/// The most steps a rollout may have.
pub const MAX_STEPS: usize = 20;

/// A running or paused rollout, as routing and the controller see it.
#[derive(Clone, Debug, PartialEq)]
pub struct RolloutState {
    pub rollout_id: RolloutId,
    /// The revision serving the rest of the traffic (the deployment's serving revision).
    pub from_revision: RevisionId,
    /// The revision being rolled out.
    pub to_revision: RevisionId,
    /// Percent of traffic to `to_revision` at each step; strictly increasing, ends at 100.
    pub steps: Vec<u8>,
    /// Index of the current step in `steps`.
    pub step: u32,
    /// Percent of traffic currently sent to `to_revision`.
    pub percent: u8,
    pub paused: bool,
    pub gates: SloGates,
    /// The figures that justified the last advance, if the controller sent them.
    pub last_figures: Option<GateFigures>,
}

impl RolloutState {
    /// Whether the rollout has reached its last step (100 % to `to_revision`).
    pub fn at_last_step(&self) -> bool {
        self.step as usize + 1 >= self.steps.len()
    }

    pub(crate) fn advance(
        &self,
        deployment_id: &DeploymentId,
        figures: Option<GateFigures>,
    ) -> Result<DeploymentEvent, DomainError> {
        if self.paused {
            return Err(self.paused_error(deployment_id));
        }
        if self.at_last_step() {
            return Err(DomainError::RolloutAtLastStep {
                deployment_id: deployment_id.clone(),
                rollout_id: self.rollout_id.clone(),
                percent: self.percent,
            });
        }
        if let Some(f) = &figures {
            check_figures(f)?;
        }
        let step = self.step + 1;
        Ok(RolloutAdvanced {
            deployment_id: deployment_id.to_owned(),
            rollout_id: self.rollout_id.clone(),
            step,
            percent: self.steps[step as usize],
            figures,
        }
        .into())
    }

    pub(crate) fn pause(
        &self,
        deployment_id: &DeploymentId,
    ) -> Result<DeploymentEvent, DomainError> {
        if self.paused {
            return Err(self.paused_error(deployment_id));
        }
        Ok(RolloutPaused {
            deployment_id: deployment_id.to_owned(),
            rollout_id: self.rollout_id.clone(),
        }
        .into())
    }

    pub(crate) fn resume(
        &self,
        deployment_id: &DeploymentId,
    ) -> Result<DeploymentEvent, DomainError> {
        if !self.paused {
            return Err(DomainError::RolloutNotPaused {
                deployment_id: deployment_id.clone(),
                rollout_id: self.rollout_id.clone(),
            });
        }
        Ok(RolloutResumed {
            deployment_id: deployment_id.to_owned(),
            rollout_id: self.rollout_id.clone(),
        }
        .into())
    }

    /// Rolling back is allowed from any step, paused or not, but never silently:
    /// the reason is what an operator reads in the audit trail afterwards.
    pub(crate) fn roll_back(
        &self,
        deployment_id: &DeploymentId,
        figures: Option<GateFigures>,
        meta: &Meta,
    ) -> Result<DeploymentEvent, DomainError> {
        meta.require_reason(|| {
            format!(
                "rolling back rollout {:?} of deployment {deployment_id:?}",
                self.rollout_id
            )
        })?;
        if let Some(f) = &figures {
            check_figures(f)?;
        }
        Ok(RolloutRolledBack {
            deployment_id: deployment_id.to_owned(),
            rollout_id: self.rollout_id.clone(),
            figures,
        }
        .into())
    }

    pub(crate) fn complete(
        &self,
        deployment_id: &DeploymentId,
    ) -> Result<DeploymentEvent, DomainError> {
        if self.paused {
            return Err(self.paused_error(deployment_id));
        }
        if self.percent != 100 {
            return Err(DomainError::RolloutNotAtFullTraffic {
                deployment_id: deployment_id.clone(),
                rollout_id: self.rollout_id.clone(),
                percent: self.percent,
            });
        }
        Ok(RolloutCompleted {
            deployment_id: deployment_id.to_owned(),
            rollout_id: self.rollout_id.clone(),
            revision_id: self.to_revision.clone(),
        }
        .into())
    }

    fn paused_error(&self, deployment_id: &DeploymentId) -> DomainError {
        DomainError::RolloutPaused {
            deployment_id: deployment_id.clone(),
            rollout_id: self.rollout_id.clone(),
        }
    }
}

/// How a rollout ended.
#[derive(Clone, Debug, PartialEq)]
pub enum RolloutOutcome {
    /// `to_revision` became the serving revision.
    Completed,
    /// Traffic returned to `from_revision`, with the figures that caused it if any.
    RolledBack { figures: Option<GateFigures> },
}

/// A rollout that is over, kept for reads (history, audit views).
#[derive(Clone, Debug, PartialEq)]
pub struct FinishedRollout {
    /// The rollout as it stood when it ended.
    pub rollout: RolloutState,
    pub outcome: RolloutOutcome,
}

/// Steps are percents of traffic to the new revision: 1 to [`MAX_STEPS`] of
/// them, each in 1..=100, strictly increasing, the last 100 (so completing
/// always means full traffic was seen under the gates).
pub(crate) fn check_steps(steps: &[u8]) -> Result<(), DomainError> {
    let bad = |detail: String| Err(DomainError::InvalidSteps(detail));
    if steps.is_empty() {
        return bad("a rollout needs at least one step".to_owned());
    }
    if steps.len() > MAX_STEPS {
        return bad(format!(
            "{} steps given; at most {MAX_STEPS} are allowed",
            steps.len()
        ));
    }
    if let Some(p) = steps.iter().find(|&&p| p == 0 || p > 100) {
        return bad(format!("step {p} % is outside 1..=100"));
    }
    if let Some(w) = steps.windows(2).find(|w| w[0] >= w[1]) {
        return bad(format!(
            "steps must strictly increase, but {} % is followed by {} %",
            w[0], w[1]
        ));
    }
    if steps.last() != Some(&100) {
        return bad(format!(
            "the last step must be 100 %, not {} %",
            steps[steps.len() - 1]
        ));
    }
    Ok(())
}

pub(crate) fn check_gates(gates: &SloGates) -> Result<(), DomainError> {
    check_rate("max_error_rate", gates.max_error_rate).map_err(DomainError::InvalidGates)?;
    check_rate("max_overload_rate", gates.max_overload_rate).map_err(DomainError::InvalidGates)?;
    check_ms("ttft_p99_ms", gates.ttft_p99_ms).map_err(DomainError::InvalidGates)
}

/// Figures are stored in events, so a NaN must be refused here: JSON cannot
/// carry it and the stream would no longer decode.
pub(crate) fn check_figures(figures: &GateFigures) -> Result<(), DomainError> {
    check_rate("error_rate", Some(figures.error_rate)).map_err(DomainError::InvalidFigures)?;
    check_rate("overload_rate", Some(figures.overload_rate))
        .map_err(DomainError::InvalidFigures)?;
    check_ms("ttft_p99_ms", figures.ttft_p99_ms).map_err(DomainError::InvalidFigures)
}

fn check_rate(name: &str, rate: Option<f64>) -> Result<(), String> {
    match rate {
        Some(r) if !(0.0..=1.0).contains(&r) => {
            Err(format!("{name} is {r}; a rate must lie in [0, 1]"))
        }
        _ => Ok(()),
    }
}

fn check_ms(name: &str, ms: Option<f64>) -> Result<(), String> {
    match ms {
        Some(v) if !(v.is_finite() && v >= 0.0) => Err(format!(
            "{name} is {v}; a latency must be a finite, non-negative number of milliseconds"
        )),
        _ => Ok(()),
    }
}
