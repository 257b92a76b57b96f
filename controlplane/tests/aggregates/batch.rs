//! A batch's life: created, started, cancelled or finalized, ended; each
//! step allowed only from the states that lead to it.

use stoker_controlplane::domain::{Batch, BatchCommand as C, DomainError};
use stoker_schemas::events::*;

use super::given::*;

const B: &str = "batch_1";

fn created() -> BatchEvent {
    BatchCreated {
        batch_id: B.parse().unwrap(),
        tenant: "acme".into(),
        input_file_id: "file-1".parse().unwrap(),
        endpoint: "/v1/completions".into(),
        completion_window: "24h".into(),
        expires_at: 1_900_000_000,
        total_rows: 10,
        shard_rows: 5,
        estimated_tokens: 100,
        metadata: Default::default(),
    }
    .into()
}

fn started() -> BatchEvent {
    BatchStarted {
        batch_id: B.parse().unwrap(),
        shards: 2,
    }
    .into()
}

fn finalizing() -> BatchEvent {
    BatchFinalizing {
        batch_id: B.parse().unwrap(),
    }
    .into()
}

fn end(outcome: BatchOutcome) -> C {
    C::End {
        outcome,
        output_file_id: Some("file-o".parse().unwrap()),
        error_file_id: None,
        completed: 10,
        failed: 0,
    }
}

fn ended(outcome: BatchOutcome) -> BatchEvent {
    BatchEnded {
        batch_id: B.parse().unwrap(),
        outcome,
        output_file_id: Some("file-o".parse().unwrap()),
        error_file_id: None,
        completed: 10,
        failed: 0,
    }
    .into()
}

#[test]
fn a_batch_goes_from_validating_to_completed() {
    let BatchEvent::BatchCreated(c) = created() else {
        unreachable!()
    };
    let s = given::<Batch>([])
        .when(C::Create(c), &alice())
        .then_events(vec![created()]);
    assert_eq!(s.status(), "validating");
    let s = given::<Batch>([created()])
        .when(C::Start { shards: 2 }, &alice())
        .then_events(vec![started()]);
    assert_eq!(s.status(), "in_progress");
    let s = given::<Batch>([created(), started()])
        .when(C::Finalize, &alice())
        .then_events(vec![finalizing()]);
    assert_eq!(s.status(), "finalizing");
    let s = given::<Batch>([created(), started(), finalizing()])
        .when(end(BatchOutcome::Completed), &alice())
        .then_events(vec![ended(BatchOutcome::Completed)]);
    assert_eq!(s.status(), "completed");
}

#[test]
fn starting_or_cancelling_twice_changes_nothing() {
    given::<Batch>([created(), started()])
        .when(C::Start { shards: 2 }, &alice())
        .then_events(vec![]);
    let cancel: BatchEvent = BatchCancelRequested {
        batch_id: B.parse().unwrap(),
    }
    .into();
    let s = given::<Batch>([created(), started()])
        .when(C::Cancel, &alice())
        .then_events(vec![cancel.clone()]);
    assert_eq!(s.status(), "cancelling");
    let s = given::<Batch>([created(), started(), cancel.clone(), finalizing()])
        .when(C::Cancel, &alice())
        .then_events(vec![]);
    assert_eq!(
        s.status(),
        "cancelling",
        "a cancel being finalized still shows cancelling"
    );
}

#[test]
fn an_ended_batch_refuses_cancel_and_finalize() {
    for outcome in [
        BatchOutcome::Completed,
        BatchOutcome::Cancelled,
        BatchOutcome::Expired,
    ] {
        let history = [created(), started(), finalizing(), ended(outcome)];
        given::<Batch>(history.clone())
            .when(C::Cancel, &alice())
            .then_refused(refused!(DomainError::BatchStatus { .. }));
        given::<Batch>(history)
            .when(C::Finalize, &alice())
            .then_refused(refused!(DomainError::BatchStatus { .. }));
    }
}

#[test]
fn ending_needs_finalizing_and_an_unknown_batch_is_not_found() {
    given::<Batch>([created(), started()])
        .when(end(BatchOutcome::Completed), &alice())
        .then_refused(refused!(DomainError::BatchStatus { .. }));
    given::<Batch>([])
        .when(C::Cancel, &alice())
        .then_refused(refused!(DomainError::NotFound { kind: "batch", .. }));
    given::<Batch>([created()])
        .when(
            C::Create(match created() {
                BatchEvent::BatchCreated(c) => c,
                _ => unreachable!(),
            }),
            &alice(),
        )
        .then_refused(refused!(DomainError::AlreadyExists { .. }));
}

#[test]
fn a_failed_batch_cannot_fail_again() {
    let failed: BatchEvent = BatchFailed {
        batch_id: B.parse().unwrap(),
        code: "input_file_missing".into(),
        message: "gone".into(),
    }
    .into();
    let s = given::<Batch>([created(), started()])
        .when(
            C::Fail {
                code: "input_file_missing".into(),
                message: "gone".into(),
            },
            &alice(),
        )
        .then_events(vec![failed.clone()]);
    assert_eq!(s.status(), "failed");
    given::<Batch>([created(), started(), failed])
        .when(
            C::Fail {
                code: "x".into(),
                message: "y".into(),
            },
            &alice(),
        )
        .then_refused(refused!(DomainError::BatchStatus { .. }));
}
