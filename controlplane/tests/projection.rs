//! Read models: the live fold, a second process loading them, and a rebuild
//! from the events, on SQLite and on a fresh Postgres database each. The
//! rebuilt documents must equal the live ones byte for byte.

use crate::support;

use stoker_controlplane::domain::{ArtifactCheck, ExecutorCommand};
use stoker_controlplane::projection::{ExecutorStatus, RolloutStatus};
use stoker_controlplane::service::{ControlPlane, RevisionSpec, RolloutAction, meta, route_in};
use stoker_schemas::events::{CapacityEnvelope, DeploymentLimits, SchedulerPolicy, SloGates};
use support::{Fixture, Kind};

/// A typed id (`DeploymentId`, ...) from a literal the test knows is valid.
fn id<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    s.parse().unwrap()
}

pub fn limits() -> DeploymentLimits {
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

pub fn sha(c: char) -> String {
    std::iter::repeat_n(c, 64).collect()
}

pub fn spec(dep: &str, rev: &str, sha: &str) -> RevisionSpec {
    RevisionSpec {
        deployment_id: id(dep),
        revision_id: id(rev),
        model_uri: format!("file:///models/{rev}.gguf"),
        model_sha256: sha.into(),
        tokenizer_hash: "t".repeat(64),
        chat_template_hash: "c".repeat(64),
        chat_template_origin: Some("the model file's template".into()),
        precision: "q4_1".into(),
        runtime_version: "test".into(),
    }
}

fn gates() -> SloGates {
    SloGates {
        ttft_p99_ms: Some(500.0),
        max_error_rate: Some(0.05),
        max_overload_rate: None,
        min_requests: 20,
    }
}

/// Drives every kind of event through the service.
async fn history(cp: &ControlPlane) -> String {
    let alice = meta("alice", None);
    cp.create_deployment(&id("d1"), limits(), &alice)
        .await
        .unwrap();
    cp.create_deployment(&id("d2"), limits(), &alice)
        .await
        .unwrap();
    for (rev, c) in [("a", 'a'), ("b", 'b')] {
        let s = sha(c);
        cp.register_revision(
            spec("d1", rev, &s),
            ArtifactCheck::Verified { sha256: s.clone() },
            &alice,
        )
        .await
        .unwrap();
    }
    let (r1, _) = cp
        .start_rollout(&id("d1"), &id("b"), vec![5, 25, 50, 100], gates(), &alice)
        .await
        .unwrap();
    cp.rollout_action(&r1, RolloutAction::Advance(None), &alice)
        .await
        .unwrap();
    cp.rollout_action(&r1, RolloutAction::Pause, &alice)
        .await
        .unwrap();
    cp.rollout_action(&r1, RolloutAction::Resume, &alice)
        .await
        .unwrap();
    cp.rollout_action(
        &r1,
        RolloutAction::RollBack(None),
        &meta("bob", Some("errors up".into())),
    )
    .await
    .unwrap();
    let (r2, _) = cp
        .start_rollout(&id("d1"), &id("b"), vec![50, 100], gates(), &alice)
        .await
        .unwrap();
    cp.rollout_action(&r2, RolloutAction::Advance(None), &alice)
        .await
        .unwrap();
    cp.rollout_action(&r2, RolloutAction::Complete, &alice)
        .await
        .unwrap();
    let env = CapacityEnvelope {
        concurrency: 8,
        active_tokens: 4096,
        ttft_p95_ms: 120.0,
        tpot_p95_ms: 18.0,
        throughput_tok_s: 300.0,
        prefill_tok_s: Some(2000.0),
        decode_tok_s: None,
        prompt_tokens_p95: None,
        output_tokens_p95: None,
    };
    cp.record_capacity_profile(&id("d1"), &id("b"), "chat", env, &alice)
        .await
        .unwrap();
    let reg = ExecutorCommand::Register {
        executor_id: "x1".parse().unwrap(),
        deployment_id: "d1".parse().unwrap(),
        revision_id: "b".parse().unwrap(),
    };
    cp.executor_command(&id("x1"), reg, &alice).await.unwrap();
    cp.executor_command(
        &id("x1"),
        ExecutorCommand::Drain,
        &meta("bob", Some("node upgrade".into())),
    )
    .await
    .unwrap();
    cp.executor_command(&id("x1"), ExecutorCommand::MarkDrained, &alice)
        .await
        .unwrap();
    cp.retire_deployment(&id("d2"), &alice).await.unwrap();
    let acme = id("acme");
    cp.create_tenant(&acme, Some("Acme".into()), &alice)
        .await
        .unwrap();
    let k1 = cp
        .issue_key(
            &acme,
            "acme-prod".into(),
            vec![stoker_schemas::events::KeyScope::Inference],
            &alice,
        )
        .await
        .unwrap();
    cp.issue_key(
        &acme,
        "acme-batch".into(),
        vec![stoker_schemas::events::KeyScope::Batch],
        &alice,
    )
    .await
    .unwrap();
    let quota = stoker_schemas::events::TenantQuota {
        tokens_per_minute: Some(1000),
        weight: 2,
        ..Default::default()
    };
    cp.set_tenant_quota(&acme, quota, &alice).await.unwrap();
    cp.revoke_key(&k1.key_id, &meta("bob", Some("leaked".into())))
        .await
        .unwrap();
    r1.to_string()
}

async fn live_equals_rebuilt(kind: Kind) {
    let fx = Fixture::new(kind).await;
    let cp = ControlPlane::open(fx.store.clone()).await.unwrap();
    let r1 = history(&cp).await;

    let live = cp.views().await;
    let d1 = &live.deployments["d1"];
    assert_eq!(d1.serving_revision.as_deref(), Some("b"));
    assert_eq!(d1.active_rollout, None);
    assert!(live.deployments["d2"].retired);
    let first = &live.rollouts[&r1];
    assert_eq!(first.status, RolloutStatus::RolledBack);
    assert_eq!(first.last_reason.as_deref(), Some("errors up"));
    assert_eq!(first.updated_by, "bob");
    assert_eq!(live.executors["x1"].status, ExecutorStatus::Drained);
    assert_eq!(live.capacity_profiles.len(), 1);
    let route = route_in(&live, "d1", "anyone").unwrap();
    assert_eq!(route.revision_id, "b");
    assert_eq!(route.rollout_id, None);

    let live_docs = cp.projector().stored_documents().await.unwrap();
    let acme = &live.tenants["acme"];
    assert_eq!(acme.quota.weight, 2);
    assert_eq!(acme.keys.values().filter(|k| k.is_active()).count(), 1);
    let revoked = acme.keys.values().find(|k| !k.is_active()).unwrap();
    assert_eq!(
        (
            revoked.revoked_by.as_deref(),
            revoked.revoke_reason.as_deref()
        ),
        (Some("bob"), Some("leaked"))
    );
    assert_eq!(live_docs.len(), 2 + 2 + 2 + 1 + 1 + 1, "{live_docs:#?}");

    // Another process opening the store loads the same views from the tables.
    let other = ControlPlane::open(fx.reconnect().await).await.unwrap();
    assert_eq!(other.views().await, live);

    // A rebuild from the events gives the same documents.
    let report = cp.projector().rebuild().await.unwrap();
    assert_eq!(report.unchanged, Some(true));
    assert_eq!(report.documents, live_docs.len() as u64);
    assert_eq!(cp.projector().stored_documents().await.unwrap(), live_docs);
    assert_eq!(cp.views().await, live);

    // Read models are disposable: a damaged table is repaired by a rebuild.
    let db = fx.store.db();
    match &db {
        stoker_controlplane::store::Db::Postgres(p) => {
            sqlx::query("DELETE FROM read_models WHERE kind = 'rollout'")
                .execute(p)
                .await
                .unwrap();
        }
        stoker_controlplane::store::Db::Sqlite(p) => {
            sqlx::query("DELETE FROM read_models WHERE kind = 'rollout'")
                .execute(p)
                .await
                .unwrap();
        }
    }
    assert_ne!(cp.projector().stored_documents().await.unwrap(), live_docs);
    cp.projector().rebuild().await.unwrap();
    assert_eq!(cp.projector().stored_documents().await.unwrap(), live_docs);
}

#[tokio::test]
async fn sqlite_live_equals_rebuilt() {
    live_equals_rebuilt(Kind::Sqlite).await;
}

#[tokio::test]
async fn postgres_live_equals_rebuilt() {
    live_equals_rebuilt(Kind::Postgres).await;
}

/// Refusals record nothing and leave the read models as they were.
#[tokio::test]
async fn refused_commands_change_no_view() {
    let fx = Fixture::new(Kind::Sqlite).await;
    let cp = ControlPlane::open(fx.store.clone()).await.unwrap();
    let alice = meta("alice", None);
    cp.create_deployment(&id("d1"), limits(), &alice)
        .await
        .unwrap();
    let s = sha('a');
    cp.register_revision(
        spec("d1", "a", &s),
        ArtifactCheck::Verified { sha256: s.clone() },
        &alice,
    )
    .await
    .unwrap();
    let before = cp.projector().stored_documents().await.unwrap();
    // Rollout to an unregistered revision.
    assert!(
        cp.start_rollout(&id("d1"), &id("nope"), vec![100], gates(), &alice)
            .await
            .is_err()
    );
    // Absent artifact: a permanent refusal.
    assert!(
        cp.register_revision(spec("d1", "z", &s), ArtifactCheck::Absent, &alice)
            .await
            .is_err()
    );
    // Unknown rollout id.
    assert!(
        cp.rollout_action(&id("ro_missing"), RolloutAction::Pause, &alice)
            .await
            .is_err()
    );
    assert_eq!(cp.projector().stored_documents().await.unwrap(), before);
    assert_eq!(
        fx.store
            .read_all(stoker_controlplane::store::Position::START, 100)
            .await
            .unwrap()
            .len(),
        3
    );
}
