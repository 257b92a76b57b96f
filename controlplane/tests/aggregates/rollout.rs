//! The rollout state machine inside the deployment: starting, advancing,
//! pausing, resuming, rolling back and completing, every refusal, and the two
//! whole lifecycles (completed, and rolled back then retried).

use stoker_controlplane::domain::{
    Aggregate, Deployment, DeploymentCommand as C, DomainError, Meta, RolloutOutcome,
};
use stoker_schemas::events::*;

use super::given::*;

fn start(rollout: &str, to: &str, steps: &[u8]) -> C {
    C::StartRollout {
        rollout_id: rollout.parse().unwrap(),
        to_revision: to.parse().unwrap(),
        to_revision_verified: true,
        steps: steps.to_vec(),
        gates: gates(),
    }
}

fn advance(rollout: &str) -> C {
    C::AdvanceRollout {
        rollout_id: rollout.parse().unwrap(),
        figures: None,
    }
}

fn pause(rollout: &str) -> C {
    C::PauseRollout {
        rollout_id: rollout.parse().unwrap(),
    }
}

fn resume(rollout: &str) -> C {
    C::ResumeRollout {
        rollout_id: rollout.parse().unwrap(),
    }
}

fn roll_back(rollout: &str) -> C {
    C::RollBack {
        rollout_id: rollout.parse().unwrap(),
        figures: None,
    }
}

fn complete(rollout: &str) -> C {
    C::CompleteRollout {
        rollout_id: rollout.parse().unwrap(),
    }
}

/// Runs `cmd` on the state folded from `history`, appends what it caused, and
/// returns the new history: a lifecycle as a sequence of decisions.
fn step(mut history: Vec<DeploymentEvent>, cmd: C, meta: &Meta) -> Vec<DeploymentEvent> {
    let events = Deployment::from_events(&history)
        .handle(cmd, meta)
        .unwrap_or_else(|e| panic!("refused: {e}"));
    history.extend(events);
    history
}

// ---- starting ----

#[test]
fn starting_a_rollout_sends_the_first_step_to_the_new_revision() {
    let state = given::<Deployment>([created(), serving("a")])
        .when(start("ro1", "b", &[5, 25, 50, 100]), &alice())
        .then_events(vec![started("ro1", "a", "b", &[5, 25, 50, 100])]);
    let r = state.active_rollout().unwrap();
    assert_eq!((r.step, r.percent, r.paused), (0, 5, false));
    assert_eq!(state.serving_revision(), Some("a"));
}

#[test]
fn a_second_active_rollout_is_refused_naming_the_active_one() {
    for history in [rolling(), and(rolling(), [paused("ro1")])] {
        let e = given::<Deployment>(history)
            .when(start("ro2", "c", &[50, 100]), &alice())
            .then_refused(refused!(DomainError::RolloutAlreadyActive { .. }));
        let DomainError::RolloutAlreadyActive { rollout_id, .. } = &e else {
            unreachable!()
        };
        assert_eq!(rollout_id, "ro1");
    }
}

#[test]
fn a_rollout_without_a_serving_revision_is_refused() {
    given::<Deployment>([created()])
        .when(start("ro1", "b", &[50, 100]), &alice())
        .then_refused(refused!(DomainError::NoServingRevision { .. }));
}

#[test]
fn a_rollout_to_an_unverified_revision_is_refused() {
    let cmd = C::StartRollout {
        rollout_id: "ro1".parse().unwrap(),
        to_revision: "b".parse().unwrap(),
        to_revision_verified: false,
        steps: vec![50, 100],
        gates: gates(),
    };
    given::<Deployment>([created(), serving("a")])
        .when(cmd, &alice())
        .then_refused(refused!(DomainError::RevisionNotVerified { .. }));
}

#[test]
fn a_rollout_to_the_serving_revision_is_refused() {
    given::<Deployment>([created(), serving("a")])
        .when(start("ro1", "a", &[50, 100]), &alice())
        .then_refused(refused!(DomainError::SameRevision { .. }));
}

#[test]
fn a_rollout_id_is_never_reused() {
    given::<Deployment>(and(rolling(), [rolled_back("ro1")]))
        .when(start("ro1", "b", &[50, 100]), &alice())
        .then_refused(refused!(DomainError::AlreadyExists {
            kind: "rollout",
            ..
        }));
}

#[test]
fn invalid_steps_are_refused() {
    let too_many: Vec<u8> = (1..=21).map(|i| if i == 21 { 100 } else { i }).collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", vec![]),
        ("decreasing", vec![50, 25, 100]),
        ("repeated", vec![25, 25, 100]),
        ("a zero step", vec![0, 50, 100]),
        ("over 100", vec![50, 101]),
        ("not ending at 100", vec![5, 25, 50]),
        ("more than 20", too_many),
    ];
    for (case, steps) in cases {
        let e = given::<Deployment>([created(), serving("a")])
            .when(start("ro1", "b", &steps), &alice())
            .then_refused(refused!(DomainError::InvalidSteps(_)));
        println!("{case}: {e}");
    }
}

#[test]
fn a_single_full_step_and_twenty_steps_are_valid() {
    given::<Deployment>([created(), serving("a")])
        .when(start("ro1", "b", &[100]), &alice())
        .then_events(vec![started("ro1", "a", "b", &[100])]);
    let twenty: Vec<u8> = (1..=20).map(|i| i * 5).collect();
    given::<Deployment>([created(), serving("a")])
        .when(start("ro1", "b", &twenty), &alice())
        .then_events(vec![started("ro1", "a", "b", &twenty)]);
}

#[test]
fn invalid_gates_are_refused() {
    let with = |f: fn(&mut SloGates)| {
        let mut g = gates();
        f(&mut g);
        g
    };
    let cases = [
        with(|g| g.max_error_rate = Some(1.5)),
        with(|g| g.max_error_rate = Some(-0.1)),
        with(|g| g.max_error_rate = Some(f64::NAN)),
        with(|g| g.max_overload_rate = Some(2.0)),
        with(|g| g.ttft_p99_ms = Some(-1.0)),
        with(|g| g.ttft_p99_ms = Some(f64::NAN)),
        with(|g| g.ttft_p99_ms = Some(f64::INFINITY)),
    ];
    for g in cases {
        given::<Deployment>([created(), serving("a")])
            .when(
                C::StartRollout {
                    rollout_id: "ro1".parse().unwrap(),
                    to_revision: "b".parse().unwrap(),
                    to_revision_verified: true,
                    steps: vec![50, 100],
                    gates: g,
                },
                &alice(),
            )
            .then_refused(refused!(DomainError::InvalidGates(_)));
    }
}

// ---- advancing ----

#[test]
fn advancing_moves_to_the_next_step_with_the_figures() {
    let state = given::<Deployment>(rolling())
        .when(
            C::AdvanceRollout {
                rollout_id: "ro1".parse().unwrap(),
                figures: Some(figures()),
            },
            &Meta::new("rollout-controller"),
        )
        .then_events(vec![
            RolloutAdvanced {
                deployment_id: DEP.parse().unwrap(),
                rollout_id: "ro1".parse().unwrap(),
                step: 1,
                percent: 25,
                figures: Some(figures()),
            }
            .into(),
        ]);
    let r = state.active_rollout().unwrap();
    assert_eq!((r.step, r.percent), (1, 25));
    assert_eq!(r.last_figures, Some(figures()));
}

#[test]
fn advancing_a_paused_rollout_is_refused() {
    given::<Deployment>(and(rolling(), [paused("ro1")]))
        .when(advance("ro1"), &alice())
        .then_refused(refused!(DomainError::RolloutPaused { .. }));
}

#[test]
fn advancing_past_the_last_step_is_refused() {
    let e = given::<Deployment>(rolling_at_full_traffic())
        .when(advance("ro1"), &alice())
        .then_refused(refused!(DomainError::RolloutAtLastStep {
            percent: 100,
            ..
        }));
    assert!(e.to_string().contains("complete"), "{e}");
}

#[test]
fn advancing_with_unstorable_figures_is_refused() {
    let mut f = figures();
    f.error_rate = f64::NAN;
    given::<Deployment>(rolling())
        .when(
            C::AdvanceRollout {
                rollout_id: "ro1".parse().unwrap(),
                figures: Some(f),
            },
            &alice(),
        )
        .then_refused(refused!(DomainError::InvalidFigures(_)));
}

#[test]
fn rollout_commands_naming_an_unknown_rollout_are_refused() {
    for cmd in [
        advance("ro9"),
        pause("ro9"),
        resume("ro9"),
        roll_back("ro9"),
        complete("ro9"),
    ] {
        let e = given::<Deployment>(rolling())
            .when(cmd, &because("testing"))
            .then_refused(refused!(DomainError::RolloutNotActive { .. }));
        assert!(e.to_string().contains("ro9"), "{e}");
    }
}

#[test]
fn rollout_commands_naming_a_finished_rollout_are_refused() {
    let histories = [
        and(rolling(), [rolled_back("ro1")]),
        and(rolling_at_full_traffic(), [completed("ro1", "b")]),
    ];
    for history in histories {
        for cmd in [
            advance("ro1"),
            pause("ro1"),
            resume("ro1"),
            roll_back("ro1"),
            complete("ro1"),
        ] {
            given::<Deployment>(history.clone())
                .when(cmd, &because("testing"))
                .then_refused(refused!(DomainError::RolloutNotActive { .. }));
        }
    }
}

// ---- pausing and resuming ----

#[test]
fn pausing_holds_the_traffic_split() {
    let state = given::<Deployment>(and(rolling(), [advanced("ro1", 1, 25)]))
        .when(pause("ro1"), &alice())
        .then_events(vec![paused("ro1")]);
    let r = state.active_rollout().unwrap();
    assert!(r.paused);
    assert_eq!(r.percent, 25);
}

#[test]
fn pausing_a_paused_rollout_is_refused() {
    given::<Deployment>(and(rolling(), [paused("ro1")]))
        .when(pause("ro1"), &alice())
        .then_refused(refused!(DomainError::RolloutPaused { .. }));
}

#[test]
fn resuming_a_paused_rollout_lets_it_advance_again() {
    let state = given::<Deployment>(and(rolling(), [paused("ro1")]))
        .when(resume("ro1"), &alice())
        .then_events(vec![resumed("ro1")]);
    assert!(!state.active_rollout().unwrap().paused);
    given::<Deployment>(and(rolling(), [paused("ro1"), resumed("ro1")]))
        .when(advance("ro1"), &alice())
        .then_events(vec![advanced("ro1", 1, 25)]);
}

#[test]
fn resuming_a_running_rollout_is_refused() {
    given::<Deployment>(rolling())
        .when(resume("ro1"), &alice())
        .then_refused(refused!(DomainError::RolloutNotPaused { .. }));
}

// ---- rolling back ----

#[test]
fn rolling_back_returns_all_traffic_to_the_serving_revision() {
    let state = given::<Deployment>(and(rolling(), [advanced("ro1", 1, 25)]))
        .when(
            C::RollBack {
                rollout_id: "ro1".parse().unwrap(),
                figures: Some(figures()),
            },
            &because("error rate above the gate"),
        )
        .then_events(vec![
            RolloutRolledBack {
                deployment_id: DEP.parse().unwrap(),
                rollout_id: "ro1".parse().unwrap(),
                figures: Some(figures()),
            }
            .into(),
        ]);
    assert_eq!(state.serving_revision(), Some("a"));
    assert!(state.active_rollout().is_none());
    let [finished] = state.rollout_history() else {
        panic!("one finished rollout expected");
    };
    assert_eq!(finished.rollout.rollout_id, "ro1");
    assert_eq!(finished.rollout.percent, 25);
    assert_eq!(
        finished.outcome,
        RolloutOutcome::RolledBack {
            figures: Some(figures())
        }
    );
}

#[test]
fn a_paused_rollout_can_be_rolled_back() {
    given::<Deployment>(and(rolling(), [paused("ro1")]))
        .when(roll_back("ro1"), &because("operator decision"))
        .then_events(vec![rolled_back("ro1")]);
}

#[test]
fn rolling_back_without_a_reason_is_refused() {
    let e = given::<Deployment>(rolling())
        .when(roll_back("ro1"), &alice())
        .then_refused(refused!(DomainError::ReasonRequired { .. }));
    assert!(e.to_string().contains("ro1"), "{e}");
    given::<Deployment>(rolling())
        .when(roll_back("ro1"), &because("   "))
        .then_refused(refused!(DomainError::ReasonRequired { .. }));
}

// ---- completing ----

#[test]
fn completing_at_full_traffic_makes_the_new_revision_serve() {
    let state = given::<Deployment>(rolling_at_full_traffic())
        .when(complete("ro1"), &alice())
        .then_events(vec![completed("ro1", "b")]);
    assert_eq!(state.serving_revision(), Some("b"));
    assert!(state.active_rollout().is_none());
    assert_eq!(
        state.rollout_history()[0].outcome,
        RolloutOutcome::Completed
    );
}

#[test]
fn completing_a_paused_rollout_is_refused() {
    given::<Deployment>(and(rolling_at_full_traffic(), [paused("ro1")]))
        .when(complete("ro1"), &alice())
        .then_refused(refused!(DomainError::RolloutPaused { .. }));
}

#[test]
fn completing_before_full_traffic_is_refused() {
    let e = given::<Deployment>(and(rolling(), [advanced("ro1", 1, 25)]))
        .when(complete("ro1"), &alice())
        .then_refused(refused!(DomainError::RolloutNotAtFullTraffic {
            percent: 25,
            ..
        }));
    assert!(e.to_string().contains("25 %"), "{e}");
}

// ---- lifecycles ----

#[test]
fn a_rollout_from_a_to_b_completes_and_b_serves() {
    let op = alice();
    let mut h = step(
        Vec::new(),
        C::Create {
            deployment_id: DEP.parse().unwrap(),
            limits: limits(),
        },
        &op,
    );
    h = step(
        h,
        C::SetServingRevision {
            revision_id: "a".parse().unwrap(),
            verified: true,
        },
        &op,
    );
    h = step(h, start("ro1", "b", &[5, 25, 50, 100]), &op);
    for _ in 0..3 {
        h = step(h, advance("ro1"), &op);
    }
    h = step(h, complete("ro1"), &op);
    assert_eq!(
        h,
        and(rolling_at_full_traffic(), [completed("ro1", "b")]),
        "the decisions produce exactly the expected history"
    );
    let state = Deployment::from_events(&h);
    assert_eq!(state.serving_revision(), Some("b"));
    assert!(state.active_rollout().is_none());
    assert_eq!(state.rollout_history().len(), 1);
}

#[test]
fn a_rolled_back_rollout_leaves_a_serving_and_a_new_rollout_may_start() {
    let mut h = rolling();
    h = step(h, advance("ro1"), &alice());
    h = step(h, roll_back("ro1"), &because("ttft p99 over the gate"));
    let state = Deployment::from_events(&h);
    assert_eq!(state.serving_revision(), Some("a"));
    assert!(state.active_rollout().is_none());

    h = step(h, start("ro2", "b", &[50, 100]), &alice());
    let state = Deployment::from_events(&h);
    let r = state.active_rollout().unwrap();
    assert_eq!(
        (r.rollout_id.as_str(), r.from_revision.as_str(), r.percent),
        ("ro2", "a", 50)
    );

    h = step(h, advance("ro2"), &alice());
    h = step(h, complete("ro2"), &alice());
    let state = Deployment::from_events(&h);
    assert_eq!(state.serving_revision(), Some("b"));
    let outcomes: Vec<_> = state
        .rollout_history()
        .iter()
        .map(|f| (f.rollout.rollout_id.as_str(), &f.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("ro1", &RolloutOutcome::RolledBack { figures: None }),
            ("ro2", &RolloutOutcome::Completed)
        ]
    );
    // Outside a rollout the serving revision may be set directly again.
    given::<Deployment>(h)
        .when(
            C::SetServingRevision {
                revision_id: "a".parse().unwrap(),
                verified: true,
            },
            &alice(),
        )
        .then_events(vec![serving("a")]);
}
