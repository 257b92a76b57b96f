//! The batch path against real databases (SQLite and Postgres) and a local
//! object store, with a fake row executor standing in for the engine: fenced
//! checkpoints, resume after a killed process, cancel, the backlog ceiling,
//! and refused uploads that leave nothing behind.

use crate::support;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stoker_controlplane::batch::finalize::finalize;
use stoker_controlplane::batch::input::InputLimits;
use stoker_controlplane::batch::runner::{
    BatchRef, BoxFuture, RowExecutor, RowOutcome, RowRequest, RunnerConfig, ShardEnd, Stop,
    run_shard,
};
use stoker_controlplane::batch::{
    BatchError, BatchSettings, Batches, CreateBatch, Storage, shards,
};
use stoker_controlplane::service::ControlPlane;
use stoker_schemas::events::BatchOutcome;
use stoker_schemas::ids::BatchId;
use stoker_test_support::{TempDir, temp_dir};
use support::{Fixture, Kind};
use tokio::sync::Semaphore;

/// Answers every row after `delay`, tagging the answer with `tag`; rows whose
/// number is a multiple of `fail_every` get a 400 as the online API would.
struct Fake {
    tag: &'static str,
    delay: Duration,
    fail_every: usize,
    calls: Arc<AtomicUsize>,
}

impl Fake {
    fn new(tag: &'static str, delay_ms: u64) -> Arc<Fake> {
        Arc::new(Fake {
            tag,
            delay: Duration::from_millis(delay_ms),
            fail_every: 0,
            calls: Arc::new(AtomicUsize::new(0)),
        })
    }
}

impl RowExecutor for Fake {
    fn execute(&self, row: RowRequest) -> BoxFuture<RowOutcome> {
        let (tag, delay, fail_every) = (self.tag, self.delay, self.fail_every);
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            let n: usize = row.custom_id[1..].parse().unwrap();
            if fail_every > 0 && n.is_multiple_of(fail_every) {
                return RowOutcome::Response {
                    status_code: 400,
                    request_id: tag.parse().unwrap(),
                    body: json!({"error": {"code": "invalid_value", "message": "bad row"}}),
                };
            }
            RowOutcome::Response {
                status_code: 200,
                request_id: tag.parse().unwrap(),
                body: json!({"tag": tag, "row": n, "echo": row.body}),
            }
        })
    }
}

fn input(rows: usize) -> Vec<u8> {
    let mut s = String::new();
    for i in 0..rows {
        s.push_str(
            &json!({
                "custom_id": format!("r{i}"),
                "method": "POST",
                "url": "/v1/completions",
                "body": {"model": "m", "prompt": format!("p{i}"), "max_tokens": 4},
            })
            .to_string(),
        );
        s.push('\n');
    }
    s.into_bytes()
}

fn settings(shard_rows: u64) -> BatchSettings {
    BatchSettings {
        shard_rows,
        runner: RunnerConfig {
            row_concurrency: 4,
            checkpoint_rows: 4,
            checkpoint_interval: Duration::from_millis(200),
            lease: Duration::from_secs(30),
        },
        poll_interval: Duration::from_millis(50),
        ..BatchSettings::default()
    }
}

struct Env {
    fx: Fixture,
    /// The object storage's folder, removed on drop.
    dir: TempDir,
    batches: Batches,
}

async fn env(kind: Kind, s: BatchSettings) -> Env {
    let fx = Fixture::new(kind).await;
    let dir = temp_dir("batch");
    let batches = open(&fx.store, dir.path(), s, "proc-1").await;
    Env { fx, dir, batches }
}

async fn open(
    store: &stoker_controlplane::store::EventStore,
    dir: &std::path::Path,
    s: BatchSettings,
    owner: &str,
) -> Batches {
    let cp = ControlPlane::open(store.clone()).await.unwrap();
    Batches::new(cp, Storage::local(dir).unwrap(), s, owner.into())
}

async fn submit(b: &Batches, rows: usize) -> BatchId {
    let f = b
        .upload("acme", "in.jsonl", "batch", input(rows))
        .await
        .unwrap();
    let l = b
        .create(
            "acme",
            "alice",
            CreateBatch {
                input_file_id: f.id.clone(),
                endpoint: "/v1/completions".into(),
                completion_window: "24h".into(),
                metadata: BTreeMap::new(),
            },
        )
        .await
        .unwrap();
    assert_eq!(l.view.status, "in_progress");
    l.view.batch_id
}

async fn wait_status(b: &Batches, id: &BatchId, want: &str, timeout: Duration) {
    let until = Instant::now() + timeout;
    loop {
        let l = b.get("acme", id).await.unwrap();
        if l.view.status == want {
            return;
        }
        assert!(
            Instant::now() < until,
            "batch {id} is {} after {timeout:?}, expected {want}",
            l.view.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// custom_id → line, across the output and error files; panics on a repeat.
async fn results(b: &Batches, id: &BatchId) -> HashMap<String, Value> {
    let l = b.get("acme", id).await.unwrap();
    let mut all = HashMap::new();
    for file in [l.view.output_file_id, l.view.error_file_id]
        .into_iter()
        .flatten()
    {
        let bytes = b.file_content("acme", &file).await.unwrap();
        for line in String::from_utf8(bytes).unwrap().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            let cid = v["custom_id"].as_str().unwrap().to_owned();
            assert!(all.insert(cid.clone(), v).is_none(), "{cid} appears twice");
        }
    }
    all
}

async fn fencing(kind: Kind) {
    let e = env(kind, settings(40)).await;
    let b = &e.batches;
    let id = submit(b, 40).await;
    let db = e.fx.store.db();
    let storage = b.storage().clone();
    let bytes = input(40);
    let batch = BatchRef {
        batch_id: id.clone(),
        tenant: "acme".into(),
        endpoint: "/v1/completions".into(),
    };
    let cfg = settings(40).runner;
    let now = stoker_controlplane::batch::now_ms();
    let a = shards::claim(&db, &id, 0, "runner-a", now, 30_000, false)
        .await
        .unwrap()
        .expect("A claims the free shard");
    assert_eq!(a.epoch, 1);
    // A second claim while A's lease holds gets nothing.
    assert!(
        shards::claim(&db, &id, 0, "runner-b", now, 30_000, false)
            .await
            .unwrap()
            .is_none()
    );
    let (_tx_a, rx_a) = tokio::sync::watch::channel(Stop::Run);
    let run_a = {
        let (db, storage, batch, bytes) =
            (db.clone(), storage.clone(), batch.clone(), bytes.clone());
        tokio::spawn(async move {
            run_shard(
                &db,
                &storage,
                Fake::new("A", 15),
                cfg,
                &batch,
                a,
                &bytes,
                rx_a,
                Arc::new(Semaphore::new(4)),
            )
            .await
        })
    };
    // Let A commit a few checkpoints, then take the shard over (A is a zombie).
    let until = Instant::now() + Duration::from_secs(20);
    let taken_at = loop {
        let s = &shards::list(&db, &id).await.unwrap()[0];
        if s.next_row >= 8 {
            break s.next_row;
        }
        assert!(Instant::now() < until, "A made no progress");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let b_shard = shards::claim(
        &db,
        &id,
        0,
        "runner-b",
        stoker_controlplane::batch::now_ms(),
        30_000,
        true,
    )
    .await
    .unwrap()
    .expect("a forced claim takes the shard");
    assert_eq!(b_shard.epoch, 2);
    let resumed_at = b_shard.next_row;
    assert!(resumed_at >= taken_at);
    let (_tx_b, rx_b) = tokio::sync::watch::channel(Stop::Run);
    let end_b = run_shard(
        &db,
        &storage,
        Fake::new("B", 5),
        cfg,
        &batch,
        b_shard,
        &bytes,
        rx_b,
        Arc::new(Semaphore::new(4)),
    )
    .await
    .unwrap();
    assert_eq!(end_b, ShardEnd::Done);
    let end_a = run_a.await.unwrap();
    assert!(
        matches!(end_a, Err(BatchError::Fenced { epoch: 1, .. })),
        "the superseded runner is fenced: {end_a:?}"
    );
    let s = &shards::list(&db, &id).await.unwrap()[0];
    assert!(s.done && s.epoch == 2 && s.next_row == 40);
    let f = finalize(&db, &storage, &id, "acme", &bytes, BatchOutcome::Completed)
        .await
        .unwrap();
    assert_eq!((f.completed, f.failed), (40, 0));
    let out = b
        .file_content("acme", f.output_file_id.as_ref().unwrap())
        .await
        .unwrap();
    let mut seen = std::collections::HashSet::new();
    for line in String::from_utf8(out).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let row = v["response"]["body"]["row"].as_u64().unwrap();
        let tag = v["response"]["body"]["tag"].as_str().unwrap();
        assert!(seen.insert(row), "row {row} twice");
        // Rows before B's resume point are A's committed ones; every later row is B's.
        let expect = if row < resumed_at { "A" } else { "B" };
        assert_eq!(tag, expect, "row {row} (B resumed at {resumed_at})");
    }
    assert_eq!(seen.len(), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_sqlite() {
    fencing(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_postgres() {
    fencing(Kind::Postgres).await;
}

/// A process dies mid-batch (its runtime is dropped: no drain, no last
/// checkpoint); a new one resumes every shard from its checkpoint and the
/// batch ends with every row exactly once.
async fn kill_and_resume(kind: Kind) {
    let fx = Fixture::new(kind).await;
    let dir = temp_dir("batch");
    let url = fx.url.clone();
    let dir1 = dir.path().to_path_buf();
    let (id, done_before) = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let out = rt.block_on(async move {
            let store = stoker_controlplane::store::EventStore::connect(&url)
                .await
                .unwrap();
            let b = open(&store, &dir1, settings(50), "doomed").await;
            let mut exec = Fake::new("first", 10);
            Arc::get_mut(&mut exec).unwrap().fail_every = 7;
            let id = submit(&b, 300).await;
            b.spawn_worker(exec, true);
            let until = Instant::now() + Duration::from_secs(30);
            loop {
                let l = b.get("acme", &id).await.unwrap();
                if l.completed + l.failed >= 60 {
                    return (id, l.completed + l.failed);
                }
                assert!(Instant::now() < until, "no progress before the kill");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        rt.shutdown_background();
        out
    })
    .join()
    .unwrap();
    assert!(done_before < 300);
    let b = open(&fx.store, dir.path(), settings(50), "successor").await;
    let mut exec = Fake::new("second", 2);
    Arc::get_mut(&mut exec).unwrap().fail_every = 7;
    b.spawn_worker(exec, true);
    wait_status(&b, &id, "completed", Duration::from_secs(60)).await;
    let all = results(&b, &id).await;
    assert_eq!(all.len(), 300, "every row exactly once");
    let failed = all
        .values()
        .filter(|v| v["response"]["status_code"] == 400)
        .count();
    assert_eq!(
        failed,
        (0..300usize).filter(|n| n.is_multiple_of(7)).count()
    );
    let l = b.get("acme", &id).await.unwrap();
    assert_eq!((l.completed + l.failed, l.failed as usize), (300, failed));
    let shards = shards::list(&fx.store.db(), &id).await.unwrap();
    assert!(
        shards.iter().any(|s| s.epoch >= 2),
        "some shard was resumed by a new epoch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_resume_sqlite() {
    kill_and_resume(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_resume_postgres() {
    kill_and_resume(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_keeps_completed_rows_and_names_the_rest() {
    let e = env(Kind::Sqlite, settings(20)).await;
    let b = &e.batches;
    let id = submit(b, 200).await;
    b.spawn_worker(Fake::new("x", 20), true);
    let until = Instant::now() + Duration::from_secs(30);
    while b.get("acme", &id).await.unwrap().completed < 10 {
        assert!(Instant::now() < until, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let l = b.cancel("acme", "bob", &id).await.unwrap();
    assert_eq!(l.view.status, "cancelling");
    wait_status(b, &id, "cancelled", Duration::from_secs(30)).await;
    let all = results(b, &id).await;
    assert_eq!(all.len(), 200);
    let cancelled = all
        .values()
        .filter(|v| v["error"]["code"] == "batch_cancelled")
        .count();
    let l = b.get("acme", &id).await.unwrap();
    assert!(
        cancelled > 0 && l.completed >= 10,
        "{cancelled} cancelled, {} done",
        l.completed
    );
    assert_eq!(l.completed as usize + cancelled, 200);
    // Cancelling again is refused with a typed conflict.
    let again = b.cancel("acme", "bob", &id).await.unwrap_err();
    assert!(again.to_string().contains("cancelled"), "{again}");
    // The audit trail names who cancelled.
    let events =
        e.fx.store
            .read_stream(&stoker_controlplane::store::StreamRef::new(
                "batch",
                id.as_str(),
            ))
            .await
            .unwrap();
    let types: Vec<(&str, &str)> = events
        .iter()
        .map(|r| (r.event_type.as_str(), r.actor.0.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("BatchCreated", "alice"),
            ("BatchStarted", "batch-worker"),
            ("BatchCancelRequested", "bob"),
            ("BatchFinalizing", "batch-worker"),
            ("BatchEnded", "batch-worker"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_has_a_ceiling() {
    let mut s = settings(100);
    // 100 rows of about 1 + 4 tokens each: ~500 per batch.
    s.max_backlog_tokens = 900;
    let e = env(Kind::Sqlite, s).await;
    let b = &e.batches;
    submit(b, 100).await;
    let f = b
        .upload("acme", "in.jsonl", "batch", input(100))
        .await
        .unwrap();
    let req = CreateBatch {
        input_file_id: f.id.clone(),
        endpoint: "/v1/completions".into(),
        completion_window: "24h".into(),
        metadata: BTreeMap::new(),
    };
    let err = b.create("acme", "alice", req.clone()).await.unwrap_err();
    assert!(
        matches!(err, BatchError::BacklogFull { ceiling: 900, .. }),
        "{err}"
    );
    // One batch bigger than the whole ceiling can never fit: a 400, not a 429.
    let big = b
        .upload("acme", "big.jsonl", "batch", input(400))
        .await
        .unwrap();
    let err = b
        .create(
            "acme",
            "alice",
            CreateBatch {
                input_file_id: big.id.clone(),
                ..req.clone()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, BatchError::Invalid { .. }), "{err}");
    // Bad endpoint and window are typed refusals; nothing is created.
    for (endpoint, window) in [
        ("/v1/embeddings", "24h"),
        ("/v1/completions", "2d"),
        ("/v1/completions", "0h"),
    ] {
        let err = b
            .create(
                "acme",
                "alice",
                CreateBatch {
                    endpoint: endpoint.into(),
                    completion_window: window.into(),
                    ..req.clone()
                },
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, BatchError::Invalid { .. }),
            "{endpoint} {window}: {err}"
        );
    }
    // A chat endpoint for a file of completion lines names the lines.
    let err = b
        .create(
            "acme",
            "alice",
            CreateBatch {
                endpoint: "/v1/chat/completions".into(),
                ..req
            },
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("line 1:"), "{err}");
    assert_eq!(b.list("acme", None, 100).await.unwrap().0.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_uploads_leave_nothing_and_tenants_are_apart() {
    let mut s = settings(100);
    s.limits = InputLimits {
        max_bytes: 4096,
        max_lines: 10,
    };
    let e = env(Kind::Sqlite, s).await;
    let b = &e.batches;
    let bad: Vec<(&str, Vec<u8>)> = vec![
        ("batch", b"{not json}\n".to_vec()),
        ("batch", Vec::new()),
        ("batch", input(11)),
        ("batch", vec![b'x'; 5000]),
        ("fine-tune", input(2)),
    ];
    for (purpose, bytes) in bad {
        let len = bytes.len();
        assert!(
            b.upload("acme", "f.jsonl", purpose, bytes).await.is_err(),
            "{purpose} {len}"
        );
    }
    assert!(b.files("acme", 100).await.unwrap().is_empty());
    let objects = walk(e.dir.path());
    assert!(objects.is_empty(), "no object left behind: {objects:?}");
    let f = b
        .upload("acme", "ok.jsonl", "batch", input(3))
        .await
        .unwrap();
    assert!(matches!(
        b.file("other", &f.id).await,
        Err(BatchError::NotFound { .. })
    ));
    assert_eq!(b.file_content("acme", &f.id).await.unwrap(), input(3));
    b.delete_file("acme", &f.id).await.unwrap();
    assert!(b.file("acme", &f.id).await.is_err());
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_batch_ends_with_every_row_named() {
    use stoker_controlplane::domain::BatchCommand;
    use stoker_controlplane::service::meta;
    use stoker_schemas::events::BatchCreated;
    let e = env(Kind::Sqlite, settings(10)).await;
    let b = &e.batches;
    let f = b
        .upload("acme", "in.jsonl", "batch", input(30))
        .await
        .unwrap();
    // A batch whose window ended a second ago, as a long-stopped server finds it.
    let id: &BatchId = &"batch_expired1".parse().unwrap();
    let cp = ControlPlane::open(e.fx.store.clone()).await.unwrap();
    let created = BatchCreated {
        batch_id: id.clone(),
        tenant: "acme".into(),
        input_file_id: f.id,
        endpoint: "/v1/completions".into(),
        completion_window: "24h".into(),
        expires_at: stoker_controlplane::batch::now_ms() / 1000 - 1,
        total_rows: 30,
        shard_rows: 10,
        estimated_tokens: 100,
        metadata: BTreeMap::new(),
    };
    cp.batch_command(id, BatchCommand::Create(created), &meta("alice", None))
        .await
        .unwrap();
    let worker_batches = open(&e.fx.store, e.dir.path(), settings(10), "proc-2").await;
    worker_batches.spawn_worker(Fake::new("x", 1), true);
    wait_status(&worker_batches, id, "expired", Duration::from_secs(30)).await;
    let all = results(&worker_batches, id).await;
    assert_eq!(all.len(), 30);
    assert!(all.values().all(|v| v["error"]["code"] == "batch_expired"));
    let l = worker_batches.get("acme", id).await.unwrap();
    assert_eq!((l.completed, l.failed), (0, 30));
}

/// SIGTERM: the worker stops taking shards, lets rows in flight finish,
/// commits and releases; the next process resumes at the checkpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_commits_releases_and_the_next_process_resumes() {
    let e = env(Kind::Sqlite, settings(20)).await;
    let b = &e.batches;
    let id = submit(b, 200).await;
    let exec = Fake::new("first", 30);
    b.spawn_worker(exec.clone(), true);
    let until = Instant::now() + Duration::from_secs(30);
    while b.get("acme", &id).await.unwrap().completed < 20 {
        assert!(Instant::now() < until, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.drain(Duration::from_secs(5)).await;
    assert_eq!(b.running_shards(), 0, "every runner ended");
    let db = e.fx.store.db();
    let shards = shards::list(&db, &id).await.unwrap();
    assert!(
        shards
            .iter()
            .all(|s| s.owner.is_none() && s.lease_until == 0),
        "every shard released: {shards:?}"
    );
    let committed: u64 = shards.iter().map(|s| s.next_row - s.first_row).sum();
    let started = exec.calls.load(Ordering::SeqCst) as u64;
    assert!((20..200).contains(&committed), "{committed} committed");
    // Rows in flight at the drain finished and were committed, not dropped.
    assert_eq!(committed, started, "every started row was committed");
    let next = open(&e.fx.store, e.dir.path(), settings(20), "proc-2").await;
    next.spawn_worker(Fake::new("second", 1), true);
    wait_status(&next, &id, "completed", Duration::from_secs(30)).await;
    let all = results(&next, &id).await;
    assert_eq!(all.len(), 200);
    let firsts = all
        .values()
        .filter(|v| v["response"]["body"]["tag"] == "first")
        .count() as u64;
    assert_eq!(
        firsts, committed,
        "the first process's rows are kept, not redone"
    );
}
