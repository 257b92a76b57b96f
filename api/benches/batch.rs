//! Batch lane benchmark, two cases in one run on one in-process server:
//!
//! 1. Throughput: the same N completion requests (distinct prompts, greedy)
//!    through the Batch API (upload, shards, checkpoints, finalize) against
//!    the engine's batch lane driven directly at the same concurrency. The
//!    ratio is the shard and checkpoint overhead.
//! 2. Headroom: interactive TTFT p99 of a fixed closed-loop chat load alone,
//!    then with a large batch running beside it. The ratio is what the batch
//!    costs chat users.
//!
//! Run: `cargo bench -p stoker-api --bench batch`
//! (`STOKER_BENCH_ROWS`, `STOKER_BENCH_CHAT_SECS` shrink it for a quick look.)

#![allow(clippy::field_reassign_with_default)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use stoker_test_support::percentile_of;

use serde_json::{Value, json};
use stoker_api::Config;
use stoker_api::roles::{self, Server};
use stoker_executor::scheduler::PlannerConfig;
use stoker_executor::{EngineEvent, Lane, SamplingParams, TenantId, ValidRequest};

const OUTPUT_TOKENS: usize = 8;
const CHAT_CLIENTS: usize = 2;
const CHAT_OUTPUT: usize = 16;

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(d)
}

fn prompt_text(i: usize) -> String {
    format!("Row {i}: summarize in one word the colour of the sky on a clear day number {i}.")
}

/// Rows through the engine's batch lane directly, `conc` in flight.
async fn engine_rows(
    artifact: Arc<dyn stoker_api::backend::Artifact>,
    engine: Arc<dyn stoker_api::backend::Backend>,
    offset: usize,
    rows: usize,
    conc: usize,
) -> (Duration, usize) {
    let t0 = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..conc {
        let (artifact, engine, next) = (artifact.clone(), engine.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut tokens = 0;
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= rows {
                    return tokens;
                }
                // Same digit count as the Batch API's rows: equal prompt lengths.
                let ids = artifact
                    .tokenizer()
                    .encode(&prompt_text(offset + i))
                    .unwrap();
                let req = ValidRequest::new(
                    ids,
                    SamplingParams::greedy(OUTPUT_TOKENS),
                    Lane::Batch,
                    TenantId::default(),
                    &artifact.model_limits(),
                )
                .unwrap();
                let mut h = engine.submit(req).unwrap();
                while let Some(ev) = h.next().await {
                    match ev.unwrap_or_else(|e| panic!("{e}")) {
                        EngineEvent::Delta { token_ids, .. } => tokens += token_ids.len(),
                        EngineEvent::Finished { .. } => break,
                        EngineEvent::Started { .. } | EngineEvent::PromptLogprobs(_) => {}
                        EngineEvent::Error(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    let mut tokens = 0;
    for t in tasks {
        tokens += t.await.unwrap();
    }
    (t0.elapsed(), tokens)
}

async fn upload(
    client: &reqwest::Client,
    base: &str,
    model: &str,
    rows: usize,
    offset: usize,
) -> String {
    let mut body = String::new();
    for i in 0..rows {
        body.push_str(
            &json!({"custom_id": format!("r{i}"), "method": "POST", "url": "/v1/completions",
                "body": {"model": model, "prompt": prompt_text(offset + i), "max_tokens": OUTPUT_TOKENS, "temperature": 0}})
            .to_string(),
        );
        body.push('\n');
    }
    let form = reqwest::multipart::Form::new()
        .text("purpose", "batch")
        .part(
            "file",
            reqwest::multipart::Part::bytes(body.into_bytes()).file_name("bench.jsonl"),
        );
    let r: Value = client
        .post(format!("{base}/v1/files"))
        .multipart(form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let file = r["id"].as_str().unwrap().to_owned();
    let b: Value = client
        .post(format!("{base}/v1/batches"))
        .json(&json!({"input_file_id": file, "endpoint": "/v1/completions", "completion_window": "24h"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    b["id"].as_str().unwrap().to_owned()
}

async fn wait_done(client: &reqwest::Client, base: &str, id: &str) -> Value {
    loop {
        let b: Value = client
            .get(format!("{base}/v1/batches/{id}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if ["completed", "failed", "expired", "cancelled"].contains(&b["status"].as_str().unwrap())
        {
            return b;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn output_tokens(client: &reqwest::Client, base: &str, file: &str) -> usize {
    let text = client
        .get(format!("{base}/v1/files/{file}/content"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["response"]["body"]["usage"]["completion_tokens"]
                .as_u64()
                .unwrap() as usize
        })
        .sum()
}

/// Sum (ms) and count of the server's interactive-lane `name` histogram.
async fn engine_hist(client: &reqwest::Client, base: &str, name: &str) -> (f64, f64) {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (mut sum, mut count) = (0.0, 0.0);
    for line in text.lines().filter(|l| l.contains("lane=\"interactive\"")) {
        let v = || line.rsplit(' ').next().unwrap().parse::<f64>().unwrap();
        if line.starts_with(&format!("{name}_sum{{")) {
            sum += v() * 1e3;
        } else if line.starts_with(&format!("{name}_count{{")) {
            count += v();
        }
    }
    (sum, count)
}

/// Mean of the server's own interactive TTFT and queue time over `f`'s requests.
async fn engine_means<T, F: std::future::Future<Output = T>>(
    client: &reqwest::Client,
    base: &str,
    f: F,
) -> (T, f64, f64) {
    const TTFT: &str = "stoker_time_to_first_token_seconds";
    const QUEUE: &str = "stoker_request_queue_time_seconds";
    let (t0, q0) = (
        engine_hist(client, base, TTFT).await,
        engine_hist(client, base, QUEUE).await,
    );
    let out = f.await;
    let (t1, q1) = (
        engine_hist(client, base, TTFT).await,
        engine_hist(client, base, QUEUE).await,
    );
    let mean = |a: (f64, f64), b: (f64, f64)| (b.0 - a.0) / (b.1 - a.1).max(1.0);
    (out, mean(t0, t1), mean(q0, q1))
}

/// One chat request as the client saw it, in ms.
struct Chat {
    ttft: f64,
    /// Mean gap between text chunks after the first.
    itl: Option<f64>,
}

/// Closed-loop streaming chat clients for `secs`.
async fn chat_load(base: &str, model: &str, secs: u64) -> Vec<Chat> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..CHAT_CLIENTS {
        let (stop, base, model) = (stop.clone(), base.to_owned(), model.to_owned());
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut chats = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                n += 1;
                let body = json!({"model": model, "stream": true, "max_tokens": CHAT_OUTPUT, "temperature": 0,
                    "messages": [{"role": "user", "content": format!("Client {c} question {n}: name a fruit.")}]});
                let t0 = Instant::now();
                let mut r = client.post(format!("{base}/v1/chat/completions")).json(&body).send().await.unwrap();
                assert_eq!(r.status(), 200);
                // TTFT: the first chunk whose delta carries text (the role
                // chunk before it carries none).
                let mut first = None;
                let mut last = None;
                let mut texts = 0usize;
                let mut buf = String::new();
                while let Some(chunk) = r.chunk().await.unwrap() {
                    buf.push_str(std::str::from_utf8(&chunk).unwrap());
                    while let Some(end) = buf.find("\n\n") {
                        let frame: String = buf.drain(..end + 2).collect();
                        let Some(data) = frame.trim().strip_prefix("data: ") else { continue };
                        if data == "[DONE]" {
                            continue;
                        }
                        let v: Value = serde_json::from_str(data).unwrap();
                        if v["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty()) {
                            let now = t0.elapsed();
                            first.get_or_insert(now);
                            last = Some(now);
                            texts += 1;
                        }
                    }
                }
                let ttft = first.unwrap_or_else(|| t0.elapsed());
                let itl = match (first, last) {
                    (Some(f), Some(l)) if texts > 1 => Some((l - f).as_secs_f64() * 1e3 / (texts - 1) as f64),
                    _ => None,
                };
                chats.push(Chat { ttft: ttft.as_secs_f64() * 1e3, itl });
            }
            chats
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::SeqCst);
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let rows = env_usize("STOKER_BENCH_ROWS", 2000);
        let chat_secs = env_usize("STOKER_BENCH_CHAT_SECS", 40) as u64;
        let mut c = Config::default();
        c.listen = "127.0.0.1:0".parse().unwrap();
        c.model = stoker_test_support::model_path();
        let dir = std::env::temp_dir().join(format!("stoker-bench-batch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        c.data_dir = dir.clone();
        c.batch.max_lines = rows.max(50_000);
        c.engine.threads = env_usize("STOKER_THREADS", 0);
        let conc = c.batch.row_concurrency * c.batch.max_running_shards;
        let c_engine = c.engine.clone();
        let server: Server = roles::start(c).await.unwrap();
        server.wait_ready(Duration::from_secs(300)).await.unwrap();
        let served = server.state.served().unwrap();
        let (artifact, engine) = (served.artifact.clone(), served.backend.clone());
        let model = served.provenance.model_id.clone();
        let base = format!("http://{}", server.addr);
        let client = reqwest::Client::new();

        println!("Batch lane: {rows} completion rows, {OUTPUT_TOKENS} output tokens each, greedy, {conc} rows in flight\n");
        // Warm up both paths.
        engine_rows(artifact.clone(), engine.clone(), 900_000, 32, conc).await;
        // The step planner against token budgets alone, same rows, in
        // alternating halves so drift on a shared machine hits both.
        let planner = c_engine.planner();
        let (mut on, mut off) = (Duration::ZERO, Duration::ZERO);
        for (round, half) in [(0, rows / 2), (1, rows - rows / 2)] {
            for tokens_only in [false, true] {
                engine.set_planner(if tokens_only { PlannerConfig::TOKENS_ONLY } else { planner });
                let offset = 700_000 + round * 50_000 + usize::from(tokens_only) * 20_000;
                let (wall, _) = engine_rows(artifact.clone(), engine.clone(), offset, half, conc).await;
                *(if tokens_only { &mut off } else { &mut on }) += wall;
            }
        }
        engine.set_planner(planner);
        let (on_rs, off_rs) = (rows as f64 / on.as_secs_f64(), rows as f64 / off.as_secs_f64());
        println!("| engine batch lane, direct | rows/s |");
        println!("|---|---|");
        println!("| step planner (defaults) | {on_rs:.1} |");
        println!("| token budgets only | {off_rs:.1} |");
        println!("| planner / token budgets | {:.3} |\n", on_rs / off_rs);
        let (e_wall, e_tok) = engine_rows(artifact.clone(), engine.clone(), 100_000, rows, conc).await;
        let t0 = Instant::now();
        let id = upload(&client, &base, &model, rows, 300_000).await;
        let b = wait_done(&client, &base, &id).await;
        let b_wall = t0.elapsed();
        assert_eq!(b["status"], "completed", "{b}");
        assert_eq!(b["request_counts"]["completed"].as_u64().unwrap() as usize, rows, "{b}");
        let b_tok = output_tokens(&client, &base, b["output_file_id"].as_str().unwrap()).await;
        let (er, br) = (rows as f64 / e_wall.as_secs_f64(), rows as f64 / b_wall.as_secs_f64());
        let (et, bt) = (e_tok as f64 / e_wall.as_secs_f64(), b_tok as f64 / b_wall.as_secs_f64());
        println!("| path | wall s | rows/s | output tok/s |");
        println!("|---|---|---|---|");
        println!("| engine batch lane, direct | {:.1} | {er:.1} | {et:.1} |", e_wall.as_secs_f64());
        println!("| Batch API (upload, shards, checkpoints, finalize) | {:.1} | {br:.1} | {bt:.1} |", b_wall.as_secs_f64());
        println!("| Batch API / engine | | {:.3} | {:.3} |\n", br / er, bt / et);

        println!("Interactive headroom: {CHAT_CLIENTS} closed-loop streaming chat clients, {CHAT_OUTPUT} output tokens, {chat_secs} s per phase\n");
        let (alone, a_engine, a_queue) = engine_means(&client, &base, chat_load(&base, &model, chat_secs)).await;
        let id = upload(&client, &base, &model, rows.max(2000) * 4, 500_000).await;
        // Let the batch fill the lane before measuring.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (with_batch, w_engine, w_queue) =
            engine_means(&client, &base, chat_load(&base, &model, chat_secs)).await;
        let during: Value = client.get(format!("{base}/v1/batches/{id}")).send().await.unwrap().json().await.unwrap();
        let done = during["request_counts"]["completed"].as_u64().unwrap_or(0);
        let _ = client.post(format!("{base}/v1/batches/{id}/cancel")).send().await;
        let split = |v: &[Chat]| -> (Vec<f64>, Vec<f64>) {
            (v.iter().map(|c| c.ttft).collect(), v.iter().filter_map(|c| c.itl).collect())
        };
        let (mut alone, mut alone_itl) = split(&alone);
        let (mut with_batch, mut with_itl) = split(&with_batch);
        let (a50, a99) = (percentile_of(&mut alone, 0.5), percentile_of(&mut alone, 0.99));
        let (w50, w99) = (percentile_of(&mut with_batch, 0.5), percentile_of(&mut with_batch, 0.99));
        let (ai, wi) = (percentile_of(&mut alone_itl, 0.5), percentile_of(&mut with_itl, 0.5));
        println!("| phase | chat requests | TTFT p50 ms | TTFT p99 ms | server TTFT mean ms | server queue mean ms | ITL p50 ms |");
        println!("|---|---|---|---|---|---|---|");
        println!("| chat alone | {} | {a50:.1} | {a99:.1} | {a_engine:.1} | {a_queue:.1} | {ai:.1} |", alone.len());
        println!(
            "| chat + batch ({done} rows done meanwhile) | {} | {w50:.1} | {w99:.1} | {w_engine:.1} | {w_queue:.1} | {wi:.1} |",
            with_batch.len()
        );
        println!("| ratio | | {:.2} | {:.2} | {:.2} | | {:.2} |", w50 / a50, w99 / a99, w_engine / a_engine, wi / ai);
        server.begin_shutdown();
        let _ = server.wait().await;
        let _ = std::fs::remove_dir_all(&dir);
    });
}
