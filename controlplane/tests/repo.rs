//! The repository against real stores (SQLite and a fresh Postgres database per
//! case): commands land as events with their actor and reason, a writer that
//! decided on a stale version gets a conflict and writes nothing, and reading a
//! stream back folds to the state the writer saw.

use crate::support;

use serde_json::json;
use stoker_controlplane::domain::repo::{self, Loaded, RepoError};
use stoker_controlplane::domain::{
    Aggregate, Deployment, DeploymentCommand, DomainError, Executor, ExecutorCommand, Meta,
};
use stoker_controlplane::store::{
    Actor, EventStore, ExpectedVersion, NewEvent, StoreError, StreamRef,
};
use stoker_schemas::events::{
    DeploymentEvent, DeploymentLimits, EVENT_VERSION, EventPayload, SchedulerPolicy, SloGates,
};
use support::{Fixture, Kind};

const DEP: &str = "chat";

fn limits() -> DeploymentLimits {
    DeploymentLimits {
        context_window: 4096,
        max_input_tokens: 3072,
        max_output_tokens: 1024,
        max_waiting_requests: 64,
        max_waiting_tokens: 65_536,
        interactive_reserve_share: 0.25,
        scheduler_policy: SchedulerPolicy::InteractiveFirst,
    }
}

fn create() -> DeploymentCommand {
    DeploymentCommand::Create {
        deployment_id: DEP.parse().unwrap(),
        limits: limits(),
    }
}

fn set_serving(revision: &str) -> DeploymentCommand {
    DeploymentCommand::SetServingRevision {
        revision_id: revision.parse().unwrap(),
        verified: true,
    }
}

fn start(rollout: &str) -> DeploymentCommand {
    DeploymentCommand::StartRollout {
        rollout_id: rollout.parse().unwrap(),
        to_revision: "b".parse().unwrap(),
        to_revision_verified: true,
        steps: vec![10, 50, 100],
        gates: SloGates::default(),
    }
}

async fn exec(store: &EventStore, cmd: DeploymentCommand, meta: &Meta) {
    repo::execute::<Deployment>(store, DEP, cmd, meta)
        .await
        .unwrap_or_else(|e| panic!("refused: {e}"));
}

mod cases {
    use super::*;

    pub async fn events_land_with_actor_and_reason(fx: &Fixture) {
        let store = &fx.store;
        let created = repo::execute::<Deployment>(store, DEP, create(), &Meta::new("alice"))
            .await
            .unwrap();
        assert_eq!(created.len(), 1);
        assert_eq!(created[0].seq, 1);
        let meta = Meta::new("bob").with_reason("first verified build");
        let set = repo::execute::<Deployment>(store, DEP, set_serving("a"), &meta)
            .await
            .unwrap();
        assert_eq!(set[0].seq, 2);

        let stream = StreamRef::new("deployment", DEP);
        let stored = store.read_stream(&stream).await.unwrap();
        assert_eq!(stored, [created, set].concat());
        let summary: Vec<_> = stored
            .iter()
            .map(|r| {
                (
                    r.event_type.as_str(),
                    r.version,
                    r.actor.as_str(),
                    r.reason.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("DeploymentCreated", EVENT_VERSION, "alice", None),
                (
                    "ServingRevisionSet",
                    EVENT_VERSION,
                    "bob",
                    Some("first verified build")
                ),
            ]
        );
        assert_eq!(
            stored[1].payload,
            json!({ "deployment_id": DEP, "revision_id": "a" })
        );
    }

    pub async fn a_writer_on_a_stale_version_gets_a_conflict(fx: &Fixture) {
        let store = &fx.store;
        exec(store, create(), &Meta::new("alice")).await;
        exec(store, set_serving("a"), &Meta::new("alice")).await;

        // Writer A reads version 2 and decides later.
        let stale: Loaded<Deployment> = repo::load(store, DEP).await.unwrap();
        assert_eq!(stale.version, 2);
        // Writer B, another process, starts a rollout in between.
        let other = fx.reconnect().await;
        exec(&other, start("ro-b"), &Meta::new("bob")).await;

        let err = repo::execute_loaded(store, DEP, &stale, start("ro-a"), &Meta::new("alice"))
            .await
            .unwrap_err();
        assert!(err.is_conflict(), "{err:?}");
        let RepoError::Store(StoreError::Conflict {
            expected, actual, ..
        }) = err
        else {
            unreachable!()
        };
        assert_eq!((expected, actual), (ExpectedVersion::Exact(2), 3));

        // Nothing of A's was written; re-reading shows B's rollout, and deciding
        // again on the fresh state is a domain refusal, not a conflict.
        let fresh: Loaded<Deployment> = repo::load(store, DEP).await.unwrap();
        assert_eq!(fresh.version, 3);
        assert_eq!(fresh.state.active_rollout().unwrap().rollout_id, "ro-b");
        let err = repo::execute::<Deployment>(store, DEP, start("ro-a"), &Meta::new("alice"))
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            RepoError::Domain(DomainError::RolloutAlreadyActive { ref rollout_id, .. })
                if rollout_id == "ro-b"
        ));
    }

    pub async fn concurrent_rollouts_start_exactly_one(fx: &Fixture) {
        let store = &fx.store;
        exec(store, create(), &Meta::new("alice")).await;
        exec(store, set_serving("a"), &Meta::new("alice")).await;

        let mut tasks = Vec::new();
        for i in 0..8 {
            let store = fx.reconnect().await;
            tasks.push(tokio::spawn(async move {
                let meta = Meta::new(format!("op{i}"));
                repo::execute::<Deployment>(&store, DEP, start(&format!("ro{i}")), &meta).await
            }));
        }
        let mut won = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(events) => {
                    assert_eq!(events.len(), 1);
                    won += 1;
                }
                Err(e) if e.is_conflict() => {}
                Err(RepoError::Domain(DomainError::RolloutAlreadyActive { .. })) => {}
                Err(e) => panic!("unexpected error: {e:?}"),
            }
        }
        assert_eq!(won, 1, "exactly one concurrent rollout starts");
        let stream = StreamRef::new("deployment", DEP);
        assert_eq!(store.stream_version(&stream).await.unwrap(), 3);
    }

    pub async fn reading_back_folds_to_the_same_state(fx: &Fixture) {
        let store = &fx.store;
        let alice = Meta::new("alice");
        let mut written = Vec::new();
        for cmd in [
            create(),
            set_serving("a"),
            start("ro1"),
            DeploymentCommand::AdvanceRollout {
                rollout_id: "ro1".parse().unwrap(),
                figures: None,
            },
            DeploymentCommand::PauseRollout {
                rollout_id: "ro1".parse().unwrap(),
            },
        ] {
            written.extend(
                repo::execute::<Deployment>(store, DEP, cmd, &alice)
                    .await
                    .unwrap(),
            );
        }
        let events: Vec<DeploymentEvent> = written
            .iter()
            .cloned()
            .map(|r| repo::decode(r).unwrap())
            .collect();
        let expected = Deployment::from_events(&events);

        let loaded: Loaded<Deployment> = repo::load(&fx.reconnect().await, DEP).await.unwrap();
        assert_eq!(loaded.version, 5);
        assert_eq!(loaded.state, expected);
        let r = loaded.state.active_rollout().unwrap();
        assert_eq!((r.percent, r.paused), (50, true));
        assert_eq!(loaded.state.serving_revision(), Some("a"));
    }

    pub async fn a_refused_command_writes_nothing_and_names_the_stream(fx: &Fixture) {
        let store = &fx.store;
        let err = repo::execute::<Executor>(
            store,
            "ex-7",
            ExecutorCommand::Drain,
            &Meta::new("alice").with_reason("scale in"),
        )
        .await
        .unwrap_err();
        let RepoError::Domain(e @ DomainError::NotFound { .. }) = &err else {
            panic!("expected NotFound, got {err:?}");
        };
        assert!(e.to_string().contains("ex-7"), "{e}");
        let stream = StreamRef::new("executor", "ex-7");
        assert_eq!(store.stream_version(&stream).await.unwrap(), 0);

        exec(store, create(), &Meta::new("alice")).await;
        let err = repo::execute::<Deployment>(store, DEP, create(), &Meta::new("alice"))
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            RepoError::Domain(DomainError::AlreadyExists { .. })
        ));
        let stream = StreamRef::new("deployment", DEP);
        assert_eq!(store.stream_version(&stream).await.unwrap(), 1);
    }

    pub async fn an_unreadable_stored_event_is_a_decode_error(fx: &Fixture) {
        let store = &fx.store;
        exec(store, create(), &Meta::new("alice")).await;
        let stream = StreamRef::new("deployment", DEP);
        let bogus = NewEvent::new(
            "DeploymentRenamed",
            EVENT_VERSION,
            json!({ "deployment_id": DEP }),
            Actor::from("mallory"),
        );
        let at = store
            .append(&stream, ExpectedVersion::Exact(1), vec![bogus])
            .await
            .unwrap()[0]
            .position;
        let err = repo::load::<Deployment>(store, DEP).await.unwrap_err();
        let RepoError::Decode { position, detail } = &err else {
            panic!("expected a decode error, got {err:?}");
        };
        assert_eq!(*position, at);
        assert!(detail.contains("DeploymentRenamed"), "{detail}");

        // A version this build has no upcaster for is refused the same way.
        let (event_type, payload) =
            DeploymentEvent::from(stoker_schemas::events::DeploymentRetired {
                deployment_id: DEP.parse().unwrap(),
            })
            .to_parts();
        let future = NewEvent::new(event_type, EVENT_VERSION + 1, payload, Actor::from("alice"));
        store
            .append(
                &StreamRef::new("deployment", "other"),
                ExpectedVersion::NoStream,
                vec![future],
            )
            .await
            .unwrap();
        let err = repo::load::<Deployment>(store, "other").await.unwrap_err();
        assert!(matches!(err, RepoError::Decode { .. }), "{err:?}");
    }
}

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let fx = Fixture::new(Kind::Sqlite).await;
                    cases::$case(&fx).await;
                }
            )*
        }
        mod postgres {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let fx = Fixture::new(Kind::Postgres).await;
                    cases::$case(&fx).await;
                }
            )*
        }
    };
}

on_both_backends!(
    events_land_with_actor_and_reason,
    a_writer_on_a_stale_version_gets_a_conflict,
    concurrent_rollouts_start_exactly_one,
    reading_back_folds_to_the_same_state,
    a_refused_command_writes_nothing_and_names_the_stream,
    an_unreadable_stored_event_is_a_decode_error,
);
