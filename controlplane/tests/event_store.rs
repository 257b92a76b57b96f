//! The event-store suite: every case runs against SQLite and against a real
//! Postgres (a fresh database per test), so both backends behave the same.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::Utc;
use serde_json::{Value, json};
use stoker_controlplane::store::{
    Actor, AuditQuery, EventStore, ExpectedVersion, NewEvent, Position, Recorded, StoreError,
    StreamRef, Upcasters,
};
use support::{Fixture, Kind};

fn ev(event_type: &str, payload: Value) -> NewEvent {
    NewEvent::new(event_type, 1, payload, Actor::from("alice"))
}

fn assert_conflict(r: Result<Vec<Recorded>, StoreError>, want_actual: u64) {
    match r {
        Err(StoreError::Conflict { actual, .. }) => assert_eq!(actual, want_actual),
        other => panic!("expected a conflict at version {want_actual}, got {other:?}"),
    }
}

mod cases {
    use super::*;

    pub async fn append_then_read_stream(fx: &Fixture) {
        let s = StreamRef::new("deployment", "d1");
        let before = Utc::now() - chrono::Duration::seconds(1);
        let written = fx
            .store
            .append(
                &s,
                ExpectedVersion::NoStream,
                vec![
                    ev("DeploymentCreated", json!({"context_window": 4096})),
                    ev("LimitsChanged", json!({"max_output_tokens": 512})).with_reason("tighter"),
                ],
            )
            .await
            .unwrap();
        assert_eq!(written.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
        assert!(written[0].position < written[1].position);
        let read = fx.store.read_stream(&s).await.unwrap();
        assert_eq!(read, written);
        assert_eq!(read[1].reason.as_deref(), Some("tighter"));
        assert_eq!(read[0].payload, json!({"context_window": 4096}));
        assert_eq!(read[0].actor, Actor::from("alice"));
        assert!(read[0].recorded_at > before && read[0].recorded_at <= read[1].recorded_at);
        assert_eq!(fx.store.stream_version(&s).await.unwrap(), 2);
        let empty = StreamRef::new("deployment", "nope");
        assert!(fx.store.read_stream(&empty).await.unwrap().is_empty());
        assert_eq!(fx.store.stream_version(&empty).await.unwrap(), 0);
    }

    pub async fn wrong_expected_version_is_a_conflict_and_writes_nothing(fx: &Fixture) {
        let s = StreamRef::new("rollout", "r1");
        let three = (0..3).map(|i| ev("Step", json!({"i": i}))).collect();
        fx.store
            .append(&s, ExpectedVersion::NoStream, three)
            .await
            .unwrap();
        for expected in [
            ExpectedVersion::NoStream,
            ExpectedVersion::Exact(0),
            ExpectedVersion::Exact(2),
            ExpectedVersion::Exact(4),
        ] {
            let r = fx
                .store
                .append(
                    &s,
                    expected,
                    vec![ev("Step", json!({})), ev("Step", json!({}))],
                )
                .await;
            assert!(r.as_ref().is_err_and(StoreError::is_conflict));
            assert_conflict(r, 3);
        }
        assert_eq!(fx.store.read_stream(&s).await.unwrap().len(), 3);
        let next = fx
            .store
            .append(
                &s,
                ExpectedVersion::Exact(3),
                vec![ev("Step", json!({"i": 3}))],
            )
            .await
            .unwrap();
        assert_eq!(next[0].seq, 4);
        let any = fx
            .store
            .append(&s, ExpectedVersion::Any, vec![ev("Step", json!({"i": 4}))])
            .await
            .unwrap();
        assert_eq!(any[0].seq, 5);
    }

    pub async fn racing_creators_exactly_one_wins(fx: &Fixture) {
        let s = StreamRef::new("deployment", "contended");
        let other = fx.reconnect().await;
        let tasks = (0..32)
            .map(|i| {
                let store = if i % 2 == 0 {
                    fx.store.clone()
                } else {
                    other.clone()
                };
                let s = s.clone();
                tokio::spawn(async move {
                    store
                        .append(
                            &s,
                            ExpectedVersion::NoStream,
                            vec![ev("Created", json!({"by": i}))],
                        )
                        .await
                })
            })
            .collect::<Vec<_>>();
        let mut wins = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(r) => {
                    wins += 1;
                    assert_eq!(r[0].seq, 1);
                }
                Err(e) => assert_conflict(Err(e), 1),
            }
        }
        assert_eq!(wins, 1);
        assert_eq!(fx.store.read_stream(&s).await.unwrap().len(), 1);
        other.close().await;
    }

    pub async fn concurrent_appenders_leave_no_gaps_and_no_duplicates(fx: &Fixture) {
        const WRITERS: u64 = 8;
        const EACH: u64 = 20;
        let s = StreamRef::new("executor", "e1");
        let other = fx.reconnect().await;
        let tasks = (0..WRITERS)
            .map(|w| {
                let store = if w % 2 == 0 {
                    fx.store.clone()
                } else {
                    other.clone()
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let (mut won, mut conflicts) = (Vec::new(), 0u64);
                    for i in 0..EACH {
                        loop {
                            let v = store.stream_version(&s).await.unwrap();
                            let e = ev("Heartbeat", json!({"writer": w, "i": i}));
                            match store.append(&s, ExpectedVersion::Exact(v), vec![e]).await {
                                Ok(r) => {
                                    assert_eq!(r[0].seq, v + 1, "a win appends right after v");
                                    won.push(r[0].seq);
                                    break;
                                }
                                Err(StoreError::Conflict { actual, .. }) => {
                                    assert!(actual > v, "a conflict means someone else won");
                                    conflicts += 1;
                                }
                                Err(e) => panic!("append failed: {e}"),
                            }
                        }
                    }
                    (won, conflicts)
                })
            })
            .collect::<Vec<_>>();
        let mut seqs = Vec::new();
        for t in tasks {
            let (won, _conflicts) = t.await.unwrap();
            seqs.extend(won);
        }
        seqs.sort_unstable();
        let total = WRITERS * EACH;
        assert_eq!(
            seqs,
            (1..=total).collect::<Vec<_>>(),
            "one winner per version"
        );
        let read = fx.store.read_stream(&s).await.unwrap();
        assert_eq!(
            read.iter().map(|e| e.seq).collect::<Vec<_>>(),
            seqs,
            "no gaps"
        );
        let distinct: BTreeSet<_> = read.iter().map(|e| e.payload.to_string()).collect();
        assert_eq!(distinct.len() as u64, total, "every write exactly once");
        assert!(read.windows(2).all(|w| w[0].position < w[1].position));
        assert!(
            read.windows(2)
                .all(|w| w[0].recorded_at <= w[1].recorded_at),
            "time never decreases along position"
        );
        other.close().await;
    }

    /// Appends of many callers at once (on Postgres: one group-committed
    /// transaction or a few), each in its own task, all on one handle.
    async fn at_once(
        fx: &Fixture,
        appends: Vec<(StreamRef, ExpectedVersion, Vec<NewEvent>)>,
    ) -> Vec<Result<Vec<Recorded>, StoreError>> {
        let tasks = appends
            .into_iter()
            .map(|(s, expected, events)| {
                let store = fx.store.clone();
                tokio::spawn(async move { store.append(&s, expected, events).await })
            })
            .collect::<Vec<_>>();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    fn assert_time_follows_position(all: &[Recorded]) {
        assert!(all.windows(2).all(|w| w[0].position < w[1].position));
        assert!(
            all.windows(2).all(|w| w[0].recorded_at <= w[1].recorded_at),
            "time never decreases along position"
        );
    }

    pub async fn many_concurrent_appends_to_different_streams_all_land(fx: &Fixture) {
        let appends = (0..64)
            .map(|i| {
                let s = StreamRef::new("deployment", format!("d{i}"));
                (
                    s,
                    ExpectedVersion::NoStream,
                    vec![ev("Created", json!({"i": i}))],
                )
            })
            .collect();
        let results = at_once(fx, appends).await;
        let mut positions = BTreeSet::new();
        for (i, r) in results.into_iter().enumerate() {
            let r = r.unwrap();
            assert_eq!(r.len(), 1);
            assert_eq!(r[0].seq, 1);
            assert_eq!(r[0].payload, json!({"i": i}));
            assert_eq!(r[0].stream, StreamRef::new("deployment", format!("d{i}")));
            assert!(positions.insert(r[0].position), "positions are unique");
            let read = fx.store.read_stream(&r[0].stream).await.unwrap();
            assert_eq!(read, r);
        }
        let all = fx.store.read_all(Position::START, 1000).await.unwrap();
        assert_eq!(all.len(), 64);
        assert_eq!(
            all.iter().map(|e| e.position).collect::<BTreeSet<_>>(),
            positions
        );
        assert_time_follows_position(&all);
    }

    pub async fn concurrent_creators_on_one_handle_exactly_one_wins(fx: &Fixture) {
        let s = StreamRef::new("deployment", "contended");
        let appends = (0..16)
            .map(|i| {
                let two = vec![
                    ev("Created", json!({"by": i})),
                    ev("Named", json!({"by": i})),
                ];
                (s.clone(), ExpectedVersion::NoStream, two)
            })
            .collect();
        let mut winner = None;
        for (i, r) in at_once(fx, appends).await.into_iter().enumerate() {
            match r {
                Ok(r) => {
                    assert!(winner.replace(i).is_none(), "a second winner");
                    assert_eq!(r.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
                }
                // The loser sees the winner's version.
                Err(e) => assert_conflict(Err(e), 2),
            }
        }
        let winner = winner.expect("one creator wins");
        let read = fx.store.read_stream(&s).await.unwrap();
        assert_eq!(read.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
        assert!(read.iter().all(|e| e.payload == json!({"by": winner})));
    }

    pub async fn mixed_batch_good_appends_land_and_bad_ones_conflict(fx: &Fixture) {
        let streams: Vec<_> = (0..16)
            .map(|i| StreamRef::new("rollout", format!("r{i}")))
            .collect();
        for s in &streams {
            fx.store
                .append(s, ExpectedVersion::NoStream, vec![ev("Started", json!({}))])
                .await
                .unwrap();
        }
        // Per stream: a good append at version 1 and a stale one at version 0; plus
        // new streams with no check.
        let mut appends = Vec::new();
        for (i, s) in streams.iter().enumerate() {
            let good = vec![
                ev("Advanced", json!({"i": i})),
                ev("Paused", json!({"i": i})),
            ];
            appends.push((s.clone(), ExpectedVersion::Exact(1), good));
            let stale = vec![ev("Advanced", json!({"stale": i}))];
            appends.push((s.clone(), ExpectedVersion::Exact(0), stale));
            let fresh = StreamRef::new("executor", format!("x{i}"));
            appends.push((
                fresh,
                ExpectedVersion::Any,
                vec![ev("Seen", json!({"i": i}))],
            ));
        }
        let results = at_once(fx, appends).await;
        for (k, r) in results.into_iter().enumerate() {
            let i = k / 3;
            match k % 3 {
                0 => {
                    let r = r.unwrap();
                    assert_eq!(r.iter().map(|e| e.seq).collect::<Vec<_>>(), [2, 3]);
                    assert_eq!(r[0].payload, json!({"i": i}));
                }
                1 => match r {
                    // Before or after the good append of the same stream.
                    Err(StoreError::Conflict { actual, .. }) => {
                        assert!(actual == 1 || actual == 3, "actual {actual}")
                    }
                    other => panic!("expected a conflict, got {other:?}"),
                },
                _ => assert_eq!(r.unwrap()[0].seq, 1),
            }
        }
        for (i, s) in streams.iter().enumerate() {
            let read = fx.store.read_stream(s).await.unwrap();
            assert_eq!(read.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
            assert_eq!(read[1].payload, json!({"i": i}));
        }
        let all = fx.store.read_all(Position::START, 1000).await.unwrap();
        assert_eq!(all.len(), 16 * 3 + 16);
        assert_time_follows_position(&all);
    }

    pub async fn a_refused_append_fails_alone_among_concurrent_ones(fx: &Fixture) {
        let appends = (0..32)
            .map(|i| {
                let s = StreamRef::new("executor", format!("x{i}"));
                // Event version 0 violates a CHECK constraint.
                let version = if i == 7 { 0 } else { 1 };
                let e = NewEvent::new("Seen", version, json!({"i": i}), Actor::from("a"));
                (s, ExpectedVersion::NoStream, vec![e])
            })
            .collect();
        for (i, r) in at_once(fx, appends).await.into_iter().enumerate() {
            if i == 7 {
                assert!(matches!(r, Err(StoreError::Database(_))), "{r:?}");
            } else {
                assert_eq!(r.unwrap()[0].seq, 1);
            }
        }
        let all = fx.store.read_all(Position::START, 1000).await.unwrap();
        assert_eq!(all.len(), 31);
        assert!(all.iter().all(|e| e.payload != json!({"i": 7})));
        // The writer is still there.
        let s = StreamRef::new("executor", "after");
        let r = fx
            .store
            .append(&s, ExpectedVersion::NoStream, vec![ev("Seen", json!({}))])
            .await;
        assert_eq!(r.unwrap()[0].seq, 1);
    }

    pub async fn big_batch_is_one_atomic_append(fx: &Fixture) {
        let s = StreamRef::new("batch", "b1");
        let many: Vec<_> = (0..1234)
            .map(|i| ev("ShardFinished", json!({"shard": i})))
            .collect();
        let written = fx
            .store
            .append(&s, ExpectedVersion::NoStream, many)
            .await
            .unwrap();
        assert_eq!(written.len(), 1234);
        assert!(
            written
                .iter()
                .enumerate()
                .all(|(i, e)| e.seq == i as u64 + 1 && e.payload["shard"] == json!(i))
        );
        assert!(written.windows(2).all(|w| w[0].position < w[1].position));
        // A conflicting big batch writes none of its events.
        let again: Vec<_> = (0..700)
            .map(|i| ev("ShardFinished", json!({"shard": i})))
            .collect();
        assert_conflict(
            fx.store
                .append(&s, ExpectedVersion::Exact(1000), again)
                .await,
            1234,
        );
        assert_eq!(fx.store.read_stream(&s).await.unwrap(), written);
    }

    pub async fn read_all_pages_in_global_order(fx: &Fixture) {
        let streams = ["a", "b", "c"].map(|id| StreamRef::new("revision", id));
        for round in 0..4u64 {
            for s in &streams {
                let e = ev("Touched", json!({"round": round}));
                fx.store
                    .append(s, ExpectedVersion::Exact(round), vec![e])
                    .await
                    .unwrap();
            }
        }
        let (mut all, mut after) = (Vec::new(), Position::START);
        loop {
            let page = fx.store.read_all(after, 5).await.unwrap();
            let Some(last) = page.last() else { break };
            assert!(page.len() <= 5);
            after = last.position;
            all.extend(page);
        }
        assert_eq!(all.len(), 12);
        assert!(all.windows(2).all(|w| w[0].position < w[1].position));
        let order: Vec<_> = all
            .iter()
            .map(|e| (e.payload["round"].clone(), e.stream.stream_id.0.clone()))
            .collect();
        let expected: Vec<_> = (0..4)
            .flat_map(|r| ["a", "b", "c"].map(|id| (json!(r), id.to_owned())))
            .collect();
        assert_eq!(order, expected, "global order is append order");
    }

    pub async fn audit_filters_and_cursor_paging(fx: &Fixture) {
        let (alice, ctl) = (Actor::from("alice"), Actor::from("rollout-controller"));
        let d1 = StreamRef::new("deployment", "d1");
        let d2 = StreamRef::new("deployment", "d2");
        let r1 = StreamRef::new("rollout", "r1");
        let append = |s: &StreamRef, t: &str, p: Value, a: &Actor| {
            let (store, s) = (fx.store.clone(), s.clone());
            let e = NewEvent::new(t, 1, p, a.clone()).with_reason("because");
            async move {
                store
                    .append(&s, ExpectedVersion::Any, vec![e])
                    .await
                    .unwrap()
                    .remove(0)
            }
        };
        let e1 = append(&d1, "DeploymentCreated", json!({}), &alice).await;
        let e2 = append(&d2, "DeploymentCreated", json!({}), &alice).await;
        let e3 = append(
            &r1,
            "RolloutStarted",
            json!({"deployment_id": "d1"}),
            &alice,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mid = Utc::now();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let e4 = append(
            &r1,
            "RolloutAdvanced",
            json!({"deployment_id": "d1", "percent": 25}),
            &ctl,
        )
        .await;
        let e5 = append(&d1, "LimitsChanged", json!({}), &alice).await;
        let e6 = append(
            &r1,
            "RolloutAdvanced",
            json!({"deployment_id": "d1", "percent": 50}),
            &ctl,
        )
        .await;
        let _e7 = append(
            &StreamRef::new("executor", "x"),
            "ExecutorRegistered",
            json!({}),
            &alice,
        )
        .await;

        let positions = |q: AuditQuery| {
            let store = fx.store.clone();
            async move {
                let page = store.audit(&q).await.unwrap();
                assert_eq!(page.next_cursor, None);
                page.events.iter().map(|e| e.position).collect::<Vec<_>>()
            }
        };
        let p = |es: &[&Recorded]| es.iter().map(|e| e.position).collect::<Vec<_>>();
        let by_dep = AuditQuery {
            deployment: Some("d1".into()),
            ..Default::default()
        };
        assert_eq!(
            positions(by_dep.clone()).await,
            p(&[&e1, &e3, &e4, &e5, &e6])
        );
        let dep_type = AuditQuery {
            event_type: Some("RolloutAdvanced".into()),
            ..by_dep.clone()
        };
        assert_eq!(positions(dep_type.clone()).await, p(&[&e4, &e6]));
        let by_actor = AuditQuery {
            actor: Some(ctl.clone()),
            ..Default::default()
        };
        assert_eq!(positions(by_actor).await, p(&[&e4, &e6]));
        let by_type = AuditQuery {
            event_type: Some("DeploymentCreated".into()),
            ..Default::default()
        };
        assert_eq!(positions(by_type).await, p(&[&e1, &e2]));
        let after_mid = AuditQuery {
            from: Some(mid),
            ..by_dep.clone()
        };
        assert_eq!(positions(after_mid).await, p(&[&e4, &e5, &e6]));
        let before_mid = AuditQuery {
            to: Some(mid),
            ..by_dep.clone()
        };
        assert_eq!(positions(before_mid).await, p(&[&e1, &e3]));
        let window = AuditQuery {
            from: Some(mid),
            to: Some(e6.recorded_at),
            ..dep_type
        };
        assert_eq!(positions(window).await, p(&[&e4]));
        let everything = AuditQuery {
            from: Some(e1.recorded_at),
            ..by_dep.clone()
        };
        assert_eq!(positions(everything).await, p(&[&e1, &e3, &e4, &e5, &e6]));
        let future = Some(Utc::now() + chrono::Duration::hours(1));
        assert!(
            positions(AuditQuery {
                from: future,
                ..by_dep.clone()
            })
            .await
            .is_empty()
        );
        let past = Some(e1.recorded_at - chrono::Duration::hours(1));
        assert!(
            positions(AuditQuery {
                to: past,
                ..by_dep.clone()
            })
            .await
            .is_empty()
        );
        let all_time = AuditQuery {
            from: past,
            to: future,
            ..by_dep.clone()
        };
        assert_eq!(positions(all_time).await.len(), 5);

        // Cursor paging walks the same result two at a time, then stops.
        let (mut seen, mut cursor) = (Vec::new(), None);
        for _ in 0..10 {
            let q = AuditQuery {
                after: cursor,
                limit: 2,
                ..by_dep.clone()
            };
            let page = fx.store.audit(&q).await.unwrap();
            assert!(page.events.len() <= 2);
            seen.extend(page.events.iter().map(|e| e.position));
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
            let c = cursor.unwrap();
            assert_eq!(Position::parse_cursor(&c.to_string()).unwrap(), c);
        }
        assert_eq!(seen, p(&[&e1, &e3, &e4, &e5, &e6]));
        let page = fx
            .store
            .audit(&AuditQuery { limit: 1, ..by_dep })
            .await
            .unwrap();
        assert_eq!(page.events[0].reason.as_deref(), Some("because"));
        assert_eq!(page.next_cursor, Some(e1.position));
    }

    pub async fn old_versions_are_upcast_on_read(fx: &Fixture) {
        let s = StreamRef::new("deployment", "legacy");
        let v1 = NewEvent::new(
            "DeploymentCreated",
            1,
            json!({"max_tokens": 256}),
            Actor::from("alice"),
        );
        let v2 = NewEvent::new(
            "DeploymentCreated",
            2,
            json!({"limits": {"max_output_tokens": 9}}),
            Actor::from("alice"),
        );
        fx.store
            .append(&s, ExpectedVersion::NoStream, vec![v1, v2])
            .await
            .unwrap();
        let raw = fx.store.read_stream(&s).await.unwrap();
        assert_eq!(
            (raw[0].version, raw[0].payload.clone()),
            (1, json!({"max_tokens": 256}))
        );

        fn v1_to_v2(mut p: Value) -> Value {
            let max = p.as_object_mut().and_then(|o| o.remove("max_tokens"));
            json!({"limits": {"max_output_tokens": max}})
        }
        let upcasting: EventStore = fx.store.clone().with_upcasters(Upcasters::new().register(
            "DeploymentCreated",
            1,
            v1_to_v2,
        ));
        let read = upcasting.read_stream(&s).await.unwrap();
        assert_eq!(read[0].version, 2);
        assert_eq!(
            read[0].payload,
            json!({"limits": {"max_output_tokens": 256}})
        );
        assert_eq!(read[1], raw[1], "current versions pass through untouched");
        let all = upcasting.read_all(Position::START, 10).await.unwrap();
        assert_eq!(all[0].version, 2);
        let q = AuditQuery {
            deployment: Some("legacy".into()),
            ..Default::default()
        };
        assert_eq!(upcasting.audit(&q).await.unwrap().events, read);
    }

    pub async fn migrate_is_idempotent_and_data_survives_reconnect(fx: &Fixture) {
        let s = StreamRef::new("deployment", "keep");
        fx.store
            .append(
                &s,
                ExpectedVersion::NoStream,
                vec![ev("Created", json!({}))],
            )
            .await
            .unwrap();
        let other = fx.reconnect().await;
        let (a, b) = tokio::join!(fx.store.migrate(), other.migrate());
        a.unwrap();
        b.unwrap();
        other.migrate().await.unwrap();
        assert_eq!(
            other.read_stream(&s).await.unwrap(),
            fx.store.read_stream(&s).await.unwrap()
        );
        other.close().await;
    }

    pub async fn bad_inputs_are_typed_errors(fx: &Fixture) {
        assert!(matches!(
            Position::parse_cursor("x1"),
            Err(StoreError::BadCursor(_))
        ));
        assert!(matches!(
            Position::parse_cursor("-3"),
            Err(StoreError::BadCursor(_))
        ));
        assert!(matches!(
            EventStore::connect("mysql://localhost/x").await,
            Err(StoreError::BadUrl(_))
        ));
        let s = StreamRef::new("deployment", "bad");
        let r = fx
            .store
            .append(
                &s,
                ExpectedVersion::Any,
                vec![NewEvent::new("X", 0, json!({}), Actor::from("a"))],
            )
            .await;
        assert!(
            matches!(r, Err(StoreError::Database(_))),
            "version 0 is refused: {r:?}"
        );
        assert!(fx.store.read_stream(&s).await.unwrap().is_empty());
        // An empty append checks the version and writes nothing.
        assert_conflict(
            fx.store.append(&s, ExpectedVersion::Exact(1), vec![]).await,
            0,
        );
        assert!(
            fx.store
                .append(&s, ExpectedVersion::NoStream, vec![])
                .await
                .unwrap()
                .is_empty()
        );
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
                    assert_eq!(fx.store.backend_name(), "sqlite");
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
                    assert_eq!(fx.store.backend_name(), "postgres");
                    cases::$case(&fx).await;
                }
            )*
        }
    };
}

on_both_backends!(
    append_then_read_stream,
    wrong_expected_version_is_a_conflict_and_writes_nothing,
    racing_creators_exactly_one_wins,
    concurrent_appenders_leave_no_gaps_and_no_duplicates,
    big_batch_is_one_atomic_append,
    many_concurrent_appends_to_different_streams_all_land,
    concurrent_creators_on_one_handle_exactly_one_wins,
    mixed_batch_good_appends_land_and_bad_ones_conflict,
    a_refused_append_fails_alone_among_concurrent_ones,
    read_all_pages_in_global_order,
    audit_filters_and_cursor_paging,
    old_versions_are_upcast_on_read,
    migrate_is_idempotent_and_data_survives_reconnect,
    bad_inputs_are_typed_errors,
);
