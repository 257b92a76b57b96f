//! Registering a revision: only an artifact that was read and hashes to the
//! declared sha256 becomes a revision traffic may go to.

use stoker_controlplane::domain::{ArtifactCheck, DomainError, Revision, RevisionCommand};
use stoker_schemas::events::*;
use stoker_schemas::ids::RevisionId;

use super::given::*;

fn sha() -> String {
    "ab12".repeat(16)
}

fn register(
    revision_id: &str,
    artifact: ArtifactCheck,
    deployment_exists: bool,
) -> RevisionCommand {
    RevisionCommand::Register {
        deployment_id: DEP.parse().unwrap(),
        revision_id: revision_id.parse().unwrap(),
        model_uri: "file:///models/b.gguf".into(),
        model_sha256: sha(),
        tokenizer_hash: "tok1".into(),
        chat_template_hash: "tpl1".into(),
        chat_template_origin: Some("--chat-template tools.jinja".into()),
        precision: "q4_1".into(),
        runtime_version: "0.1.0".into(),
        artifact,
        deployment_exists,
    }
}

fn verified(sha256: String) -> ArtifactCheck {
    ArtifactCheck::Verified { sha256 }
}

fn registered() -> RevisionEvent {
    RevisionRegistered {
        deployment_id: DEP.parse().unwrap(),
        revision_id: "rev-b".parse().unwrap(),
        model_uri: "file:///models/b.gguf".into(),
        model_sha256: sha(),
        tokenizer_hash: "tok1".into(),
        chat_template_hash: "tpl1".into(),
        chat_template_origin: Some("--chat-template tools.jinja".into()),
        precision: "q4_1".into(),
        runtime_version: "0.1.0".into(),
    }
    .into()
}

#[test]
fn a_verified_artifact_registers_the_revision() {
    let state = given::<Revision>([])
        .when(register("rev-b", verified(sha()), true), &alice())
        .then_events(vec![registered()]);
    assert!(state.is_verified());
    let r = state.registered().unwrap();
    assert_eq!(
        (r.deployment_id.as_str(), r.revision_id.as_str()),
        (DEP, "rev-b")
    );
    assert_eq!(r.model_sha256, sha());
    assert_eq!(r.precision, "q4_1");
}

#[test]
fn hashes_compare_case_insensitively_and_are_stored_lowercase() {
    let mut cmd = register("rev-b", verified(sha()), true);
    let RevisionCommand::Register { model_sha256, .. } = &mut cmd;
    *model_sha256 = sha().to_uppercase();
    given::<Revision>([])
        .when(cmd, &alice())
        .then_events(vec![registered()]);
}

#[test]
fn registering_twice_is_refused() {
    given::<Revision>([registered()])
        .when(register("rev-b", verified(sha()), true), &alice())
        .then_refused(refused!(DomainError::AlreadyExists {
            kind: "revision",
            ..
        }));
}

#[test]
fn registering_for_an_absent_deployment_is_not_found() {
    let e = given::<Revision>([])
        .when(register("rev-b", verified(sha()), false), &alice())
        .then_refused(refused!(DomainError::NotFound {
            kind: "deployment",
            ..
        }));
    assert!(e.to_string().contains(DEP), "{e}");
}

#[test]
fn an_absent_artifact_is_refused_for_good() {
    let e = given::<Revision>([])
        .when(register("rev-b", ArtifactCheck::Absent, true), &alice())
        .then_refused(refused!(DomainError::RevisionAbsent { .. }));
    assert!(e.to_string().contains("file:///models/b.gguf"), "{e}");
}

#[test]
fn an_unreadable_artifact_is_refused() {
    let e = given::<Revision>([])
        .when(
            register(
                "rev-b",
                ArtifactCheck::Unreadable("permission denied".into()),
                true,
            ),
            &alice(),
        )
        .then_refused(refused!(DomainError::ArtifactUnreadable { .. }));
    assert!(e.to_string().contains("permission denied"), "{e}");
}

#[test]
fn a_hash_mismatch_is_refused_with_both_hashes() {
    let actual = "cd34".repeat(16);
    let e = given::<Revision>([])
        .when(register("rev-b", verified(actual.clone()), true), &alice())
        .then_refused(refused!(DomainError::HashMismatch { .. }));
    let DomainError::HashMismatch {
        expected,
        actual: got,
        ..
    } = e
    else {
        unreachable!()
    };
    assert_eq!((expected, got), (sha(), actual));
}

#[test]
fn revision_ids_are_checked() {
    // A command carries a parsed `RevisionId`: the malformed ones never make
    // one, so no command can name them.
    for id in ["", "a/b", "sp ace", "ünï", &"r".repeat(65)] {
        let e = id.parse::<RevisionId>().unwrap_err();
        assert_eq!(e.kind, "revision", "{id:?}");
    }
    let longest = "A-z_0.9".repeat(9) + "x";
    assert_eq!(longest.len(), 64);
    let state = given::<Revision>([])
        .when(register(&longest, verified(sha()), true), &alice())
        .then_events(vec![
            RevisionRegistered {
                deployment_id: DEP.parse().unwrap(),
                revision_id: longest.parse().unwrap(),
                model_uri: "file:///models/b.gguf".into(),
                model_sha256: sha(),
                tokenizer_hash: "tok1".into(),
                chat_template_hash: "tpl1".into(),
                chat_template_origin: Some("--chat-template tools.jinja".into()),
                precision: "q4_1".into(),
                runtime_version: "0.1.0".into(),
            }
            .into(),
        ]);
    assert_eq!(state.registered().unwrap().revision_id, longest);
}
