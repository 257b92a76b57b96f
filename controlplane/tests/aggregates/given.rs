//! The given/when/then harness and the event fixtures the cases share.

use std::fmt::Debug;

use stoker_controlplane::domain::{Aggregate, DomainError, Meta};
use stoker_schemas::events::*;

/// The history an aggregate is rebuilt from.
pub fn given<A: Aggregate>(history: impl IntoIterator<Item = A::Event>) -> Given<A> {
    Given {
        history: history.into_iter().collect(),
    }
}

pub struct Given<A: Aggregate> {
    history: Vec<A::Event>,
}

impl<A: Aggregate> Given<A> {
    pub fn when(self, cmd: A::Command, meta: &Meta) -> When<A> {
        let state = A::from_events(&self.history);
        let result = state.handle(cmd, meta);
        When { state, result }
    }
}

pub struct When<A: Aggregate> {
    state: A,
    result: Result<Vec<A::Event>, DomainError>,
}

impl<A: Aggregate> When<A>
where
    A::Event: PartialEq + Debug,
{
    /// Asserts the command caused exactly `expected`; returns the state after
    /// folding them, for assertions on what readers see.
    #[track_caller]
    pub fn then_events(self, expected: Vec<A::Event>) -> A {
        let events = match self.result {
            Ok(events) => events,
            Err(e) => panic!("expected {expected:?}, but the command was refused: {e}"),
        };
        assert_eq!(events, expected);
        let mut state = self.state;
        for ev in &events {
            state.apply(ev);
        }
        state
    }

    /// Asserts the command was refused with an error `matches` accepts.
    #[track_caller]
    pub fn then_refused(self, matches: impl FnOnce(&DomainError) -> bool) -> DomainError {
        match self.result {
            Ok(events) => panic!("expected a refusal, but the command caused {events:?}"),
            Err(e) => {
                assert!(matches(&e), "refused for the wrong reason: {e:?}");
                assert!(!e.to_string().is_empty());
                e
            }
        }
    }
}

/// An operator without a reason.
pub fn alice() -> Meta {
    Meta::new("alice")
}

/// An operator with a reason.
pub fn because(reason: &str) -> Meta {
    Meta::new("alice").with_reason(reason)
}

pub const DEP: &str = "chat";

pub fn limits() -> DeploymentLimits {
    DeploymentLimits {
        context_window: 4096,
        max_input_tokens: 3072,
        max_output_tokens: 1024,
        max_waiting_requests: 64,
        max_waiting_tokens: 65_536,
        interactive_reserve_share: 0.25,
        scheduler_policy: SchedulerPolicy::InteractiveFirst,
    }
}

pub fn gates() -> SloGates {
    SloGates {
        ttft_p99_ms: Some(250.0),
        max_error_rate: Some(0.01),
        max_overload_rate: Some(0.05),
        min_requests: 20,
    }
}

pub fn figures() -> GateFigures {
    GateFigures {
        requests: 40,
        ttft_p99_ms: Some(180.0),
        error_rate: 0.0,
        overload_rate: 0.01,
    }
}

pub fn created() -> DeploymentEvent {
    DeploymentCreated {
        deployment_id: DEP.parse().unwrap(),
        limits: limits(),
    }
    .into()
}

pub fn retired() -> DeploymentEvent {
    DeploymentRetired {
        deployment_id: DEP.parse().unwrap(),
    }
    .into()
}

pub fn serving(revision: &str) -> DeploymentEvent {
    ServingRevisionSet {
        deployment_id: DEP.parse().unwrap(),
        revision_id: revision.parse().unwrap(),
    }
    .into()
}

pub fn started(rollout: &str, from: &str, to: &str, steps: &[u8]) -> DeploymentEvent {
    RolloutStarted {
        deployment_id: DEP.parse().unwrap(),
        rollout_id: rollout.parse().unwrap(),
        from_revision: from.parse().unwrap(),
        to_revision: to.parse().unwrap(),
        steps: steps.to_vec(),
        gates: gates(),
    }
    .into()
}

pub fn advanced(rollout: &str, step: u32, percent: u8) -> DeploymentEvent {
    RolloutAdvanced {
        deployment_id: DEP.parse().unwrap(),
        rollout_id: rollout.parse().unwrap(),
        step,
        percent,
        figures: None,
    }
    .into()
}

pub fn paused(rollout: &str) -> DeploymentEvent {
    RolloutPaused {
        deployment_id: DEP.parse().unwrap(),
        rollout_id: rollout.parse().unwrap(),
    }
    .into()
}

pub fn resumed(rollout: &str) -> DeploymentEvent {
    RolloutResumed {
        deployment_id: DEP.parse().unwrap(),
        rollout_id: rollout.parse().unwrap(),
    }
    .into()
}

pub fn rolled_back(rollout: &str) -> DeploymentEvent {
    RolloutRolledBack {
        deployment_id: DEP.parse().unwrap(),
        rollout_id: rollout.parse().unwrap(),
        figures: None,
    }
    .into()
}

pub fn completed(rollout: &str, revision: &str) -> DeploymentEvent {
    RolloutCompleted {
        deployment_id: DEP.parse().unwrap(),
        rollout_id: rollout.parse().unwrap(),
        revision_id: revision.parse().unwrap(),
    }
    .into()
}

/// A deployment serving `a` with rollout `ro1` from `a` to `b` over 5/25/50/100 %.
pub fn rolling() -> Vec<DeploymentEvent> {
    vec![
        created(),
        serving("a"),
        started("ro1", "a", "b", &[5, 25, 50, 100]),
    ]
}

/// [`rolling`] advanced to its last step (100 %).
pub fn rolling_at_full_traffic() -> Vec<DeploymentEvent> {
    let mut h = rolling();
    h.extend([
        advanced("ro1", 1, 25),
        advanced("ro1", 2, 50),
        advanced("ro1", 3, 100),
    ]);
    h
}

/// History `base` plus `more`.
pub fn and(
    mut base: Vec<DeploymentEvent>,
    more: impl IntoIterator<Item = DeploymentEvent>,
) -> Vec<DeploymentEvent> {
    base.extend(more);
    base
}
