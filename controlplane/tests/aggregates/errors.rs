//! The refusals: each error's HTTP class and its code in the one error
//! catalogue (`stoker_schemas::codes::ErrorCode`), which the API maps in one
//! place.

use stoker_controlplane::domain::{DomainError, ErrorKind};
use stoker_schemas::codes::ErrorCode;
use stoker_schemas::ids::{DeploymentId, RolloutId};

fn s(x: &str) -> String {
    x.to_owned()
}

/// A well-formed id of the field's kind.
fn id<T: std::str::FromStr<Err: std::fmt::Debug>>(x: &str) -> T {
    x.parse().unwrap()
}

/// One instance of every variant with the class it must map to.
fn catalogue() -> Vec<(DomainError, ErrorKind)> {
    use DomainError::*;
    use ErrorKind::{Conflict as C, Invalid as I, NotFound as N};
    let dr = || (id::<DeploymentId>("chat"), id::<RolloutId>("ro1"));
    vec![
        (
            AlreadyExists {
                kind: "deployment",
                id: s("chat"),
            },
            C,
        ),
        (
            NotFound {
                kind: "deployment",
                id: s("chat"),
            },
            N,
        ),
        (
            Retired {
                deployment_id: id("chat"),
            },
            C,
        ),
        (
            InvalidId {
                kind: "revision",
                id: s("a/b"),
                detail: s("'/'"),
            },
            I,
        ),
        (InvalidLimits(s("x")), I),
        (
            RevisionNotVerified {
                deployment_id: id("chat"),
                revision_id: id("b"),
            },
            I,
        ),
        (
            RolloutActive {
                deployment_id: dr().0,
                rollout_id: dr().1,
            },
            C,
        ),
        (
            NoServingRevision {
                deployment_id: id("chat"),
            },
            I,
        ),
        (
            SameRevision {
                deployment_id: id("chat"),
                revision_id: id("a"),
            },
            I,
        ),
        (
            RolloutAlreadyActive {
                deployment_id: dr().0,
                rollout_id: dr().1,
            },
            C,
        ),
        (InvalidSteps(s("x")), I),
        (InvalidGates(s("x")), I),
        (InvalidFigures(s("x")), I),
        (
            RolloutNotActive {
                deployment_id: dr().0,
                rollout_id: dr().1,
            },
            C,
        ),
        (
            RolloutPaused {
                deployment_id: dr().0,
                rollout_id: dr().1,
            },
            C,
        ),
        (
            RolloutNotPaused {
                deployment_id: dr().0,
                rollout_id: dr().1,
            },
            C,
        ),
        (
            RolloutAtLastStep {
                deployment_id: dr().0,
                rollout_id: dr().1,
                percent: 100,
            },
            C,
        ),
        (
            RolloutNotAtFullTraffic {
                deployment_id: dr().0,
                rollout_id: dr().1,
                percent: 50,
            },
            C,
        ),
        (
            ReasonRequired {
                action: s("rolling back rollout \"ro1\""),
            },
            I,
        ),
        (
            RevisionAbsent {
                deployment_id: id("chat"),
                revision_id: id("b"),
                model_uri: s("file:///m"),
            },
            N,
        ),
        (
            ArtifactUnreadable {
                revision_id: id("b"),
                model_uri: s("file:///m"),
                detail: s("EIO"),
            },
            I,
        ),
        (
            HashMismatch {
                revision_id: id("b"),
                expected: s("aa"),
                actual: s("bb"),
            },
            I,
        ),
        (InvalidEnvelope(s("x")), I),
        (
            AlreadyRegistered {
                executor_id: id("ex-1"),
            },
            C,
        ),
        (
            AlreadyDraining {
                executor_id: id("ex-1"),
            },
            C,
        ),
        (
            AlreadyDrained {
                executor_id: id("ex-1"),
            },
            C,
        ),
        (
            NotDraining {
                executor_id: id("ex-1"),
            },
            C,
        ),
        (
            ExecutorLost {
                executor_id: id("ex-1"),
            },
            C,
        ),
        (
            ExecutorNotActive {
                executor_id: id("ex-1"),
                status: "drained",
            },
            C,
        ),
        (
            BatchStatus {
                batch_id: id("batch_chat"),
                status: "completed",
                action: "cancelled",
            },
            C,
        ),
    ]
}

#[test]
fn every_refusal_has_its_http_class_and_a_catalogue_code_of_that_class() {
    for (e, kind) in catalogue() {
        assert_eq!(e.kind(), kind, "{e:?}");
        let want = match (&e, kind) {
            (DomainError::RevisionAbsent { .. }, _) => ErrorCode::RevisionAbsent,
            (_, ErrorKind::NotFound) => ErrorCode::NotFound,
            (_, ErrorKind::Conflict) => ErrorCode::Conflict,
            (_, ErrorKind::Invalid) => ErrorCode::InvalidValue,
        };
        assert_eq!(e.error_code(), want, "{e:?}");
        assert!(ErrorCode::ALL.contains(&e.error_code()));
    }
}

#[test]
fn messages_are_sentences_naming_the_ids() {
    for (e, _) in catalogue() {
        let m = e.to_string();
        assert!(!m.is_empty() && !m.ends_with('.'), "{m}");
        let ids = ["chat", "ro1", "ex-1", "\"b\"", "a/b", "\"a\""];
        let names_an_id = ids.iter().any(|id| m.contains(id));
        let free_text = matches!(
            e,
            DomainError::InvalidLimits(_)
                | DomainError::InvalidSteps(_)
                | DomainError::InvalidGates(_)
                | DomainError::InvalidFigures(_)
                | DomainError::InvalidEnvelope(_)
        );
        assert!(names_an_id || free_text, "{m}");
    }
}
