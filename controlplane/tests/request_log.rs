//! The request-log suite: every case runs against SQLite and against a fresh
//! Postgres database, so both backends behave the same.

use crate::support;

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use stoker_controlplane::requestlog::{
    MAX_KEY_BYTES, RequestLog, RequestLogConfig, RequestLogError, RequestRecord, RevisionFigures,
    stored_key,
};
use stoker_controlplane::store::Db;
use stoker_schemas::codes::ErrorCode;
use stoker_test_support::TestRng;
use support::{Fixture, Kind};

fn base() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 14, 15, 9, 26).unwrap()
}

/// A row with every field set, distinct per `i`, at microsecond precision.
fn row(i: u32) -> RequestRecord {
    let f = f64::from(i);
    RequestRecord {
        request_id: format!("req_{i:06}"),
        tenant: format!("tenant-{}", i % 7),
        deployment_id: "dep-chat".parse().unwrap(),
        revision_id: Some(format!("rev-{}", i % 3)),
        executor_id: (!i.is_multiple_of(5)).then(|| format!("exec-{}", i % 5)),
        lane: if i.is_multiple_of(2) {
            "interactive"
        } else {
            "batch"
        }
        .to_owned(),
        rollout_id: i.is_multiple_of(4).then(|| "ro-1".to_owned()),
        endpoint: "/v1/chat/completions".to_owned(),
        status_code: [200, 400, 503, 500][(i % 4) as usize],
        finish_reason: i.is_multiple_of(4).then(|| "stop".to_owned()),
        error_code: (!i.is_multiple_of(4)).then_some(ErrorCode::ServerOverloaded),
        prompt_tokens: i * 3,
        completion_tokens: if i == 7 { u32::MAX } else { i },
        queue_ms: (!i.is_multiple_of(6)).then_some(f / 7.0),
        prefill_ms: Some(f * 0.1 + 1e-9),
        ttft_ms: (!i.is_multiple_of(9)).then_some(1.0 / (f + 3.0)),
        decode_ms: if i == 11 {
            Some(1e300)
        } else {
            Some(f64::MIN_POSITIVE * f)
        },
        e2e_ms: f * std::f64::consts::PI,
        received_at: base() + chrono::Duration::microseconds(i64::from(i) * 1_234_567),
    }
}

fn config(queue_capacity: usize, max_batch: usize, max_delay_ms: u64) -> RequestLogConfig {
    RequestLogConfig {
        queue_capacity,
        max_batch,
        max_delay: Duration::from_millis(max_delay_ms),
        ..RequestLogConfig::default()
    }
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Keeps every write to `request_log` waiting until it is released: another
/// connection holds the table (Postgres) or the database (SQLite) write-locked.
enum Stall {
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
}

impl Stall {
    async fn new(db: &Db) -> Stall {
        match db {
            Db::Postgres(pool) => {
                let mut tx = pool.begin().await.unwrap();
                sqlx::query("LOCK TABLE request_log IN ACCESS EXCLUSIVE MODE")
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                Stall::Postgres(tx)
            }
            Db::Sqlite(pool) => Stall::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await.unwrap()),
        }
    }

    async fn release(self) {
        match self {
            Stall::Postgres(tx) => tx.commit().await.unwrap(),
            Stall::Sqlite(tx) => tx.commit().await.unwrap(),
        }
    }
}

/// Makes the database refuse every insert into `request_log` until [`accept`].
async fn refuse_inserts(db: &Db) {
    match db {
        Db::Postgres(pool) => sqlx::raw_sql(
            "CREATE FUNCTION refuse_request_log() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'refused by test'; END $$; \
             CREATE TRIGGER refuse BEFORE INSERT ON request_log \
             FOR EACH STATEMENT EXECUTE FUNCTION refuse_request_log();",
        )
        .execute(pool)
        .await
        .map(drop),
        Db::Sqlite(pool) => sqlx::raw_sql(
            "CREATE TRIGGER refuse BEFORE INSERT ON request_log \
             BEGIN SELECT RAISE(ABORT, 'refused by test'); END;",
        )
        .execute(pool)
        .await
        .map(drop),
    }
    .unwrap();
}

async fn accept(db: &Db) {
    let sql = match db {
        Db::Postgres(_) => "DROP TRIGGER refuse ON request_log",
        Db::Sqlite(_) => "DROP TRIGGER refuse",
    };
    match db {
        Db::Postgres(pool) => sqlx::query(sql).execute(pool).await.map(drop),
        Db::Sqlite(pool) => sqlx::query(sql).execute(pool).await.map(drop),
    }
    .unwrap();
}

/// A string of `n` characters from a wide alphabet that does not compress.
fn noise(n: usize, seed: u64) -> String {
    let alphabet: Vec<char> = "abcXYZ019'\"\\;%_?$é☃𝄞\u{202E}\u{0301} \t\n"
        .chars()
        .collect();
    let mut rng = TestRng::new(seed);
    (0..n)
        .map(|_| alphabet[rng.below(alphabet.len())])
        .collect()
}

mod cases {
    use super::*;

    pub async fn a_thousand_rows_round_trip_with_every_field_intact(fx: &Fixture) {
        let log = RequestLog::spawn(fx.store.db(), RequestLogConfig::default());
        let rows: Vec<_> = (0..1_000).map(row).collect();
        for r in &rows {
            log.record(r.clone());
        }
        log.flush().await.unwrap();
        assert_eq!(
            (log.written(), log.dropped(), log.db_errors()),
            (1_000, 0, 0)
        );
        for r in &rows {
            assert_eq!(log.get(&r.request_id).await.unwrap().as_ref(), Some(r));
        }
        assert_eq!(log.get("req_missing").await.unwrap(), None);
    }

    pub async fn record_returns_at_once_while_the_database_is_stalled(fx: &Fixture) {
        let db = fx.store.db();
        let log = RequestLog::spawn(db.clone(), RequestLogConfig::default());
        let rows: Vec<_> = (0..10_000).map(row).collect();
        let stall = Stall::new(&db).await;
        let started = Instant::now();
        for r in rows {
            log.record(r);
        }
        // Were `record` to wait for the database, it would wait until the
        // stall is released below, i.e. forever: the bound only has to
        // separate "returned" from "hung", so it is generous for a loaded
        // machine (it is not a speed check).
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "10,000 records took {took:?}"
        );
        assert_eq!(log.written(), 0, "nothing can be written while stalled");
        stall.release().await;
        log.flush().await.unwrap();
        assert_eq!((log.written(), log.dropped()), (10_000, 0));
    }

    pub async fn a_full_queue_drops_and_counts_instead_of_blocking(fx: &Fixture) {
        let db = fx.store.db();
        // One row per batch, so the writer holds exactly one row while it waits.
        let log = RequestLog::spawn(db.clone(), config(8, 1, 1));
        let stall = Stall::new(&db).await;
        log.record(row(0));
        wait_until("the writer took row 0", || log.queued() == 0).await;
        let started = Instant::now();
        for i in 1..=100 {
            log.record(row(i));
        }
        // Generous, as above: a blocked `record` would never return.
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!((log.queued(), log.dropped()), (8, 92));
        stall.release().await;
        log.flush().await.unwrap();
        assert_eq!((log.written(), log.dropped()), (9, 92));
        for i in 0..=8 {
            assert!(log.get(&row(i).request_id).await.unwrap().is_some());
        }
        assert_eq!(log.get(&row(9).request_id).await.unwrap(), None);
    }

    pub async fn a_duplicate_request_id_is_ignored_not_an_error(fx: &Fixture) {
        let log = RequestLog::spawn(fx.store.db(), RequestLogConfig::default());
        let first = row(1);
        let mut second = row(2);
        second.request_id = first.request_id.clone();
        // Twice in one batch, then again in a later batch.
        log.record(first.clone());
        log.record(second.clone());
        log.flush().await.unwrap();
        log.record(second);
        log.flush().await.unwrap();
        assert_eq!((log.written(), log.dropped(), log.db_errors()), (1, 0, 0));
        assert_eq!(log.get(&first.request_id).await.unwrap(), Some(first));
    }

    pub async fn revision_figures_count_a_known_set_exactly(fx: &Fixture) {
        let log = RequestLog::spawn(fx.store.db(), RequestLogConfig::default());
        let since = base();
        let mut n = 0;
        let mut add = |revision: Option<&str>,
                       deployment: &str,
                       at: DateTime<Utc>,
                       status: u16,
                       code: Option<ErrorCode>,
                       ttft: Option<f64>| {
            n += 1;
            let mut r = row(n);
            r.deployment_id = deployment.to_owned();
            r.revision_id = revision.map(str::to_owned);
            r.received_at = at;
            r.status_code = status;
            r.error_code = code;
            r.ttft_ms = ttft;
            log.record(r);
        };
        let late = since + chrono::Duration::seconds(5);
        let b = Some("rev-b");
        // 100 successes with TTFTs 100, 99, …, 1 (inserted out of order).
        for t in (1..=100).rev() {
            add(b, "dep", late, 200, None, Some(f64::from(t)));
        }
        for _ in 0..5 {
            add(b, "dep", late, 500, Some(ErrorCode::InternalError), None); // error
        }
        for _ in 0..2 {
            add(b, "dep", late, 200, Some(ErrorCode::ExecutorLost), None); // error in a stream
        }
        for _ in 0..3 {
            add(b, "dep", late, 503, Some(ErrorCode::ServerOverloaded), None);
        }
        add(
            b,
            "dep",
            late,
            503,
            Some(ErrorCode::DeadlineInfeasible),
            None,
        );
        add(b, "dep", late, 503, Some(ErrorCode::NotReady), None);
        add(
            b,
            "dep",
            late,
            429,
            Some(ErrorCode::TenantQuotaExceeded),
            None,
        );
        add(
            b,
            "dep",
            late,
            429,
            Some(ErrorCode::TenantQuotaExceeded),
            None,
        );
        for _ in 0..4 {
            add(b, "dep", late, 400, Some(ErrorCode::InvalidValue), None); // the client's fault
        }
        // Rows the window excludes: earlier, another revision, another deployment,
        // no revision. The bound is inclusive: a row at `since` counts.
        for _ in 0..10 {
            add(
                b,
                "dep",
                since - chrono::Duration::microseconds(1),
                500,
                None,
                Some(1e6),
            );
            add(Some("rev-a"), "dep", late, 500, None, Some(1e6));
            add(b, "dep-other", late, 500, None, Some(1e6));
            add(
                None,
                "dep",
                late,
                503,
                Some(ErrorCode::ServerOverloaded),
                None,
            );
        }
        add(b, "dep", since, 200, None, None);
        log.flush().await.unwrap();

        let got = log.revision_figures("dep", "rev-b", since).await.unwrap();
        let requests = 100 + 5 + 2 + 3 + 1 + 1 + 2 + 4 + 1;
        assert_eq!(
            got,
            RevisionFigures {
                requests,
                errors: 7,
                overloads: 7,
                ttft_p99_ms: Some(99.0),
                error_rate: 7.0 / requests as f64,
                overload_rate: 7.0 / requests as f64,
            }
        );
        let none = log.revision_figures("dep", "rev-z", since).await.unwrap();
        assert_eq!(
            none,
            RevisionFigures {
                requests: 0,
                errors: 0,
                overloads: 0,
                ttft_p99_ms: None,
                error_rate: 0.0,
                overload_rate: 0.0,
            }
        );
        let later = log
            .revision_figures("dep", "rev-b", late + chrono::Duration::microseconds(1))
            .await
            .unwrap();
        assert_eq!(later.requests, 0);
    }

    pub async fn split_counts_requests_per_revision(fx: &Fixture) {
        let log = RequestLog::spawn(fx.store.db(), RequestLogConfig::default());
        let since = base();
        let mut n = 0;
        let mut add = |deployment: &str, revision: Option<&str>, at: DateTime<Utc>, times: u32| {
            for _ in 0..times {
                n += 1;
                let mut r = row(n);
                r.deployment_id = deployment.to_owned();
                r.revision_id = revision.map(str::to_owned);
                r.received_at = at;
                log.record(r);
            }
        };
        let late = since + chrono::Duration::milliseconds(1);
        add("dep", Some("rev-b"), late, 12);
        add("dep", Some("rev-a"), late, 30);
        add("dep", Some("rev-a"), since, 1);
        add("dep", None, late, 3);
        add("dep-other", Some("rev-a"), late, 5);
        add(
            "dep",
            Some("rev-c"),
            since - chrono::Duration::seconds(1),
            7,
        );
        log.flush().await.unwrap();
        assert_eq!(
            log.split("dep", since).await.unwrap(),
            [("rev-a".to_owned(), 31), ("rev-b".to_owned(), 12)]
        );
        assert_eq!(
            log.split("dep", since - chrono::Duration::days(1))
                .await
                .unwrap()
                .len(),
            3
        );
        assert!(log.split("dep-none", since).await.unwrap().is_empty());
    }

    pub async fn hostile_strings_round_trip_safely(fx: &Fixture) {
        let log = RequestLog::spawn(fx.store.db(), RequestLogConfig::default());
        let mut plain = Vec::new();
        for (i, s) in [
            "'; DROP TABLE request_log; --",
            "\"double\" and 'single' and `back` quotes",
            "back\\slash \\' \\\" %_ LIKE wildcards",
            "placeholders ? $1 $$ :name @p1",
            "ünïcødé ☃ 𝄞 עברית \u{202E}rtl\u{202C} e\u{0301} 😀",
            "line\nbreak\r\ttab",
        ]
        .into_iter()
        .enumerate()
        {
            let mut r = row(i as u32);
            r.request_id = s.to_owned();
            r.tenant = s.to_owned();
            r.deployment_id = format!("dep {s}");
            r.revision_id = Some(s.to_owned());
            r.finish_reason = Some(s.to_owned());
            log.record(r.clone());
            plain.push(r);
        }
        // 10 KB of incompressible text: as given in columns without an index; the
        // indexed ids are stored bounded, and found under the original.
        let mut big = row(100);
        big.request_id = noise(10_000, 1);
        big.deployment_id = noise(10_000, 2);
        big.revision_id = Some(noise(10_000, 3));
        big.tenant = noise(10_000, 4);
        big.finish_reason = Some(noise(10_000, 5));
        log.record(big.clone());
        // What neither database can hold is normalised the same way on both.
        let mut odd = row(101);
        odd.request_id = "nul\0id".to_owned();
        odd.tenant = "nul\0tenant".to_owned();
        odd.ttft_ms = Some(f64::NAN);
        odd.queue_ms = Some(f64::INFINITY);
        odd.e2e_ms = f64::NAN;
        odd.received_at = base() + chrono::Duration::nanoseconds(1_234_567_891);
        log.record(odd);
        log.flush().await.unwrap();
        assert_eq!((log.written(), log.dropped()), (8, 0));

        for r in &plain {
            assert_eq!(log.get(&r.request_id).await.unwrap().as_ref(), Some(r));
        }
        let stored = log.get(&big.request_id).await.unwrap().unwrap();
        let key = stored_key(&big.request_id).into_owned();
        assert!(
            key.len() <= MAX_KEY_BYTES
                && big.request_id.starts_with(key.split('~').next().unwrap())
        );
        assert_eq!(stored.request_id, key);
        assert_eq!(stored.deployment_id, stored_key(&big.deployment_id));
        assert_eq!(
            stored.revision_id.as_deref(),
            Some(&*stored_key(big.revision_id.as_ref().unwrap()))
        );
        assert_eq!(
            (&stored.tenant, &stored.finish_reason),
            (&big.tenant, &big.finish_reason)
        );
        assert_eq!(
            log.split(&big.deployment_id, base()).await.unwrap(),
            [(stored.revision_id.clone().unwrap(), 1)]
        );
        let figures = log
            .revision_figures(
                &big.deployment_id,
                big.revision_id.as_ref().unwrap(),
                base(),
            )
            .await
            .unwrap();
        assert_eq!(figures.requests, 1);

        let odd = log.get("nul\0id").await.unwrap().unwrap();
        assert_eq!(
            (odd.request_id.as_str(), odd.tenant.as_str()),
            ("nul\u{FFFD}id", "nul\u{FFFD}tenant")
        );
        assert_eq!((odd.ttft_ms, odd.queue_ms, odd.e2e_ms), (None, None, 0.0));
        assert_eq!(
            odd.received_at,
            base() + chrono::Duration::microseconds(1_234_567)
        );
        // The table is still there.
        assert_eq!(log.split("dep-chat", base()).await.unwrap().len(), 1);
    }

    pub async fn a_code_this_build_does_not_know_reads_as_unknown(fx: &Fixture) {
        let db = fx.store.db();
        let log = RequestLog::spawn(db.clone(), RequestLogConfig::default());
        let r = row(1);
        log.record(r.clone());
        log.flush().await.unwrap();
        // A newer instance wrote a code this build has no variant for.
        let sql = "UPDATE request_log SET error_code = 'from_a_newer_build'";
        match &db {
            Db::Postgres(pool) => sqlx::raw_sql(sql).execute(pool).await.map(drop),
            Db::Sqlite(pool) => sqlx::raw_sql(sql).execute(pool).await.map(drop),
        }
        .unwrap();
        let got = log.get(&r.request_id).await.unwrap().unwrap();
        assert_eq!(got.error_code, Some(ErrorCode::Unknown));
        assert_eq!(got.request_id, r.request_id);
    }

    pub async fn a_refused_batch_is_retried_then_dropped_and_the_writer_keeps_going(fx: &Fixture) {
        let db = fx.store.db();
        let cfg = RequestLogConfig {
            retries: 2,
            retry_backoff: Duration::from_millis(5),
            ..RequestLogConfig::default()
        };
        let log = RequestLog::spawn(db.clone(), cfg);
        refuse_inserts(&db).await;
        for i in 0..3 {
            log.record(row(i));
        }
        match log.flush().await {
            Err(RequestLogError::Database(e)) => assert!(e.contains("refused by test"), "{e}"),
            other => panic!("expected a database error, got {other:?}"),
        }
        assert_eq!((log.written(), log.dropped(), log.db_errors()), (0, 3, 3));
        accept(&db).await;
        log.record(row(3));
        log.flush().await.unwrap();
        assert_eq!((log.written(), log.dropped(), log.db_errors()), (1, 3, 3));
        assert_eq!(log.get(&row(0).request_id).await.unwrap(), None);
        assert_eq!(log.get(&row(3).request_id).await.unwrap(), Some(row(3)));
    }

    pub async fn a_refused_batch_is_written_once_the_database_recovers(fx: &Fixture) {
        let db = fx.store.db();
        let cfg = RequestLogConfig {
            retries: 30,
            retry_backoff: Duration::from_millis(20),
            ..RequestLogConfig::default()
        };
        let log = RequestLog::spawn(db.clone(), cfg);
        refuse_inserts(&db).await;
        for i in 0..3 {
            log.record(row(i));
        }
        wait_until("the first attempt failed", || log.db_errors() > 0).await;
        accept(&db).await;
        log.flush().await.unwrap();
        assert_eq!((log.written(), log.dropped()), (3, 0));
        assert!(log.db_errors() >= 1);
    }

    pub async fn dropping_every_handle_writes_what_is_queued(fx: &Fixture) {
        // A delay far longer than the test waits: only closing can start the write.
        let log = RequestLog::spawn(fx.store.db(), config(1_024, 512, 60_000));
        let other = log.clone();
        for i in 0..50 {
            other.record(row(i));
        }
        drop(other);
        drop(log);
        // Read through a separate connection pool, as another process would.
        let reader = RequestLog::spawn(fx.reconnect().await.db(), RequestLogConfig::default());
        let deadline = Instant::now() + Duration::from_secs(10);
        while reader
            .split("dep-chat", base())
            .await
            .unwrap()
            .iter()
            .map(|s| s.1)
            .sum::<u64>()
            < 50
        {
            assert!(
                Instant::now() < deadline,
                "the queued rows were never written"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn a_lone_row_is_written_after_max_delay_without_a_flush(fx: &Fixture) {
        let log = RequestLog::spawn(fx.store.db(), config(1_024, 512, 20));
        log.record(row(1));
        wait_until("the row was written", || log.written() == 1).await;
        assert_eq!(log.get(&row(1).request_id).await.unwrap(), Some(row(1)));
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
    a_thousand_rows_round_trip_with_every_field_intact,
    record_returns_at_once_while_the_database_is_stalled,
    a_full_queue_drops_and_counts_instead_of_blocking,
    a_duplicate_request_id_is_ignored_not_an_error,
    revision_figures_count_a_known_set_exactly,
    split_counts_requests_per_revision,
    hostile_strings_round_trip_safely,
    a_code_this_build_does_not_know_reads_as_unknown,
    a_refused_batch_is_retried_then_dropped_and_the_writer_keeps_going,
    a_refused_batch_is_written_once_the_database_recovers,
    dropping_every_handle_writes_what_is_queued,
    a_lone_row_is_written_after_max_delay_without_a_flush,
);
