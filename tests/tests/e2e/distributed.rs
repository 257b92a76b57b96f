//! The distributed mode end to end: `stoker api` and two `stoker executor`
//! processes with the real model, a real Kafka-protocol broker (tansu) and
//! the machine's Postgres, driven by the official OpenAI SDK and reqwest.
//! An executor stopped with SIGSTOP rather than killed is in `stopped`; the
//! shared transport layout (`kafka.layout = "shared"`) is in `shared_layout`.

mod shared_layout;
mod stopped;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::batch::{
    completion_line, create_batch, each_exactly_once, file_form, file_lines, get, jsonl, ok, post,
    upload, wait_terminal,
};
use crate::cluster::Cluster;
use crate::harness::{Server, Sse, chunk_text, http, metric_sum};

async fn successes(s: &Server, lane: &str) -> f64 {
    metric_sum(
        &s.metrics().await,
        "stoker_request_success_total",
        &[&format!("lane=\"{lane}\"")],
    )
}

async fn running(s: &Server) -> f64 {
    metric_sum(
        &s.metrics().await,
        "stoker_num_requests_running",
        &["lane=\"interactive\""],
    )
}

/// Once the API sees one live executor, 4 short completions all succeed and
/// all run on `survivor`.
async fn survivor_serves_new_requests(cluster: &Cluster, model: &str, survivor: usize, when: &str) {
    cluster.wait_live(1).await;
    let before = successes(&cluster.executors[survivor], "interactive").await;
    for i in 0..4 {
        let r = http()
            .post(cluster.api.url("/v1/completions"))
            .json(&json!({"model": model, "prompt": format!("Count to {i}:"), "max_tokens": 4}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {i} {when}: {e}"));
        assert_eq!(r.status().as_u16(), 200, "request {i} {when}");
    }
    let after = successes(&cluster.executors[survivor], "interactive").await;
    assert_eq!(
        after - before,
        4.0,
        "the survivor served the new requests {when}"
    );
}

/// A long greedy stream through the API, read until its first content.
async fn long_stream(api: &Server, model: &str) -> (Sse, String) {
    let resp = http()
        .post(api.url("/v1/chat/completions"))
        .json(&json!({
            "model": model,
            "messages": [{"role": "user", "content": "Write a long story about a ship."}],
            "max_tokens": 400,
            "ignore_eos": true,
            "temperature": 0,
            "stream": true,
        }))
        .send()
        .await
        .expect("start a long stream");
    assert_eq!(resp.status().as_u16(), 200, "long stream");
    let mut sse = Sse::new(resp);
    let mut text = String::new();
    while text.is_empty() {
        let data = sse.next().await.expect("stream ended before any content");
        let chunk: Value = serde_json::from_str(&data).expect("chunk JSON");
        assert!(
            chunk.get("error").is_none(),
            "error before content: {chunk}"
        );
        text.push_str(&chunk_text(&chunk));
    }
    (sse, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_spread_over_executors_and_a_killed_executor_ends_its_stream_typed() {
    let mut cluster = Cluster::start("dist", 2).await;
    let model = cluster.api.model_id(None).await;

    // The SDK's concurrent streams are spread over both executors by headroom.
    let out = cluster.api.run_python("sdk_distributed.py", &[]).await;
    assert!(out.contains("streams=12"), "{out}");
    let per_executor = [
        successes(&cluster.executors[0], "interactive").await,
        successes(&cluster.executors[1], "interactive").await,
    ];
    // Warm-up generations do not count; the 13 SDK requests do.
    assert_eq!(per_executor[0] + per_executor[1], 13.0, "{per_executor:?}");
    assert!(
        per_executor.iter().all(|&n| n >= 3.0),
        "both executors serve a share: {per_executor:?}"
    );

    // A stream in flight on one executor; that executor is killed.
    let (mut sse, _) = long_stream(&cluster.api, &model).await;
    let mut victim = None;
    for (i, ex) in cluster.executors.iter().enumerate() {
        if running(ex).await >= 1.0 {
            victim = Some(i);
        }
    }
    let victim = victim.expect("one executor runs the long stream");
    let survivor = 1 - victim;
    cluster.executors[victim].kill9().await;
    let killed = Instant::now();

    // The stream ends with a typed error event, never with another generation's text.
    let error = loop {
        let data = tokio::time::timeout(Duration::from_secs(30), sse.next())
            .await
            .expect("the stream neither continued nor ended after the kill")
            .expect("the stream ended without an error event");
        assert_ne!(
            data, "[DONE]",
            "a stream whose executor died must not end as done"
        );
        let v: Value = serde_json::from_str(&data).expect("event JSON");
        if v.get("error").is_some() {
            break v;
        }
    };
    assert_eq!(error["error"]["code"], "executor_lost", "{error}");
    println!("executor_lost after {:?}", killed.elapsed());
    assert!(
        sse.next().await.is_none(),
        "nothing follows the error event"
    );

    // New requests go to the survivor.
    survivor_serves_new_requests(&cluster, &model, survivor, "after the kill").await;

    let view = cluster.executors_view().await;
    let dead_id = format!("dist-ex{victim}");
    let dead = view
        .iter()
        .find(|e| e["executor_id"] == dead_id.as_str())
        .unwrap_or_else(|| panic!("{dead_id} missing from {view:?}"));
    assert_eq!(dead["live"]["alive"], false, "{dead}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_of_500_lines_completes_on_both_executors_through_a_kill() {
    let mut cluster = Cluster::start("distbatch", 2).await;
    let model = cluster.api.model_id(None).await;
    let ids: Vec<String> = (0..500).map(|i| format!("row-{i:03}")).collect();
    let lines: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| completion_line(id, &model, &format!("Number {i} is"), 3))
        .collect();
    let file = ok(
        &upload(
            &cluster.api,
            None,
            file_form("rows.jsonl", &jsonl(&lines), Some("batch")),
        )
        .await,
        "upload",
    );
    let id = create_batch(&cluster.api, None, &file["id"], "/v1/completions").await;

    // Both executors take shards; once both have run rows, one is killed.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let a = successes(&cluster.executors[0], "batch").await;
        let b = successes(&cluster.executors[1], "batch").await;
        if a >= 1.0 && b >= 1.0 {
            println!("batch rows before the kill: {a} + {b}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "both executors never ran rows: {a}, {b}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster.executors[0].kill9().await;

    let done = wait_terminal(
        &cluster.api,
        None,
        &id,
        Instant::now() + Duration::from_secs(900),
    )
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["request_counts"]["completed"], 500, "{done}");
    let out = file_lines(&cluster.api, None, &done["output_file_id"]).await;
    let errors = file_lines(&cluster.api, None, &done["error_file_id"]).await;
    assert!(
        errors.is_empty(),
        "no row failed: {:?}",
        &errors[..errors.len().min(3)]
    );
    assert_eq!(out.len(), 500);
    each_exactly_once(&ids, &out.iter().collect::<Vec<_>>(), "output");
    for line in &out {
        assert_eq!(line["response"]["status_code"], 200, "{line}");
    }
    let _ = get(&cluster.api, None, &format!("/v1/batches/{id}")).await;
}

const OPS_KEY: &str = "sk-ops-alice-0001";
const APP_KEY: &str = "sk-app-acme-0001";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_an_executor_under_load_fails_no_request() {
    let keys = r#"
[[api_keys]]
name = "ops-alice"
key = "sk-ops-alice-0001"
tenant = "ops"
scopes = ["admin", "inference"]

[[api_keys]]
name = "acme-app"
key = "sk-app-acme-0001"
tenant = "acme"
scopes = ["inference"]
"#;
    let mut cluster = Cluster::start_with("distdrain", 2, keys, Some(OPS_KEY)).await;
    let model = cluster.api.model_id(Some(APP_KEY)).await;

    // Load: four clients sending short streams back to back.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..4 {
        let (base, model, stop) = (cluster.api.base.clone(), model.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut n = 0u32;
            let mut failures = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = http()
                    .post(format!("{base}/v1/chat/completions"))
                    .bearer_auth(APP_KEY)
                    .json(&json!({"model": model, "max_tokens": 12, "stream": true,
                        "messages": [{"role": "user", "content": format!("Client {c} says {n}")}]}))
                    .send()
                    .await
                    .expect("send");
                let status = r.status().as_u16();
                let body = r.text().await.unwrap_or_default();
                if status != 200 || body.contains("event: error") || !body.contains("[DONE]") {
                    failures.push(format!("{status}: {body}"));
                }
                n += 1;
            }
            (n, failures)
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let r = http()
        .post(cluster.api.url("/admin/v1/executors/distdrain-ex0/drain"))
        .bearer_auth(OPS_KEY)
        .json(&json!({"reason": "kernel upgrade on host 0"}))
        .send()
        .await
        .expect("drain");
    assert_eq!(r.status().as_u16(), 202, "drain accepted");

    // The executor finishes what it holds and exits; load keeps flowing.
    let exit = cluster.executors[0]
        .wait_exit_async(Duration::from_secs(120))
        .await
        .expect("the drained executor exits");
    assert!(exit.success(), "drained executor exit status {exit}");
    // It gave its slot up on the way out (a replacement need not wait out
    // the lease's TTL); the other executor still holds its own.
    let held = |holder: &str| {
        cluster.db.scalar(&format!(
            "SELECT count(*) FROM transport_leases WHERE holder = '{holder}'"
        ))
    };
    assert_eq!(held("distdrain-ex0"), "0", "the drained executor's lease");
    assert_eq!(held("distdrain-ex1"), "1", "the other executor's lease");
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut total = 0;
    for c in clients {
        let (n, failures) = c.await.expect("client task");
        assert!(
            failures.is_empty(),
            "requests failed during the drain: {failures:?}"
        );
        total += n;
    }
    println!("{total} requests during the drain");
    assert!(total >= 8, "load ran: {total}");

    // The audit shows who drained it, why, and that it ended drained.
    let audit = ok(
        &get(&cluster.api, Some(OPS_KEY), "/admin/v1/audit?limit=1000").await,
        "audit",
    );
    let events: Vec<&Value> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["stream_id"] == "distdrain-ex0")
        .collect();
    let draining = events
        .iter()
        .find(|e| e["event_type"] == "ExecutorDraining")
        .unwrap_or_else(|| panic!("no ExecutorDraining in {events:?}"));
    assert_eq!(draining["actor"], "ops-alice", "{draining}");
    assert_eq!(draining["reason"], "kernel upgrade on host 0", "{draining}");
    assert!(
        events.iter().any(|e| e["event_type"] == "ExecutorDrained"),
        "{events:?}"
    );
}

/// One short completion through the API: (status, error code, Retry-After).
async fn probe(api: &Server, model: &str) -> (u16, String, Option<String>) {
    let r = http()
        .post(api.url("/v1/completions"))
        .json(&json!({"model": model, "prompt": "The sky is", "max_tokens": 3}))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .unwrap_or_else(|e| panic!("probe request: {e:?}\n{}", api.stderr_tail(6000)));
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body: Value = r.json().await.unwrap_or(Value::Null);
    let code = body["error"]["code"].as_str().unwrap_or("").to_string();
    (status, code, retry)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_gives_typed_errors_and_service_resumes_without_restarts() {
    let mut cluster = Cluster::start("distout", 2).await;
    let model = cluster.api.model_id(None).await;
    assert_eq!(probe(&cluster.api, &model).await.0, 200);
    let (mut sse, _) = long_stream(&cluster.api, &model).await;

    // The broker dies, and with it its in-memory log (topics included).
    cluster.broker.stop();

    // The stream in flight ends with a typed error event.
    let error = loop {
        let data = tokio::time::timeout(Duration::from_secs(60), sse.next())
            .await
            .expect("the stream hung through the outage")
            .expect("the stream ended without an error event");
        assert_ne!(data, "[DONE]");
        let v: Value = serde_json::from_str(&data).expect("event JSON");
        if v.get("error").is_some() {
            break v;
        }
    };
    assert_eq!(error["error"]["code"], "executor_lost", "{error}");

    // New requests: 503 not_ready with Retry-After, not a hang or a 500.
    if let Some(exit) = cluster.api.try_exit() {
        panic!(
            "the API exited during the outage: {exit}\n{}",
            cluster.api.stderr_tail(3000)
        );
    }
    let (status, code, retry) = probe(&cluster.api, &model).await;
    assert_eq!(
        (status, code.as_str()),
        (503, "not_ready"),
        "during the outage"
    );
    assert!(retry.is_some(), "Retry-After during the outage");

    // The outage lasts past the produce timeout (3 s), then a fresh broker
    // starts on the same address: service resumes, nothing restarted.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (status, code, _) = probe(&cluster.api, &model).await;
    assert_eq!((status, code.as_str()), (503, "not_ready"), "still out");
    cluster.broker.restart();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(exit) = cluster.api.try_exit() {
            panic!(
                "the API exited after the broker came back: {exit}\n{}",
                cluster.api.stderr_tail(3000)
            );
        }
        let (status, code, _) = probe(&cluster.api, &model).await;
        if status == 200 {
            break;
        }
        assert_eq!(code, "not_ready", "only typed refusals while recovering");
        assert!(
            Instant::now() < deadline,
            "no recovery after the broker came back"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cluster.wait_live(2).await;
    for ex in &mut cluster.executors {
        assert!(
            ex.try_exit().is_none(),
            "an executor exited during the outage"
        );
    }
    assert!(
        cluster.api.try_exit().is_none(),
        "the API exited during the outage"
    );

    // A replacement executor joins a running cluster and takes work.
    let extra = cluster.start_executor("distout-ex2").await;
    cluster.wait_live(3).await;
    drop(extra);
    let _ = &cluster.db;
}

/// Reads a stream to its end: `Ok(text)` after `[DONE]`, `Err(code)` for a
/// typed error event. Never more than `limit` per event.
async fn finish_stream(sse: &mut Sse, limit: Duration) -> Result<String, String> {
    let mut text = String::new();
    loop {
        let data = tokio::time::timeout(limit, sse.next())
            .await
            .expect("the stream hung")
            .expect("the stream ended without [DONE] or an error event");
        if data == "[DONE]" {
            return Ok(text);
        }
        let v: Value = serde_json::from_str(&data).expect("event JSON");
        if let Some(e) = v.get("error") {
            return Err(e["code"].as_str().unwrap_or("").to_string());
        }
        text.push_str(&chunk_text(&v));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_gives_typed_errors_and_loses_no_batch_line() {
    let mut cluster = Cluster::start_behind_db_proxy("distpg", 2).await;
    let model = cluster.api.model_id(None).await;
    let ids: Vec<String> = (0..150).map(|i| format!("pg-{i:03}")).collect();
    let lines: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| completion_line(id, &model, &format!("Item {i} is"), 4))
        .collect();
    let upload_rows = |name: &'static str| {
        let body = jsonl(&lines);
        let api = &cluster.api;
        async move {
            ok(
                &upload(api, None, file_form(name, &body, Some("batch"))).await,
                "upload",
            )
        }
    };
    let file = upload_rows("rows.jsonl").await;
    let spare = upload_rows("spare.jsonl").await;
    let create = |file: Value| {
        let api = &cluster.api;
        async move {
            post(
                api,
                None,
                "/v1/batches",
                &json!({"input_file_id": file["id"], "endpoint": "/v1/completions",
                        "completion_window": "24h"}),
            )
            .await
        }
    };
    let batch = ok(&create(file.clone()).await, "create batch");
    let id = batch["id"].as_str().unwrap().to_string();

    // Rows are running on the executors when the database goes away, and a
    // stream is open.
    let deadline = Instant::now() + Duration::from_secs(300);
    while successes(&cluster.executors[0], "batch").await
        + successes(&cluster.executors[1], "batch").await
        < 10.0
    {
        assert!(Instant::now() < deadline, "no batch rows ran");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (mut sse, _) = long_stream(&cluster.api, &model).await;
    let proxy = cluster.db_proxy.as_ref().expect("a proxied cluster");
    proxy.cut();
    let cut_at = Instant::now();

    // The stream in flight finishes (generation needs no database).
    let text = finish_stream(&mut sse, Duration::from_secs(60)).await;
    assert!(text.is_ok(), "the open stream ended with {text:?}");

    // Writes get a typed 503 with Retry-After within seconds, not a hang or
    // a 500; so do reads of the batch record.
    let started = Instant::now();
    let refused = create(spare.clone()).await;
    assert_eq!(
        (refused.status, refused.body["error"]["code"].as_str()),
        (503, Some("not_ready")),
        "create batch during the outage: {:?}",
        refused.body
    );
    assert!(
        refused.retry_after.is_some(),
        "Retry-After during the outage"
    );
    println!(
        "create batch refused during the outage in {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the refusal took {:?}",
        started.elapsed()
    );
    let read = get(&cluster.api, None, &format!("/v1/batches/{id}")).await;
    assert_eq!(
        (read.status, read.body["error"]["code"].as_str()),
        (503, Some("not_ready")),
        "GET batch during the outage: {:?}",
        read.body
    );
    // Inference does not need the database: routing reads memory.
    assert_eq!(
        probe(&cluster.api, &model).await.0,
        200,
        "inference during the outage"
    );

    // The outage outlasts the batch shard leases (3 s) and the slot leases
    // (6 s); then the database is back and nothing was restarted.
    let outage = Duration::from_secs(8);
    tokio::time::sleep(outage.saturating_sub(cut_at.elapsed())).await;
    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(120);
    let second = loop {
        let a = create(spare.clone()).await;
        if a.status == 200 {
            break a.body;
        }
        assert_eq!(
            a.body["error"]["code"].as_str(),
            Some("not_ready"),
            "only typed refusals while recovering: {:?}",
            a.body
        );
        assert!(
            Instant::now() < deadline,
            "no recovery after the database came back"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "writes accepted {:?} after the database came back",
        cut_at.elapsed().saturating_sub(outage)
    );
    for s in cluster.executors.iter_mut().chain([&mut cluster.api]) {
        assert!(s.try_exit().is_none(), "a process exited during the outage");
    }
    assert_eq!(
        probe(&cluster.api, &model).await.0,
        200,
        "inference after the outage"
    );

    // Both batches complete with every custom_id exactly once.
    for bid in [id.as_str(), second["id"].as_str().unwrap()] {
        let done = wait_terminal(
            &cluster.api,
            None,
            bid,
            Instant::now() + Duration::from_secs(600),
        )
        .await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["request_counts"]["completed"], 150, "{done}");
        let out = file_lines(&cluster.api, None, &done["output_file_id"]).await;
        let errors = file_lines(&cluster.api, None, &done["error_file_id"]).await;
        assert!(
            errors.is_empty(),
            "no row failed: {:?}",
            &errors[..errors.len().min(3)]
        );
        assert_eq!(out.len(), 150);
        each_exactly_once(&ids, &out.iter().collect::<Vec<_>>(), "output");
    }
}

/// One non-streaming greedy chat through the API: the answer's text, the
/// `x-stoker-executor` it came with, and its request id.
async fn chat(api: &Server, model: &str, messages: &[Value], max_tokens: u32) -> Answer {
    let r = http()
        .post(api.url("/v1/chat/completions"))
        .json(
            &json!({"model": model, "messages": messages, "max_tokens": max_tokens,
                      "temperature": 0}),
        )
        .send()
        .await
        .expect("chat request");
    assert_eq!(r.status().as_u16(), 200, "chat");
    let header = |k: &str| {
        r.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (executor, request_id) = (header("x-stoker-executor"), header("x-request-id"));
    let v: Value = r.json().await.expect("chat JSON");
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    Answer {
        text,
        executor,
        request_id,
    }
}

struct Answer {
    text: String,
    executor: String,
    request_id: String,
}

/// Waits until the API's view of `executor` holds a capacity report with a
/// running request.
async fn wait_reported_running(api: &Server, executor: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v: Value = http()
            .get(api.url("/admin/v1/executors"))
            .send()
            .await
            .expect("GET /admin/v1/executors")
            .json()
            .await
            .expect("executors");
        let running = v["data"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["executor_id"] == executor)
            .and_then(|e| e["live"]["running"].as_u64())
            .unwrap_or(0);
        if running >= 1 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the API saw no report of {executor} running the stream within 10 s: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The request log's row for `request_id`, once the API has written it.
async fn logged(api: &Server, request_id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = http()
            .get(api.url(&format!("/admin/v1/requests/{request_id}")))
            .send()
            .await
            .expect("GET /admin/v1/requests/{id}");
        if r.status().as_u16() == 200 {
            return r.json().await.expect("request log row");
        }
        assert!(
            Instant::now() < deadline,
            "request {request_id} not in the request log after 30 s: {}",
            r.status()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversations_next_turn_goes_where_its_prefix_is_cached() {
    let cluster = Cluster::start("distprefix", 2).await;
    let model = cluster.api.model_id(None).await;
    let served = || async {
        [
            successes(&cluster.executors[0], "interactive").await,
            successes(&cluster.executors[1], "interactive").await,
        ]
    };
    let system = "You are a careful assistant for a shipping company. ".repeat(6);
    let mut messages = vec![
        json!({"role": "system", "content": system}),
        json!({"role": "user", "content": "List the main parts of a cargo ship."}),
    ];
    let before = served().await;
    let answer = chat(&cluster.api, &model, &messages, 16).await;
    let after = served().await;
    let holder = (0..2)
        .find(|&i| after[i] > before[i])
        .expect("turn 1 was served");
    let other = 1 - holder;
    // Provenance names the executor that generated the tokens, not the API.
    let holder_id = format!("distprefix-ex{holder}");
    assert_eq!(answer.executor, holder_id, "x-stoker-executor");
    let row = logged(&cluster.api, &answer.request_id).await;
    assert_eq!(row["executor_id"], holder_id.as_str(), "{row}");
    messages.push(json!({"role": "assistant", "content": answer.text}));

    // A long stream continuing the same conversation also goes to the holder,
    // which is now busier than the other executor.
    let mut story = messages.clone();
    story.push(json!({"role": "user", "content": "Now write a long story about that ship."}));
    let resp = http()
        .post(cluster.api.url("/v1/chat/completions"))
        .json(
            &json!({"model": model, "messages": story, "max_tokens": 400,
                      "ignore_eos": true, "temperature": 0, "stream": true}),
        )
        .send()
        .await
        .expect("start the long stream");
    assert_eq!(resp.status().as_u16(), 200);
    let mut sse = Sse::new(resp);
    let first = sse.next().await.expect("the long stream started");
    assert!(!first.contains("\"error\""), "{first}");
    assert!(
        running(&cluster.executors[holder]).await >= 1.0
            && running(&cluster.executors[other]).await == 0.0,
        "the long stream runs where the conversation's prefix is cached"
    );

    // The API's view holds a report taken since the stream started (until
    // then it counts the stream as sent on top of a report that may still
    // show turn 1, two requests where one runs).
    wait_reported_running(&cluster.api, &holder_id).await;

    // The next turn still goes to the holder: a cached prefix is worth a
    // little imbalance (headroom alone would pick the idle executor).
    messages.push(json!({"role": "user", "content": "Which part needs the most care?"}));
    let before = served().await;
    let next = chat(&cluster.api, &model, &messages, 8).await;
    assert_eq!(
        next.executor, holder_id,
        "x-stoker-executor of the next turn"
    );
    let after = served().await;
    assert_eq!(
        (after[holder] - before[holder], after[other] - before[other]),
        (1.0, 0.0),
        "the next turn goes to executor {holder}, where its prefix is cached"
    );
    drop(sse);
}
