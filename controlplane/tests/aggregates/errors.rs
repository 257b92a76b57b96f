//! The refusal catalogue: each error's HTTP class and stable code, which the
//! API maps in one place.

use std::collections::BTreeSet;

use stoker_controlplane::domain::{DomainError, ErrorKind};

fn s(x: &str) -> String {
    x.to_owned()
}

/// One instance of every variant with the class it must map to.
fn catalogue() -> Vec<(DomainError, ErrorKind, &'static str)> {
    use DomainError::*;
    use ErrorKind::{Conflict as C, Invalid as I, NotFound as N};
    let dr = || (s("chat"), s("ro1"));
    vec![
        (
            AlreadyExists {
                kind: "deployment",
                id: s("chat"),
            },
            C,
            "already_exists",
        ),
        (
            NotFound {
                kind: "deployment",
                id: s("chat"),
            },
            N,
            "not_found",
        ),
        (
            Retired {
                deployment_id: s("chat"),
            },
            C,
            "retired",
        ),
        (
            InvalidId {
                kind: "revision",
                id: s("a/b"),
                detail: s("'/'"),
            },
            I,
            "invalid_id",
        ),
        (InvalidLimits(s("x")), I, "invalid_limits"),
        (
            RevisionNotVerified {
                deployment_id: s("chat"),
                revision_id: s("b"),
            },
            I,
            "revision_not_verified",
        ),
        (
            RolloutActive {
                deployment_id: dr().0,
                rollout_id: dr().1,
            },
            C,
            "rollout_active",
        ),
        (
            NoServingRevision {
                deployment_id: s("chat"),
            },
            I,
            "no_serving_revision",
        ),
        (
            SameRevision {
                deployment_id: s("chat"),
                revision_id: s("a"),
            },
            I,
            "same_revision",
        ),
        (
            RolloutAlreadyActive {
                deployment_id: dr().0,
                rollout_id: dr().1,
            },
            C,
            "rollout_already_active",
        ),
        (InvalidSteps(s("x")), I, "invalid_steps"),
        (InvalidGates(s("x")), I, "invalid_gates"),
        (InvalidFigures(s("x")), I, "invalid_figures"),
        (
            RolloutNotActive {
                deployment_id: dr().0,
                rollout_id: dr().1,
            },
            C,
            "rollout_not_active",
        ),
        (
            RolloutPaused {
                deployment_id: dr().0,
                rollout_id: dr().1,
            },
            C,
            "rollout_paused",
        ),
        (
            RolloutNotPaused {
                deployment_id: dr().0,
                rollout_id: dr().1,
            },
            C,
            "rollout_not_paused",
        ),
        (
            RolloutAtLastStep {
                deployment_id: dr().0,
                rollout_id: dr().1,
                percent: 100,
            },
            C,
            "rollout_at_last_step",
        ),
        (
            RolloutNotAtFullTraffic {
                deployment_id: dr().0,
                rollout_id: dr().1,
                percent: 50,
            },
            C,
            "rollout_not_at_full_traffic",
        ),
        (
            ReasonRequired {
                action: s("rolling back rollout \"ro1\""),
            },
            I,
            "reason_required",
        ),
        (
            RevisionAbsent {
                deployment_id: s("chat"),
                revision_id: s("b"),
                model_uri: s("file:///m"),
            },
            N,
            "revision_absent",
        ),
        (
            ArtifactUnreadable {
                revision_id: s("b"),
                model_uri: s("file:///m"),
                detail: s("EIO"),
            },
            I,
            "artifact_unreadable",
        ),
        (
            HashMismatch {
                revision_id: s("b"),
                expected: s("aa"),
                actual: s("bb"),
            },
            I,
            "hash_mismatch",
        ),
        (InvalidEnvelope(s("x")), I, "invalid_envelope"),
        (
            AlreadyRegistered {
                executor_id: s("ex-1"),
            },
            C,
            "already_registered",
        ),
        (
            AlreadyDraining {
                executor_id: s("ex-1"),
            },
            C,
            "already_draining",
        ),
        (
            AlreadyDrained {
                executor_id: s("ex-1"),
            },
            C,
            "already_drained",
        ),
        (
            NotDraining {
                executor_id: s("ex-1"),
            },
            C,
            "not_draining",
        ),
        (
            ExecutorLost {
                executor_id: s("ex-1"),
            },
            C,
            "executor_lost",
        ),
        (
            ExecutorNotActive {
                executor_id: s("ex-1"),
                status: "drained",
            },
            C,
            "executor_not_active",
        ),
        (
            BatchStatus {
                batch_id: s("chat"),
                status: "completed",
                action: "cancelled",
            },
            C,
            "batch_status_conflict",
        ),
    ]
}

#[test]
fn every_refusal_has_its_http_class_and_code() {
    for (e, kind, code) in catalogue() {
        assert_eq!(e.kind(), kind, "{e:?}");
        assert_eq!(e.code(), code, "{e:?}");
    }
}

#[test]
fn codes_are_distinct_snake_case() {
    let codes: Vec<&str> = catalogue().iter().map(|(e, _, _)| e.code()).collect();
    let distinct: BTreeSet<&str> = codes.iter().copied().collect();
    assert_eq!(distinct.len(), codes.len(), "a code is used twice");
    for c in codes {
        assert!(
            c.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_'),
            "{c}"
        );
    }
}

#[test]
fn messages_are_sentences_naming_the_ids() {
    for (e, _, _) in catalogue() {
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
