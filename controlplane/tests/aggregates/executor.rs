//! An executor's life: registered, draining, drained or lost, and registered
//! again for a new life.

use stoker_controlplane::domain::{DomainError, Executor, ExecutorCommand as C, ExecutorStatus};
use stoker_schemas::events::*;

use super::given::*;

const EX: &str = "ex-1";

fn register() -> C {
    C::Register {
        executor_id: EX.parse().unwrap(),
        deployment_id: DEP.parse().unwrap(),
        revision_id: "rev-b".parse().unwrap(),
    }
}

fn registered() -> ExecutorEvent {
    ExecutorRegistered {
        executor_id: EX.parse().unwrap(),
        deployment_id: DEP.parse().unwrap(),
        revision_id: "rev-b".parse().unwrap(),
    }
    .into()
}

fn draining() -> ExecutorEvent {
    ExecutorDraining {
        executor_id: EX.parse().unwrap(),
        deployment_id: DEP.parse().unwrap(),
    }
    .into()
}

fn drained() -> ExecutorEvent {
    ExecutorDrained {
        executor_id: EX.parse().unwrap(),
        deployment_id: DEP.parse().unwrap(),
    }
    .into()
}

fn lost() -> ExecutorEvent {
    ExecutorLost {
        executor_id: EX.parse().unwrap(),
        deployment_id: DEP.parse().unwrap(),
    }
    .into()
}

#[test]
fn registering_makes_the_executor_active() {
    let state = given::<Executor>([])
        .when(register(), &alice())
        .then_events(vec![registered()]);
    assert_eq!(state.status(), ExecutorStatus::Active);
    assert_eq!(
        (
            state.executor_id(),
            state.deployment_id(),
            state.revision_id()
        ),
        (EX, DEP, "rev-b")
    );
    assert_eq!(state.lives(), 1);
}

#[test]
fn registering_a_live_executor_is_refused() {
    for history in [vec![registered()], vec![registered(), draining()]] {
        given::<Executor>(history)
            .when(register(), &alice())
            .then_refused(refused!(DomainError::AlreadyRegistered { .. }));
    }
}

#[test]
fn an_executor_that_ended_may_register_again() {
    for history in [
        vec![registered(), draining(), drained()],
        vec![registered(), lost()],
    ] {
        let state = given::<Executor>(history)
            .when(register(), &alice())
            .then_events(vec![registered()]);
        assert_eq!(state.status(), ExecutorStatus::Active);
        assert_eq!(state.lives(), 2);
    }
}

#[test]
fn draining_with_a_reason_stops_new_work() {
    let state = given::<Executor>([registered()])
        .when(C::Drain, &because("scale in"))
        .then_events(vec![draining()]);
    assert_eq!(state.status(), ExecutorStatus::Draining);
}

#[test]
fn draining_without_a_reason_is_refused() {
    let e = given::<Executor>([registered()])
        .when(C::Drain, &alice())
        .then_refused(refused!(DomainError::ReasonRequired { .. }));
    assert!(e.to_string().contains(EX), "{e}");
}

#[test]
fn draining_an_unknown_executor_is_not_found() {
    given::<Executor>([])
        .when(C::Drain, &because("scale in"))
        .then_refused(refused!(DomainError::NotFound {
            kind: "executor",
            ..
        }));
}

#[test]
fn draining_twice_is_refused() {
    given::<Executor>([registered(), draining()])
        .when(C::Drain, &because("scale in"))
        .then_refused(refused!(DomainError::AlreadyDraining { .. }));
}

#[test]
fn draining_a_drained_executor_is_refused() {
    given::<Executor>([registered(), draining(), drained()])
        .when(C::Drain, &because("scale in"))
        .then_refused(refused!(DomainError::AlreadyDrained { .. }));
}

#[test]
fn draining_a_lost_executor_is_refused() {
    given::<Executor>([registered(), lost()])
        .when(C::Drain, &because("scale in"))
        .then_refused(refused!(DomainError::ExecutorLost { .. }));
}

#[test]
fn a_draining_executor_can_be_marked_drained() {
    let state = given::<Executor>([registered(), draining()])
        .when(C::MarkDrained, &alice())
        .then_events(vec![drained()]);
    assert_eq!(state.status(), ExecutorStatus::Drained);
}

#[test]
fn marking_drained_is_refused_unless_draining() {
    for history in [
        vec![registered()],
        vec![registered(), draining(), drained()],
        vec![registered(), lost()],
    ] {
        given::<Executor>(history)
            .when(C::MarkDrained, &alice())
            .then_refused(refused!(DomainError::NotDraining { .. }));
    }
    given::<Executor>([])
        .when(C::MarkDrained, &alice())
        .then_refused(refused!(DomainError::NotFound { .. }));
}

#[test]
fn an_active_or_draining_executor_can_be_marked_lost() {
    for history in [vec![registered()], vec![registered(), draining()]] {
        let state = given::<Executor>(history)
            .when(C::MarkLost, &alice())
            .then_events(vec![lost()]);
        assert_eq!(state.status(), ExecutorStatus::Lost);
    }
}

#[test]
fn marking_lost_is_refused_once_the_executor_ended() {
    for history in [
        vec![registered(), draining(), drained()],
        vec![registered(), lost()],
    ] {
        given::<Executor>(history)
            .when(C::MarkLost, &alice())
            .then_refused(refused!(DomainError::ExecutorNotActive { .. }));
    }
    given::<Executor>([])
        .when(C::MarkLost, &alice())
        .then_refused(refused!(DomainError::NotFound { .. }));
}
