//! HTTP overhead benchmark: TTFT and output tokens/s through the whole HTTP
//! front (axum, validation, admission, SSE) against the engine alone, in the
//! same process and the same run, alternating rounds so both see the same
//! machine. Prompts are 128 token ids, distinct per request so the prefix
//! cache does not favour either side; decoding is greedy, so both sides
//! produce the same tokens.
//!
//! Run: `cargo bench -p stoker-api --bench http`

// Configs are built by adjusting a default, which reads best here.
#![allow(clippy::field_reassign_with_default)]

use std::time::{Duration, Instant};
use stoker_test_support::percentile_of;

use serde_json::json;
use stoker_api::Config;
use stoker_api::backend::{Artifact, Backend};
use stoker_api::roles::{self, Server};
use stoker_executor::{EngineEvent, Lane, SamplingParams, TenantId, ValidRequest};

const PROMPT_TOKENS: usize = 128;
const OUTPUT_TOKENS: usize = 64;

struct Trace {
    ttft: Duration,
    tokens: usize,
}

struct Round {
    traces: Vec<Trace>,
    wall: Duration,
    /// Engine-measured TTFT of this round's requests (sum in ms, count), read
    /// from the server's own histogram: pairs each HTTP TTFT with the
    /// engine's view of the same request.
    engine_ttft: (f64, f64),
}

/// Sum (ms) and count of `stoker_time_to_first_token_seconds`.
async fn engine_ttft_totals(client: &reqwest::Client, server: &Server) -> (f64, f64) {
    let text = client
        .get(format!("http://{}/metrics", server.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut sum = 0.0;
    let mut count = 0.0;
    for line in text.lines() {
        let v = || line.rsplit(' ').next().unwrap().parse::<f64>().unwrap();
        if line.starts_with("stoker_time_to_first_token_seconds_sum{") {
            sum += v() * 1e3;
        } else if line.starts_with("stoker_time_to_first_token_seconds_count{") {
            count += v();
        }
    }
    (sum, count)
}

fn prompt(engine: &dyn Artifact, i: usize) -> Vec<u32> {
    let text = format!(
        "Request {i}. The history of computing is a story of abstraction layered upon abstraction, \
         from relays and vacuum tubes to transistors, integrated circuits, operating systems, \
         compilers, networks and the web, each layer hiding the one below it. "
    );
    let mut ids = engine.tokenizer().encode(&text.repeat(6)).unwrap();
    ids.truncate(PROMPT_TOKENS);
    ids
}

async fn engine_one(artifact: &dyn Artifact, engine: &dyn Backend, ids: Vec<u32>) -> Trace {
    let req = ValidRequest::new(
        ids,
        SamplingParams::greedy(OUTPUT_TOKENS),
        Lane::Interactive,
        TenantId::default(),
        &artifact.model_limits(),
    )
    .unwrap();
    let t0 = Instant::now();
    let mut h = engine.submit(req).unwrap();
    let mut ttft = None;
    let mut tokens = 0;
    while let Some(ev) = h.next().await {
        match ev.unwrap_or_else(|e| panic!("{e}")) {
            EngineEvent::Delta {
                token_ids, text, ..
            } => {
                if ttft.is_none() && !text.is_empty() {
                    ttft = Some(t0.elapsed());
                }
                tokens += token_ids.len();
            }
            EngineEvent::Finished { .. } => break,
            EngineEvent::Started { .. } | EngineEvent::PromptLogprobs(_) => {}
            EngineEvent::Error(e) => panic!("{e}"),
        }
    }
    Trace {
        ttft: ttft.unwrap_or_else(|| t0.elapsed()),
        tokens,
    }
}

async fn http_one(client: &reqwest::Client, url: &str, model: &str, ids: Vec<u32>) -> Trace {
    let body = json!({"model": model, "prompt": ids, "max_tokens": OUTPUT_TOKENS,
        "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let t0 = Instant::now();
    let mut r = client.post(url).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut ttft = None;
    let mut buf = String::new();
    while let Some(c) = r.chunk().await.unwrap() {
        buf.push_str(std::str::from_utf8(&c).unwrap());
        if ttft.is_none() && buf.contains("\"text\":\"") && !buf.contains("\"text\":\"\"") {
            ttft = Some(t0.elapsed());
        }
    }
    let usage_line = buf
        .split("\n\n")
        .filter(|f| f.contains("\"usage\":{"))
        .last()
        .expect("usage chunk");
    let v: serde_json::Value =
        serde_json::from_str(usage_line.trim_start_matches("data: ")).unwrap();
    Trace {
        ttft: ttft.unwrap_or_else(|| t0.elapsed()),
        tokens: v["usage"]["completion_tokens"].as_u64().unwrap() as usize,
    }
}

async fn round(server: &Server, http: bool, concurrency: usize, next_prompt: &mut usize) -> Round {
    let served = server.state.served().unwrap();
    let (artifact, engine) = (served.artifact.clone(), served.backend.clone());
    let url = format!("http://{}/v1/completions", server.addr);
    let model = served.provenance.model_id.clone();
    let client = reqwest::Client::new();
    let before = engine_ttft_totals(&client, server).await;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let ids = prompt(artifact.as_ref(), *next_prompt);
        *next_prompt += 1;
        let (artifact, engine, client, url, model) = (
            artifact.clone(),
            engine.clone(),
            client.clone(),
            url.clone(),
            model.clone(),
        );
        tasks.push(tokio::spawn(async move {
            if http {
                http_one(&client, &url, &model, ids).await
            } else {
                engine_one(artifact.as_ref(), engine.as_ref(), ids).await
            }
        }));
    }
    let mut traces = Vec::new();
    for t in tasks {
        traces.push(t.await.unwrap());
    }
    let wall = t0.elapsed();
    let after = engine_ttft_totals(&client, server).await;
    Round {
        traces,
        wall,
        engine_ttft: (after.0 - before.0, after.1 - before.1),
    }
}

struct Summary {
    ttft_p50: f64,
    ttft_p99: f64,
    tok_s: f64,
}

fn summarize(rounds: &[Round]) -> Summary {
    let mut ttft: Vec<f64> = rounds
        .iter()
        .flat_map(|r| r.traces.iter().map(|t| t.ttft.as_secs_f64() * 1e3))
        .collect();
    let tokens: usize = rounds
        .iter()
        .flat_map(|r| r.traces.iter().map(|t| t.tokens))
        .sum();
    let wall: f64 = rounds.iter().map(|r| r.wall.as_secs_f64()).sum();
    Summary {
        ttft_p50: percentile_of(&mut ttft, 0.5),
        ttft_p99: percentile_of(&mut ttft, 0.99),
        tok_s: tokens as f64 / wall,
    }
}

/// Mean client-side TTFT minus mean engine-side TTFT over the same requests.
fn paired_overhead(rounds: &[Round]) -> f64 {
    let client: f64 = rounds
        .iter()
        .flat_map(|r| r.traces.iter().map(|t| t.ttft.as_secs_f64() * 1e3))
        .sum();
    let n: usize = rounds.iter().map(|r| r.traces.len()).sum();
    let (sum, count) = rounds.iter().fold((0.0, 0.0), |a, r| {
        (a.0 + r.engine_ttft.0, a.1 + r.engine_ttft.1)
    });
    assert_eq!(
        count as usize, n,
        "every HTTP request was observed once by the engine"
    );
    client / n as f64 - sum / count
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = Config::default();
        c.listen = "127.0.0.1:0".parse().unwrap();
        c.model = stoker_test_support::model_path();
        c.data_dir = std::env::temp_dir().join("stoker-bench-http");
        c.engine.threads = std::env::var("STOKER_THREADS").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
        let server = roles::start(c).await.unwrap();
        server.wait_ready(Duration::from_secs(300)).await.unwrap();
        let rounds: usize = std::env::var("STOKER_BENCH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(4);
        let mut next = 0usize;
        // One unmeasured round each to warm caches and the connection pool.
        round(&server, false, 2, &mut next).await;
        round(&server, true, 2, &mut next).await;
        println!("HTTP front against the engine alone: {PROMPT_TOKENS}-token prompts, {OUTPUT_TOKENS} output tokens, greedy, {rounds} alternating rounds per side\n");
        println!("| concurrency | path | TTFT p50 ms | TTFT p99 ms | output tok/s |");
        println!("|---|---|---|---|---|");
        let mut paired = Vec::new();
        for conc in [1usize, 16] {
            let per_round = if conc == 1 { 4 } else { 1 };
            let mut eng = Vec::new();
            let mut http = Vec::new();
            for _ in 0..rounds {
                for _ in 0..per_round {
                    eng.push(round(&server, false, conc, &mut next).await);
                }
                for _ in 0..per_round {
                    http.push(round(&server, true, conc, &mut next).await);
                }
            }
            let e = summarize(&eng);
            let h = summarize(&http);
            println!("| {conc} | engine | {:.1} | {:.1} | {:.1} |", e.ttft_p50, e.ttft_p99, e.tok_s);
            println!("| {conc} | HTTP | {:.1} | {:.1} | {:.1} |", h.ttft_p50, h.ttft_p99, h.tok_s);
            println!(
                "| {conc} | HTTP - engine | {:+.2} | {:+.2} | ratio {:.3} |",
                h.ttft_p50 - e.ttft_p50,
                h.ttft_p99 - e.ttft_p99,
                h.tok_s / e.tok_s
            );
            paired.push((conc, paired_overhead(&http)));
        }
        println!("\nPaired: client TTFT through HTTP minus the engine's own TTFT for the same requests (mean)\n");
        println!("| concurrency | HTTP overhead on TTFT, ms |");
        println!("|---|---|");
        for (conc, ms) in paired {
            println!("| {conc} | {ms:.2} |");
        }
        server.begin_shutdown();
        let _ = server.wait().await;
    });
}
