//! The deployment itself: creation, limits, retirement, the serving revision,
//! and what the folded state exposes to routing.

use stoker_controlplane::domain::{Aggregate, Deployment, DeploymentCommand as C, DomainError};
use stoker_schemas::events::*;
use stoker_schemas::ids::DeploymentId;

use super::given::*;

fn set_serving(revision: &str, verified: bool) -> C {
    C::SetServingRevision {
        revision_id: revision.parse().unwrap(),
        verified,
    }
}

/// Every command other than `Create`, for the absent and retired cases.
fn every_non_create_command() -> Vec<C> {
    vec![
        C::ChangeLimits { limits: limits() },
        C::Retire,
        set_serving("a", true),
        C::StartRollout {
            rollout_id: "ro1".parse().unwrap(),
            to_revision: "b".parse().unwrap(),
            to_revision_verified: true,
            steps: vec![50, 100],
            gates: gates(),
        },
        C::AdvanceRollout {
            rollout_id: "ro1".parse().unwrap(),
            figures: None,
        },
        C::PauseRollout {
            rollout_id: "ro1".parse().unwrap(),
        },
        C::ResumeRollout {
            rollout_id: "ro1".parse().unwrap(),
        },
        C::RollBack {
            rollout_id: "ro1".parse().unwrap(),
            figures: None,
        },
        C::CompleteRollout {
            rollout_id: "ro1".parse().unwrap(),
        },
    ]
}

#[test]
fn creating_a_deployment_records_its_limits() {
    let state = given::<Deployment>([])
        .when(
            C::Create {
                deployment_id: DEP.parse().unwrap(),
                limits: limits(),
            },
            &alice(),
        )
        .then_events(vec![created()]);
    assert!(state.exists());
    assert_eq!(state.id(), Some(DEP));
    assert_eq!(state.limits(), Some(&limits()));
    assert_eq!(state.serving_revision(), None);
    assert!(state.active_rollout().is_none());
    assert!(!state.is_retired());
}

#[test]
fn creating_an_existing_deployment_is_refused() {
    let cmd = || C::Create {
        deployment_id: DEP.parse().unwrap(),
        limits: limits(),
    };
    given::<Deployment>([created()])
        .when(cmd(), &alice())
        .then_refused(refused!(DomainError::AlreadyExists {
            kind: "deployment",
            ..
        }));
    // A retired deployment's id is not reused either.
    given::<Deployment>([created(), retired()])
        .when(cmd(), &alice())
        .then_refused(refused!(DomainError::AlreadyExists { .. }));
}

#[test]
fn a_deployment_id_must_be_a_safe_stream_id() {
    // A command carries a parsed `DeploymentId`: the malformed ones never
    // make one, so no command can name them.
    for id in ["", "a/b", "has space", &"x".repeat(65)] {
        let e = id.parse::<DeploymentId>().unwrap_err();
        assert_eq!(e.kind, "deployment", "{id:?}");
    }
}

fn invalid_limits() -> Vec<(&'static str, DeploymentLimits)> {
    let with = |f: fn(&mut DeploymentLimits)| {
        let mut l = limits();
        f(&mut l);
        l
    };
    vec![
        ("zero context window", with(|l| l.context_window = 0)),
        ("zero max input", with(|l| l.max_input_tokens = 0)),
        (
            "max input over the window",
            with(|l| l.max_input_tokens = 4097),
        ),
        ("zero max output", with(|l| l.max_output_tokens = 0)),
        (
            "max output over the window",
            with(|l| l.max_output_tokens = 5000),
        ),
        (
            "reserve share of 1",
            with(|l| l.interactive_reserve_share = 1.0),
        ),
        (
            "negative reserve share",
            with(|l| l.interactive_reserve_share = -0.1),
        ),
        (
            "NaN reserve share",
            with(|l| l.interactive_reserve_share = f64::NAN),
        ),
    ]
}

#[test]
fn creating_with_invalid_limits_is_refused() {
    for (case, l) in invalid_limits() {
        let e = given::<Deployment>([])
            .when(
                C::Create {
                    deployment_id: DEP.parse().unwrap(),
                    limits: l,
                },
                &alice(),
            )
            .then_refused(refused!(DomainError::InvalidLimits(_)));
        println!("{case}: {e}");
    }
}

#[test]
fn limits_at_the_edges_are_accepted() {
    let mut l = limits();
    l.max_input_tokens = l.context_window;
    l.max_output_tokens = l.context_window;
    l.interactive_reserve_share = 0.0;
    given::<Deployment>([])
        .when(
            C::Create {
                deployment_id: DEP.parse().unwrap(),
                limits: l.clone(),
            },
            &alice(),
        )
        .then_events(vec![
            DeploymentCreated {
                deployment_id: DEP.parse().unwrap(),
                limits: l,
            }
            .into(),
        ]);
}

#[test]
fn changing_limits_records_the_new_limits() {
    let mut l = limits();
    l.max_waiting_requests = 8;
    l.scheduler_policy = SchedulerPolicy::Fcfs;
    let state = given::<Deployment>([created()])
        .when(C::ChangeLimits { limits: l.clone() }, &alice())
        .then_events(vec![
            DeploymentLimitsChanged {
                deployment_id: DEP.parse().unwrap(),
                limits: l.clone(),
            }
            .into(),
        ]);
    assert_eq!(state.limits(), Some(&l));
}

#[test]
fn changing_to_invalid_limits_is_refused() {
    for (_, l) in invalid_limits() {
        given::<Deployment>([created()])
            .when(C::ChangeLimits { limits: l }, &alice())
            .then_refused(refused!(DomainError::InvalidLimits(_)));
    }
}

#[test]
fn every_command_on_an_absent_deployment_is_not_found() {
    for cmd in every_non_create_command() {
        given::<Deployment>([])
            .when(cmd, &because("testing"))
            .then_refused(refused!(DomainError::NotFound {
                kind: "deployment",
                ..
            }));
    }
}

#[test]
fn every_command_on_a_retired_deployment_is_refused() {
    for cmd in every_non_create_command() {
        let e = given::<Deployment>([created(), serving("a"), retired()])
            .when(cmd, &because("testing"))
            .then_refused(refused!(DomainError::Retired { .. }));
        assert!(e.to_string().contains(DEP), "{e}");
    }
}

#[test]
fn retiring_needs_no_reason() {
    let state = given::<Deployment>([created(), serving("a")])
        .when(C::Retire, &alice())
        .then_events(vec![retired()]);
    assert!(state.is_retired());
    assert!(state.exists());
}

#[test]
fn retiring_during_a_rollout_is_refused() {
    let e = given::<Deployment>(rolling())
        .when(C::Retire, &alice())
        .then_refused(refused!(DomainError::RolloutActive { .. }));
    assert!(e.to_string().contains("ro1"), "{e}");
    given::<Deployment>(and(rolling(), [paused("ro1")]))
        .when(C::Retire, &alice())
        .then_refused(refused!(DomainError::RolloutActive { .. }));
}

#[test]
fn setting_a_verified_serving_revision_records_it() {
    let state = given::<Deployment>([created()])
        .when(set_serving("a", true), &alice())
        .then_events(vec![serving("a")]);
    assert_eq!(state.serving_revision(), Some("a"));
    // And it can be replaced outside a rollout.
    let state = given::<Deployment>([created(), serving("a")])
        .when(set_serving("b", true), &alice())
        .then_events(vec![serving("b")]);
    assert_eq!(state.serving_revision(), Some("b"));
}

#[test]
fn serving_an_unverified_revision_is_refused() {
    let e = given::<Deployment>([created()])
        .when(set_serving("a", false), &alice())
        .then_refused(refused!(DomainError::RevisionNotVerified { .. }));
    assert!(e.to_string().contains("\"a\""), "{e}");
}

#[test]
fn setting_the_serving_revision_during_a_rollout_is_refused() {
    given::<Deployment>(rolling())
        .when(set_serving("c", true), &alice())
        .then_refused(refused!(DomainError::RolloutActive { .. }));
    given::<Deployment>(and(rolling(), [paused("ro1")]))
        .when(set_serving("c", true), &alice())
        .then_refused(refused!(DomainError::RolloutActive { .. }));
}

#[test]
fn folding_exposes_what_routing_needs() {
    let history = and(rolling(), [advanced("ro1", 1, 25), paused("ro1")]);
    let state = Deployment::from_events(&history);
    assert_eq!(state.serving_revision(), Some("a"));
    let r = state.active_rollout().unwrap();
    assert_eq!(
        (
            r.rollout_id.as_str(),
            r.from_revision.as_str(),
            r.to_revision.as_str()
        ),
        ("ro1", "a", "b")
    );
    assert_eq!((r.step, r.percent, r.paused), (1, 25, true));
    assert_eq!(r.gates, gates());
    assert!(state.rollout_history().is_empty());
}
