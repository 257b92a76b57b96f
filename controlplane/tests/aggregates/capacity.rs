//! Recording capacity profiles: only for registered revisions, only with
//! plausible figures, and every re-measurement kept with the latest winning.

use stoker_controlplane::domain::{CapacityProfile, CapacityProfileCommand, DomainError};
use stoker_schemas::events::*;

use super::given::*;

fn envelope() -> CapacityEnvelope {
    CapacityEnvelope {
        concurrency: 8,
        active_tokens: 16_384,
        ttft_p95_ms: 120.0,
        tpot_p95_ms: 22.5,
        throughput_tok_s: 310.0,
        prefill_tok_s: Some(2400.0),
        decode_tok_s: None,
        prompt_tokens_p95: None,
        output_tokens_p95: None,
    }
}

fn record(envelope: CapacityEnvelope, revision_registered: bool) -> CapacityProfileCommand {
    CapacityProfileCommand::Record {
        deployment_id: DEP.parse().unwrap(),
        revision_id: "rev-b".parse().unwrap(),
        workload: "short-chat".into(),
        envelope,
        revision_registered,
    }
}

fn recorded(envelope: CapacityEnvelope) -> CapacityProfileEvent {
    CapacityProfileRecorded {
        deployment_id: DEP.parse().unwrap(),
        revision_id: "rev-b".parse().unwrap(),
        workload: "short-chat".into(),
        envelope,
    }
    .into()
}

#[test]
fn recording_a_profile_stores_the_envelope() {
    let state = given::<CapacityProfile>([])
        .when(record(envelope(), true), &alice())
        .then_events(vec![recorded(envelope())]);
    assert_eq!(state.envelope(), Some(&envelope()));
    assert_eq!(state.recordings(), 1);
}

#[test]
fn recording_again_appends_and_the_latest_wins() {
    let mut faster = envelope();
    faster.throughput_tok_s = 400.0;
    let state = given::<CapacityProfile>([recorded(envelope())])
        .when(record(faster.clone(), true), &alice())
        .then_events(vec![recorded(faster.clone())]);
    assert_eq!(state.envelope(), Some(&faster));
    assert_eq!(state.recordings(), 2);
}

#[test]
fn recording_for_an_unregistered_revision_is_refused() {
    given::<CapacityProfile>([])
        .when(record(envelope(), false), &alice())
        .then_refused(refused!(DomainError::RevisionNotVerified { .. }));
}

#[test]
fn implausible_envelopes_are_refused() {
    let with = |f: fn(&mut CapacityEnvelope)| {
        let mut e = envelope();
        f(&mut e);
        e
    };
    let cases = [
        with(|e| e.concurrency = 0),
        with(|e| e.active_tokens = 0),
        with(|e| e.ttft_p95_ms = 0.0),
        with(|e| e.tpot_p95_ms = f64::NAN),
        with(|e| e.throughput_tok_s = -1.0),
        with(|e| e.throughput_tok_s = f64::INFINITY),
        with(|e| e.prefill_tok_s = Some(0.0)),
        with(|e| e.decode_tok_s = Some(f64::NAN)),
    ];
    for e in cases {
        given::<CapacityProfile>([])
            .when(record(e, true), &alice())
            .then_refused(refused!(DomainError::InvalidEnvelope(_)));
    }
}

#[test]
fn a_workload_name_must_be_a_safe_stream_id() {
    let cmd = CapacityProfileCommand::Record {
        deployment_id: DEP.parse().unwrap(),
        revision_id: "rev-b".parse().unwrap(),
        workload: "short/chat".into(),
        envelope: envelope(),
        revision_registered: true,
    };
    given::<CapacityProfile>([])
        .when(cmd, &alice())
        .then_refused(refused!(DomainError::InvalidId {
            kind: "workload",
            ..
        }));
}
