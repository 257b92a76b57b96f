//! The event payloads' contract: the checked-in JSON Schemas match the code,
//! every event survives the trip through the store's `(event_type, payload)`
//! columns, and old readers tolerate payloads written by newer code.

use std::path::PathBuf;

use serde_json::json;
use stoker_schemas::events::*;
use stoker_schemas::ids::{BatchId, DeploymentId, ExecutorId, RolloutId};

fn events_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("events")
}

#[test]
fn checked_in_event_schemas_match_the_code() {
    let update = std::env::var_os("STOKER_UPDATE_SCHEMAS").is_some();
    let mut stale = Vec::new();
    for (file, generated) in json_schemas() {
        let path = events_dir().join(file);
        if update {
            std::fs::create_dir_all(events_dir()).unwrap();
            std::fs::write(&path, &generated).unwrap();
        }
        if std::fs::read_to_string(&path).unwrap_or_default() != generated {
            stale.push(format!("schemas/events/{file}"));
        }
    }
    assert!(
        stale.is_empty(),
        "{} differ from the event types in schemas/src/events.rs; regenerate with \
         STOKER_UPDATE_SCHEMAS=1 cargo test --release -p stoker-schemas --test schemas \
         and review the diff",
        stale.join(", ")
    );
}

fn limits() -> DeploymentLimits {
    DeploymentLimits {
        context_window: 4096,
        max_input_tokens: 3072,
        max_output_tokens: 1024,
        max_waiting_requests: 64,
        max_waiting_tokens: 65_536,
        interactive_reserve_share: 0.25,
        scheduler_policy: SchedulerPolicy::Fcfs,
    }
}

fn figures() -> GateFigures {
    GateFigures {
        requests: 40,
        ttft_p99_ms: Some(180.5),
        error_rate: 0.0,
        overload_rate: 0.025,
    }
}

fn deployment_events() -> Vec<DeploymentEvent> {
    let (d, r): (DeploymentId, RolloutId) = ("chat".parse().unwrap(), "ro_1".parse().unwrap());
    vec![
        DeploymentCreated {
            deployment_id: d.clone(),
            limits: limits(),
        }
        .into(),
        DeploymentLimitsChanged {
            deployment_id: d.clone(),
            limits: limits(),
        }
        .into(),
        DeploymentRetired {
            deployment_id: d.clone(),
        }
        .into(),
        ServingRevisionSet {
            deployment_id: d.clone(),
            revision_id: "a".parse().unwrap(),
        }
        .into(),
        RolloutStarted {
            deployment_id: d.clone(),
            rollout_id: r.clone(),
            from_revision: "a".parse().unwrap(),
            to_revision: "b".parse().unwrap(),
            steps: vec![5, 25, 50, 100],
            gates: SloGates {
                ttft_p99_ms: Some(250.0),
                max_error_rate: Some(0.01),
                max_overload_rate: None,
                min_requests: 30,
            },
        }
        .into(),
        RolloutAdvanced {
            deployment_id: d.clone(),
            rollout_id: r.clone(),
            step: 1,
            percent: 25,
            figures: Some(figures()),
        }
        .into(),
        RolloutPaused {
            deployment_id: d.clone(),
            rollout_id: r.clone(),
        }
        .into(),
        RolloutResumed {
            deployment_id: d.clone(),
            rollout_id: r.clone(),
        }
        .into(),
        RolloutRolledBack {
            deployment_id: d.clone(),
            rollout_id: r.clone(),
            figures: None,
        }
        .into(),
        RolloutCompleted {
            deployment_id: d,
            rollout_id: r,
            revision_id: "b".parse().unwrap(),
        }
        .into(),
    ]
}

fn revision_events() -> Vec<RevisionEvent> {
    vec![
        RevisionRegistered {
            deployment_id: "chat".parse().unwrap(),
            revision_id: "b".parse().unwrap(),
            model_uri: "file:///models/b.gguf".into(),
            model_sha256: "ab".repeat(32),
            tokenizer_hash: "t1".into(),
            chat_template_hash: "c1".into(),
            chat_template_origin: Some("--chat-template tools.jinja".into()),
            precision: "q4_1".into(),
            runtime_version: "0.1.0".into(),
        }
        .into(),
    ]
}

fn capacity_events() -> Vec<CapacityProfileEvent> {
    vec![
        CapacityProfileRecorded {
            deployment_id: "chat".parse().unwrap(),
            revision_id: "b".parse().unwrap(),
            workload: "short-chat".into(),
            envelope: CapacityEnvelope {
                concurrency: 8,
                active_tokens: 16_384,
                ttft_p95_ms: 120.0,
                tpot_p95_ms: 22.5,
                throughput_tok_s: 310.0,
                prefill_tok_s: Some(2400.0),
                decode_tok_s: None,
                prompt_tokens_p95: None,
                output_tokens_p95: None,
            },
        }
        .into(),
    ]
}

fn executor_events() -> Vec<ExecutorEvent> {
    let (x, d): (ExecutorId, DeploymentId) = ("ex-1".parse().unwrap(), "chat".parse().unwrap());
    vec![
        ExecutorRegistered {
            executor_id: x.clone(),
            deployment_id: d.clone(),
            revision_id: "b".parse().unwrap(),
        }
        .into(),
        ExecutorDraining {
            executor_id: x.clone(),
            deployment_id: d.clone(),
        }
        .into(),
        ExecutorDrained {
            executor_id: x.clone(),
            deployment_id: d.clone(),
        }
        .into(),
        ExecutorLost {
            executor_id: x,
            deployment_id: d,
        }
        .into(),
    ]
}

fn batch_events() -> Vec<BatchEvent> {
    let b: BatchId = "batch_1".parse().unwrap();
    vec![
        BatchCreated {
            batch_id: b.clone(),
            tenant: "acme".into(),
            input_file_id: "file-1".parse().unwrap(),
            endpoint: "/v1/chat/completions".into(),
            completion_window: "24h".into(),
            expires_at: 1_900_000_000,
            total_rows: 2_000,
            shard_rows: 100,
            estimated_tokens: 512_000,
            metadata: [("job".to_owned(), "nightly".to_owned())].into(),
        }
        .into(),
        BatchStarted {
            batch_id: b.clone(),
            shards: 20,
        }
        .into(),
        BatchCancelRequested {
            batch_id: b.clone(),
        }
        .into(),
        BatchFinalizing {
            batch_id: b.clone(),
        }
        .into(),
        BatchEnded {
            batch_id: b.clone(),
            outcome: BatchOutcome::Cancelled,
            output_file_id: Some("file-out".parse().unwrap()),
            error_file_id: None,
            completed: 1_200,
            failed: 800,
        }
        .into(),
        BatchFailed {
            batch_id: b,
            code: "input_file_missing".into(),
            message: "gone".into(),
        }
        .into(),
    ]
}

/// Every variant round-trips, and the sample covers every event type once.
fn assert_round_trips<E: EventPayload + PartialEq + std::fmt::Debug>(events: Vec<E>) {
    let types: Vec<&str> = events.iter().map(EventPayload::event_type).collect();
    assert_eq!(
        types,
        E::EVENT_TYPES,
        "the sample must cover every event type"
    );
    for ev in events {
        let (event_type, payload) = ev.to_parts();
        assert!(
            payload.is_object(),
            "{event_type}: the payload is an object"
        );
        assert!(payload.get("type").is_none() && payload.get("payload").is_none());
        let tagged = serde_json::to_value(&ev).unwrap();
        assert_eq!(tagged["type"], event_type, "event_type() is the serde tag");
        let back = E::from_parts(event_type, payload).unwrap();
        assert_eq!(back, ev);
    }
}

#[test]
fn every_event_round_trips_through_its_store_columns() {
    assert_round_trips(deployment_events());
    assert_round_trips(revision_events());
    assert_round_trips(capacity_events());
    assert_round_trips(executor_events());
    assert_round_trips(batch_events());
}

#[test]
fn stream_types_are_the_store_names() {
    assert_eq!(DeploymentEvent::STREAM_TYPE, "deployment");
    assert_eq!(RevisionEvent::STREAM_TYPE, "revision");
    assert_eq!(CapacityProfileEvent::STREAM_TYPE, "capacity_profile");
    assert_eq!(ExecutorEvent::STREAM_TYPE, "executor");
    assert_eq!(BatchEvent::STREAM_TYPE, "batch");
    assert_eq!(EVENT_VERSION, 1);
}

#[test]
fn an_unknown_event_type_is_an_error() {
    let payload = json!({ "deployment_id": "chat" });
    let err = DeploymentEvent::from_parts("DeploymentRenamed", payload.clone()).unwrap_err();
    assert!(err.to_string().contains("DeploymentRenamed"), "{err}");
    // An event type of another stream is just as unknown.
    assert!(ExecutorEvent::from_parts("DeploymentRetired", payload).is_err());
}

#[test]
fn a_payload_missing_a_required_field_is_an_error() {
    let err = DeploymentEvent::from_parts("ServingRevisionSet", json!({ "deployment_id": "chat" }))
        .unwrap_err();
    assert!(err.to_string().contains("revision_id"), "{err}");
}

#[test]
fn a_payload_with_unknown_fields_still_parses() {
    let ev = DeploymentEvent::from_parts(
        "RolloutAdvanced",
        json!({
            "deployment_id": "chat",
            "rollout_id": "ro_1",
            "step": 2,
            "percent": 50,
            "figures": {
                "requests": 12, "error_rate": 0.0, "overload_rate": 0.0,
                "ttft_p50_ms": 40.0
            },
            "added_in_a_later_release": { "nested": true }
        }),
    )
    .unwrap();
    let DeploymentEvent::RolloutAdvanced(a) = ev else {
        panic!("wrong variant: {ev:?}");
    };
    assert_eq!((a.step, a.percent), (2, 50));
    assert_eq!(a.figures.unwrap().ttft_p99_ms, None);
}

#[test]
fn omitted_optional_fields_take_their_defaults() {
    let ev = DeploymentEvent::from_parts(
        "RolloutStarted",
        json!({
            "deployment_id": "chat",
            "rollout_id": "ro_1",
            "from_revision": "a",
            "to_revision": "b",
            "steps": [50, 100],
            "gates": {}
        }),
    )
    .unwrap();
    let DeploymentEvent::RolloutStarted(s) = ev else {
        panic!("wrong variant: {ev:?}");
    };
    assert_eq!(s.gates, SloGates::default());
    assert_eq!(s.gates.min_requests, 20);

    let mut limits = serde_json::to_value(limits()).unwrap();
    limits.as_object_mut().unwrap().remove("scheduler_policy");
    let limits: DeploymentLimits = serde_json::from_value(limits).unwrap();
    assert_eq!(limits.scheduler_policy, SchedulerPolicy::InteractiveFirst);

    // A revision recorded before the template's origin was kept.
    let ev = RevisionEvent::from_parts(
        "RevisionRegistered",
        json!({
            "deployment_id": "chat",
            "revision_id": "b",
            "model_uri": "file:///models/b.gguf",
            "model_sha256": "ab".repeat(32),
            "tokenizer_hash": "t1",
            "chat_template_hash": "c1",
            "precision": "q4_1",
            "runtime_version": "0.1.0"
        }),
    )
    .unwrap();
    let RevisionEvent::RevisionRegistered(r) = ev;
    assert_eq!(r.chat_template_origin, None);
    assert!(
        !serde_json::to_value(&r)
            .unwrap()
            .as_object()
            .unwrap()
            .contains_key("chat_template_origin"),
        "an absent origin is not written"
    );
}

#[test]
fn scheduler_policies_are_snake_case_on_the_wire() {
    assert_eq!(
        serde_json::to_value(SchedulerPolicy::InteractiveFirst).unwrap(),
        "interactive_first"
    );
    assert_eq!(serde_json::to_value(SchedulerPolicy::Fcfs).unwrap(), "fcfs");
}
