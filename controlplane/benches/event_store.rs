//! Event-store benchmark: single-writer appends per second, and audit query
//! latency (deployment + type + time window) over N seeded events, on Postgres and
//! on SQLite; then appends per second on Postgres (durable) with 1, 16 and 64
//! appends in flight from one handle, which group commit turns into shared
//! transactions. Prints markdown tables.
//!
//! `STOKER_BENCH_EVENTS` (default 100000) sets N; `STOKER_TEST_POSTGRES_URL` the
//! server (default postgres://postgres@127.0.0.1:5432/postgres), on which a fresh
//! database is created and dropped.

use std::time::{Duration, Instant};

use serde_json::json;
use stoker_controlplane::store::{
    Actor, AuditQuery, EventStore, ExpectedVersion, NewEvent, Position, StreamRef,
};
use stoker_test_support::postgres::Database;
use stoker_test_support::{TestRng, percentile};

const APPENDS: usize = 5_000;
/// Appends per in-flight figure, whatever the number in flight.
const IN_FLIGHT_APPENDS: usize = 4_000;
const IN_FLIGHT: [usize; 3] = [1, 16, 64];
const QUERIES: usize = 500;
const DEPLOYMENTS: usize = 20;
const TYPES: [&str; 5] = [
    "RolloutAdvanced",
    "LimitsChanged",
    "ExecutorDraining",
    "RevisionRegistered",
    "CapacityProfileRecorded",
];

struct Row {
    backend: String,
    appends_per_s: f64,
    append_p50: Duration,
    append_p99: Duration,
    audit: Option<Audit>,
}

struct Audit {
    seeded: usize,
    seed_s: f64,
    p50: Duration,
    p99: Duration,
    rows_per_page: f64,
}

/// The `p` quantile of sorted durations, by the workspace's one percentile
/// definition (interpolating, as `stoker bench` reports).
fn pct(sorted: &[Duration], p: f64) -> Duration {
    let secs: Vec<f64> = sorted.iter().map(Duration::as_secs_f64).collect();
    Duration::from_secs_f64(percentile(&secs, p))
}

/// Appends, then (when `n > 0`) seeds `n` events and times audit queries.
async fn run(backend: &str, store: EventStore, n: usize) -> Row {
    store.migrate().await.unwrap();
    let actor = Actor::from("bench");

    // One writer, one event per append, each to its own new stream.
    let mut lat = Vec::with_capacity(APPENDS);
    let start = Instant::now();
    for i in 0..APPENDS {
        let s = StreamRef::new("deployment", format!("append-{i}"));
        let e = NewEvent::new("DeploymentCreated", 1, json!({"i": i}), actor.clone());
        let t = Instant::now();
        store
            .append(&s, ExpectedVersion::NoStream, vec![e])
            .await
            .unwrap();
        lat.push(t.elapsed());
    }
    let appends_per_s = APPENDS as f64 / start.elapsed().as_secs_f64();
    lat.sort();
    let audit = if n > 0 {
        Some(seed_and_query(&store, &actor, n).await)
    } else {
        None
    };
    store.close().await;
    Row {
        backend: backend.to_owned(),
        appends_per_s,
        append_p50: pct(&lat, 0.5),
        append_p99: pct(&lat, 0.99),
        audit,
    }
}

async fn seed_and_query(store: &EventStore, actor: &Actor, n: usize) -> Audit {
    // Seed N events, 500 per append, deployments and types interleaved.
    let start = Instant::now();
    let mut stamps = Vec::new();
    for (k, first) in (0..n).step_by(500).enumerate() {
        let events = (first..(first + 500).min(n))
            .map(|i| {
                let payload = json!({"deployment_id": format!("d{}", i % DEPLOYMENTS), "i": i});
                let t = TYPES[(i / DEPLOYMENTS) % TYPES.len()];
                NewEvent::new(t, 1, payload, actor.clone()).with_reason("seed")
            })
            .collect();
        let s = StreamRef::new("rollout", format!("seed-{k}"));
        let written = store
            .append(&s, ExpectedVersion::NoStream, events)
            .await
            .unwrap();
        stamps.push(written[0].recorded_at);
    }
    let seed_s = start.elapsed().as_secs_f64();
    let (from, to) = (stamps[stamps.len() / 4], stamps[stamps.len() * 3 / 4]);

    // Audit: deployment + type + the middle half of the time range, first page.
    let mut rng = TestRng::new(7);
    let mut lat_q = Vec::with_capacity(QUERIES);
    let mut rows = 0usize;
    for q in 0..QUERIES + 20 {
        let query = AuditQuery {
            deployment: Some(format!("d{}", rng.below(DEPLOYMENTS))),
            event_type: Some(TYPES[rng.below(TYPES.len())].to_owned()),
            from: Some(from),
            to: Some(to),
            after: None::<Position>,
            limit: 100,
            ..Default::default()
        };
        let t = Instant::now();
        let page = store.audit(&query).await.unwrap();
        if q >= 20 {
            lat_q.push(t.elapsed());
            rows += page.events.len();
        }
    }
    lat_q.sort();
    Audit {
        seeded: n,
        seed_s,
        p50: pct(&lat_q, 0.5),
        p99: pct(&lat_q, 0.99),
        rows_per_page: rows as f64 / QUERIES as f64,
    }
}

struct InFlight {
    in_flight: usize,
    appends_per_s: f64,
    p50: Duration,
    p99: Duration,
}

/// `in_flight` tasks on one handle, each appending one event at a time to its own
/// new streams, so that many appends are waiting at any moment.
async fn in_flight(store: &EventStore, in_flight: usize) -> InFlight {
    let each = IN_FLIGHT_APPENDS / in_flight;
    let start = Instant::now();
    let tasks = (0..in_flight)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                let actor = Actor::from("bench");
                let mut lat = Vec::with_capacity(each);
                for i in 0..each {
                    let s = StreamRef::new("deployment", format!("flight-{in_flight}-{w}-{i}"));
                    let e = NewEvent::new("DeploymentCreated", 1, json!({"i": i}), actor.clone());
                    let t = Instant::now();
                    store
                        .append(&s, ExpectedVersion::NoStream, vec![e])
                        .await
                        .unwrap();
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect::<Vec<_>>();
    let mut lat = Vec::with_capacity(each * in_flight);
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let appends_per_s = lat.len() as f64 / start.elapsed().as_secs_f64();
    lat.sort();
    InFlight {
        in_flight,
        appends_per_s,
        p50: pct(&lat, 0.5),
        p99: pct(&lat, 0.99),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::var("STOKER_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let tag = std::process::id();
    let db = Database::create("bench");
    let pg = EventStore::connect(&db.url).await.unwrap();
    let pg_row = run("postgres", pg, n).await;
    let pg = EventStore::connect(&db.url).await.unwrap();
    let mut flights = Vec::new();
    for k in IN_FLIGHT {
        flights.push(in_flight(&pg, k).await);
    }
    pg.close().await;
    drop(db);

    // The same appends without waiting for the WAL flush: what the store costs
    // above the disk's fsync latency. Not a product setting; the store is durable.
    let db = Database::create("bench_async");
    db.scalar(&format!(
        "ALTER DATABASE {} SET synchronous_commit = off",
        db.name
    ));
    let pg = EventStore::connect(&db.url).await.unwrap();
    let pg_async_row = run("postgres, synchronous_commit=off (bench only)", pg, 0).await;
    drop(db);

    let path = std::env::temp_dir().join(format!("stoker_bench_{tag}.db"));
    let lite = EventStore::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let lite_row = run("sqlite", lite, n).await;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }

    println!(
        "| backend | appends/s (1 writer) | append p50 | append p99 | seeded events | seed time | audit p50 | audit p99 | rows/page |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in [pg_row, pg_async_row, lite_row] {
        let audit = match &r.audit {
            Some(a) => format!(
                "{} | {:.1} s | {} | {} | {:.0}",
                a.seeded,
                a.seed_s,
                ms(a.p50),
                ms(a.p99),
                a.rows_per_page
            ),
            None => "- | - | - | - | -".to_owned(),
        };
        println!(
            "| {} | {:.0} | {} | {} | {audit} |",
            r.backend,
            r.appends_per_s,
            ms(r.append_p50),
            ms(r.append_p99),
        );
    }

    println!();
    println!(
        "| backend | appends in flight (1 handle) | appends/s | vs 1 in flight | append p50 | append p99 |"
    );
    println!("|---|---|---|---|---|---|");
    let one = flights[0].appends_per_s;
    for f in &flights {
        println!(
            "| postgres | {} | {:.0} | {:.1}x | {} | {} |",
            f.in_flight,
            f.appends_per_s,
            f.appends_per_s / one,
            ms(f.p50),
            ms(f.p99),
        );
    }
}
