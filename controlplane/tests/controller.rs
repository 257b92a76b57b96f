//! The rollout controller against a real request log on SQLite: it advances a
//! gated rollout whose new revision meets its SLOs, rolls it back when a gate
//! breaks, completes it at 100 %, leaves manual rollouts alone, and records
//! every decision with actor `rollout-controller` and the measured figures.

#[allow(dead_code)]
use crate::support;

use chrono::Utc;
use stoker_controlplane::controller::tick;
use stoker_controlplane::domain::ArtifactCheck;
use stoker_controlplane::projection::RolloutStatus;
use stoker_controlplane::requestlog::{RequestLog, RequestLogConfig, RequestRecord};
use stoker_controlplane::service::{CONTROLLER_ACTOR, ControlPlane, RevisionSpec, meta};
use stoker_schemas::codes::ErrorCode;
use stoker_schemas::events::{DeploymentLimits, SchedulerPolicy, SloGates};
use support::{Fixture, Kind};

/// A typed id (`DeploymentId`, ...) from a literal the test knows is valid.
fn id<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    s.parse().unwrap()
}

fn limits() -> DeploymentLimits {
    DeploymentLimits {
        context_window: 2048,
        max_input_tokens: 1536,
        max_output_tokens: 512,
        max_waiting_requests: 64,
        max_waiting_tokens: 65536,
        interactive_reserve_share: 0.25,
        scheduler_policy: SchedulerPolicy::InteractiveFirst,
    }
}

fn spec(rev: &str, sha: &str) -> RevisionSpec {
    RevisionSpec {
        deployment_id: id("d1"),
        revision_id: id(rev),
        model_uri: format!("file:///m/{rev}.gguf"),
        model_sha256: sha.into(),
        tokenizer_hash: String::new(),
        chat_template_hash: String::new(),
        chat_template_origin: None,
        precision: "q4_1".into(),
        runtime_version: "test".into(),
    }
}

async fn setup(fx: &Fixture) -> (ControlPlane, RequestLog) {
    let cp = ControlPlane::open(fx.store.clone()).await.unwrap();
    let m = meta("alice", None);
    cp.create_deployment(&id("d1"), limits(), &m).await.unwrap();
    for (rev, c) in [("a", "a"), ("b", "b")] {
        let sha = c.repeat(64);
        cp.register_revision(
            spec(rev, &sha),
            ArtifactCheck::Verified {
                sha256: sha.clone(),
            },
            &m,
        )
        .await
        .unwrap();
    }
    let log = RequestLog::spawn(fx.store.db(), RequestLogConfig::default());
    (cp, log)
}

fn row(
    i: usize,
    revision: &str,
    ttft_ms: f64,
    status: u16,
    error: Option<ErrorCode>,
) -> RequestRecord {
    RequestRecord {
        request_id: format!("req-{revision}-{i}-{}", uuid::Uuid::new_v4().simple()),
        tenant: "acme".into(),
        deployment_id: "d1".parse().unwrap(),
        revision_id: Some(revision.into()),
        executor_id: Some("x1".parse().unwrap()),
        lane: "interactive".into(),
        rollout_id: None,
        endpoint: "/v1/chat/completions".into(),
        status_code: status,
        finish_reason: error.is_none().then(|| "stop".into()),
        error_code: error,
        prompt_tokens: 10,
        completion_tokens: 5,
        queue_ms: Some(1.0),
        prefill_ms: Some(5.0),
        ttft_ms: Some(ttft_ms),
        decode_ms: Some(20.0),
        e2e_ms: ttft_ms + 20.0,
        received_at: Utc::now(),
    }
}

fn gates(min_requests: u32) -> SloGates {
    SloGates {
        ttft_p99_ms: Some(500.0),
        max_error_rate: Some(0.1),
        max_overload_rate: None,
        min_requests,
    }
}

#[tokio::test]
async fn advances_on_good_figures_then_rolls_back_when_a_gate_breaks() {
    let fx = Fixture::new(Kind::Sqlite).await;
    let (cp, log) = setup(&fx).await;
    let (ro, _) = cp
        .start_rollout(
            &id("d1"),
            &id("b"),
            vec![5, 25, 100],
            gates(10),
            &meta("alice", None),
        )
        .await
        .unwrap();

    // Too few requests yet: no decision.
    for i in 0..9 {
        log.record(row(i, "b", 100.0, 200, None));
    }
    log.flush().await.unwrap();
    assert!(tick(&cp, &log).await.unwrap().is_empty());

    // Enough good ones (traffic to a does not count): advance to 25 %.
    log.record(row(9, "b", 120.0, 200, None));
    for i in 0..50 {
        log.record(row(i, "a", 2000.0, 500, Some(ErrorCode::InternalError)));
    }
    log.flush().await.unwrap();
    let d = tick(&cp, &log).await.unwrap();
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].action, "advance");
    assert!(d[0].reason.contains("10 requests"), "{}", d[0].reason);
    let r = cp.rollout(&ro).await.unwrap();
    assert_eq!(r.percent, 25);
    assert_eq!(r.updated_by, CONTROLLER_ACTOR);
    let figs = r.last_figures.expect("figures recorded on the event");
    assert_eq!(figs.requests, 10);

    // The next window starts at the advance: the old rows do not count again.
    assert!(tick(&cp, &log).await.unwrap().is_empty());

    // A slow revision breaks the TTFT gate: roll back, with the figures in the reason.
    for i in 0..10 {
        log.record(row(100 + i, "b", 900.0, 200, None));
    }
    log.flush().await.unwrap();
    let d = tick(&cp, &log).await.unwrap();
    assert_eq!(d[0].action, "roll_back");
    assert!(
        d[0].reason.contains("ttft_p99 900.0 ms > gate 500.0 ms"),
        "{}",
        d[0].reason
    );
    let r = cp.rollout(&ro).await.unwrap();
    assert_eq!(r.status, RolloutStatus::RolledBack);
    assert_eq!(r.percent, 0);

    // The audit trail says who and why.
    let events = fx
        .store
        .read_all(stoker_controlplane::store::Position::START, 100)
        .await
        .unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.event_type, "RolloutRolledBack");
    assert_eq!(last.actor.as_str(), CONTROLLER_ACTOR);
    assert!(last.reason.as_deref().unwrap().contains("10 requests"));
}

#[tokio::test]
async fn completes_at_full_traffic_and_error_gate_counts() {
    let fx = Fixture::new(Kind::Sqlite).await;
    let (cp, log) = setup(&fx).await;
    let (ro, _) = cp
        .start_rollout(
            &id("d1"),
            &id("b"),
            vec![50, 100],
            gates(5),
            &meta("alice", None),
        )
        .await
        .unwrap();
    for i in 0..5 {
        log.record(row(i, "b", 50.0, 200, None));
    }
    log.flush().await.unwrap();
    assert_eq!(tick(&cp, &log).await.unwrap()[0].action, "advance");
    for i in 10..15 {
        log.record(row(i, "b", 50.0, 200, None));
    }
    log.flush().await.unwrap();
    assert_eq!(tick(&cp, &log).await.unwrap()[0].action, "complete");
    let v = cp.views().await;
    assert_eq!(v.deployments["d1"].serving_revision.as_deref(), Some("b"));
    assert_eq!(v.rollouts[ro.as_str()].status, RolloutStatus::Completed);

    // A second rollout back to a, where 1 of 5 requests fails: 20 % > 10 % gate.
    let (ro2, _) = cp
        .start_rollout(
            &id("d1"),
            &id("a"),
            vec![10, 100],
            gates(5),
            &meta("alice", None),
        )
        .await
        .unwrap();
    for i in 0..4 {
        log.record(row(200 + i, "a", 50.0, 200, None));
    }
    log.record(row(300, "a", 50.0, 500, Some(ErrorCode::InternalError)));
    log.flush().await.unwrap();
    let d = tick(&cp, &log).await.unwrap();
    assert_eq!(d[0].action, "roll_back");
    assert!(
        d[0].reason.contains("error_rate 0.2000 > gate 0.1000"),
        "{}",
        d[0].reason
    );
    assert_eq!(
        cp.rollout(&ro2).await.unwrap().status,
        RolloutStatus::RolledBack
    );
}

#[tokio::test]
async fn manual_and_paused_rollouts_are_left_alone() {
    let fx = Fixture::new(Kind::Sqlite).await;
    let (cp, log) = setup(&fx).await;
    let manual = SloGates {
        ttft_p99_ms: None,
        max_error_rate: None,
        max_overload_rate: None,
        min_requests: 1,
    };
    let (ro, _) = cp
        .start_rollout(
            &id("d1"),
            &id("b"),
            vec![5, 100],
            manual,
            &meta("alice", None),
        )
        .await
        .unwrap();
    for i in 0..30 {
        log.record(row(i, "b", 5000.0, 500, Some(ErrorCode::InternalError)));
    }
    log.flush().await.unwrap();
    assert!(tick(&cp, &log).await.unwrap().is_empty());
    assert_eq!(cp.rollout(&ro).await.unwrap().percent, 5);
}
