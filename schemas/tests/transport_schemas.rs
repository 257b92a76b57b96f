//! The Kafka message contract: checked-in schemas match the code, bodies
//! round-trip, unknown versions and malformed bodies are refused, unknown
//! fields from a newer writer are ignored, and its unknown error codes read as
//! `ErrorCode::Unknown`.

use std::path::PathBuf;

use stoker_schemas::codes::ErrorCode;
use stoker_schemas::transport::*;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("transport")
}

#[test]
fn checked_in_transport_schemas_match_the_code() {
    let update = std::env::var_os("STOKER_UPDATE_SCHEMAS").is_some();
    let mut stale = Vec::new();
    for (file, generated) in json_schemas() {
        let path = dir().join(file);
        if update {
            std::fs::create_dir_all(dir()).unwrap();
            std::fs::write(&path, &generated).unwrap();
        }
        if std::fs::read_to_string(&path).unwrap_or_default() != generated {
            stale.push(format!("schemas/transport/{file}"));
        }
    }
    assert!(
        stale.is_empty(),
        "{} differ from schemas/src/transport.rs; regenerate with \
         STOKER_UPDATE_SCHEMAS=1 cargo test --release -p stoker-schemas --test schemas",
        stale.join(", ")
    );
}

fn job() -> JobMessage {
    JobMessage {
        v: TRANSPORT_VERSION,
        request_id: "req_1".parse().unwrap(),
        executor_id: "ex-a".parse().unwrap(),
        model_sha256: "ab".repeat(32),
        reply_partition: 3,
        prompt: vec![1, 2, 3],
        sampling: WireSampling {
            temperature: 0.0,
            top_p: 1.0,
            top_k: None,
            seed: Some(7),
            max_tokens: 16,
            stop: vec!["\n\n".into()],
            stop_token_ids: vec![],
            stop_at_eos: true,
            logprobs: Some(2),
            prompt_logprobs: Some(1),
            presence_penalty: Some(0.5),
            frequency_penalty: None,
            repetition_penalty: Some(1.1),
            logit_bias: vec![(7, -100.0), (9, 2.5)],
            min_tokens: Some(3),
            include_stop_str_in_output: Some(true),
            response_format: Some(WireResponseFormat::JsonSchema {
                schema: serde_json::json!({"type": "object", "required": ["label"]}),
            }),
        },
        lane: "interactive".into(),
        tenant: "default".into(),
        tenant_weight: 1,
        sent_unix_ms: 1,
    }
}

#[test]
fn bodies_round_trip() {
    let j = job();
    assert_eq!(JobMessage::decode(&j.encode()).unwrap(), j);
    for event in [
        ReplyEvent::Started { queue_ms: 1.5 },
        ReplyEvent::PromptLogprobs {
            logprobs: vec![stoker_schemas::transport::WireLogprob {
                id: 3,
                logprob: -4.5,
                top: vec![(8, -0.5)],
            }],
        },
        ReplyEvent::Delta {
            text: "héllo".into(),
            token_ids: vec![5, 6],
            logprobs: vec![],
        },
        ReplyEvent::Delta {
            text: "x".into(),
            token_ids: vec![9],
            logprobs: vec![stoker_schemas::transport::WireLogprob {
                id: 9,
                logprob: -0.125,
                top: vec![(9, -0.125), (4, -2.0)],
            }],
        },
        ReplyEvent::Error {
            code: ErrorCode::ServerOverloaded,
            message: "full".into(),
        },
    ] {
        let r = ReplyMessage {
            v: TRANSPORT_VERSION,
            request_id: "req_1".parse().unwrap(),
            executor_id: "ex-a".parse().unwrap(),
            seq: 2,
            event,
        };
        assert_eq!(ReplyMessage::decode(&r.encode()).unwrap(), r);
    }
    let c = ControlMessage {
        v: TRANSPORT_VERSION,
        executor_id: "ex-a".parse().unwrap(),
        command: ControlCommand::Cancel {
            request_id: "req_1".parse().unwrap(),
        },
    };
    assert_eq!(ControlMessage::decode(&c.encode()).unwrap(), c);
}

#[test]
fn unknown_versions_and_hostile_bodies_are_refused() {
    let mut j = job();
    j.v = 99;
    let e = JobMessage::decode(&j.encode()).unwrap_err();
    assert!(matches!(e, DecodeError::Version(99)), "{e}");
    assert!(e.to_string().contains("version 99"));
    for bad in [
        &b""[..],
        b"null",
        b"{}",
        b"[1,2]",
        b"{\"v\":1}",
        b"\xff\xfe",
        b"{\"v\":1,\"request_id\":5}",
    ] {
        assert!(
            matches!(JobMessage::decode(bad), Err(DecodeError::Json(_))),
            "{bad:?}"
        );
        assert!(ReplyMessage::decode(bad).is_err());
        assert!(CapacityReport::decode(bad).is_err());
    }
    // A deeply nested body is refused by serde_json's recursion limit, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(ControlMessage::decode(deep.as_bytes()).is_err());
}

#[test]
fn fields_from_a_newer_writer_are_ignored() {
    let mut v: serde_json::Value = serde_json::from_slice(&job().encode()).unwrap();
    v["priority_hint"] = serde_json::json!("high");
    let back = JobMessage::decode(&serde_json::to_vec(&v).unwrap()).unwrap();
    assert_eq!(back, job());
}

#[test]
fn an_error_code_from_a_newer_writer_reads_as_unknown() {
    let body = format!(
        r#"{{"v":{TRANSPORT_VERSION},"request_id":"req_1","executor_id":"ex-a","seq":0,
            "event":{{"type":"error","code":"gpu_on_fire","message":"m"}}}}"#
    );
    let r = ReplyMessage::decode(body.as_bytes()).unwrap();
    assert_eq!(
        r.event,
        ReplyEvent::Error {
            code: ErrorCode::Unknown,
            message: "m".into()
        }
    );
    // Every code this build knows keeps its string on the wire.
    for &code in ErrorCode::ALL {
        let event = ReplyEvent::Error {
            code,
            message: String::new(),
        };
        let v = serde_json::to_value(&event).unwrap();
        assert_eq!(v["code"], code.as_str());
        assert_eq!(serde_json::from_value::<ReplyEvent>(v).unwrap(), event);
    }
}
