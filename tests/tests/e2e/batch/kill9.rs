//! A 2,000-line batch that survives three `kill -9`s of the server, each at a
//! seeded random point (`STOKER_E2E_SEED` replays another), and still ends with
//! every line exactly once, each line's text the online API's greedy output,
//! and its audit stream from creation to completion.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stoker_test_support::TestRng;

use super::{
    PROMPTS, TERMINAL, answer, completion_line, counts, each_exactly_once, file_form, file_lines,
    get, jsonl, ok, post, status_of, upload, wait_terminal,
};
use crate::harness::{Server, ServerOptions, fresh_dir, http};

const BATCH_KEY: &str = "sk-e2e-batch-0001";
const OPS_KEY: &str = "sk-e2e-ops-0001";

/// Checkpoints every few rows, several rows in flight in each of two shards:
/// a kill always loses rows that ran past the last checkpoint.
const KILL_CONFIG: &str = r#"
[[api_keys]]
name = "batcher"
key = "sk-e2e-batch-0001"
tenant = "acme"
scopes = ["batch"]

[[api_keys]]
name = "ops"
key = "sk-e2e-ops-0001"
tenant = "ops"
scopes = ["admin", "inference"]

[batch]
shard_rows = 100
checkpoint_rows = 10
row_concurrency = 4
max_running_shards = 2
"#;

const KILL_ROWS: u64 = 2000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_survives_three_kill_9() {
    let deadline = Instant::now() + Duration::from_secs(15 * 60);
    let seed = std::env::var("STOKER_E2E_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_ba7c_u64);
    println!("seed {seed} (set STOKER_E2E_SEED to replay another)");
    let mut rng = TestRng::new(seed);

    let data = fresh_dir("batch-kill-data");
    let opts = || {
        ServerOptions::default()
            .config(KILL_CONFIG)
            .data_dir(data.path())
    };
    let mut server = Server::start("batch-kill", opts()).await;
    let key = Some(BATCH_KEY);
    let model = server.model_id(Some(OPS_KEY)).await;

    let mut prompt_of: HashMap<String, &str> = HashMap::new();
    let lines: Vec<Value> = (0..KILL_ROWS)
        .map(|i| {
            let id = format!("row-{i:05}");
            let prompt = PROMPTS[rng.below(PROMPTS.len())];
            prompt_of.insert(id.clone(), prompt);
            completion_line(&id, &model, prompt, 4)
        })
        .collect();
    let ids: Vec<String> = lines
        .iter()
        .map(|l| l["custom_id"].as_str().unwrap().to_owned())
        .collect();
    let file = ok(
        &upload(
            &server,
            key,
            file_form("kill.jsonl", &jsonl(&lines), Some("batch")),
        )
        .await,
        "upload 2,000 lines",
    );
    let created = ok(
        &post(
            &server,
            key,
            "/v1/batches",
            &json!({"input_file_id": file["id"], "endpoint": "/v1/completions",
                    "completion_window": "24h", "metadata": {"test": "kill-9"}}),
        )
        .await,
        "create the batch",
    );
    let id = created["id"].as_str().expect("batch id").to_owned();
    println!("{id} created: {created}");

    for kill in 1..=3u64 {
        // A seeded random wait, cut short at a seeded random point of the next
        // quarter of the rows, so every kill lands mid-run however fast the
        // machine is (here 2,000 short rows take well under a minute).
        let wait = Duration::from_secs(5 + rng.below(21) as u64);
        let quarter = KILL_ROWS / 4;
        let cap = quarter * (kill - 1) + 1 + rng.below(quarter as usize) as u64;
        let t0 = Instant::now();
        let before = loop {
            let b = ok(
                &get(&server, key, &format!("/v1/batches/{id}")).await,
                "GET batch",
            );
            let (_, completed, failed) = counts(&b);
            assert!(
                !TERMINAL.contains(&status_of(&b)),
                "the batch ended before kill {kill}, so the kill would test nothing; \
                 slow it down (row_concurrency): {b}"
            );
            if t0.elapsed() >= wait || completed + failed >= cap {
                break b;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        };
        let exit = server.kill9().await;
        println!(
            "kill {kill} after {:.1}s (planned {wait:?}): {} {} -> {exit}",
            t0.elapsed().as_secs_f64(),
            status_of(&before),
            before["request_counts"]
        );
        server = Server::start("batch-kill", opts()).await;
        let after = ok(
            &get(&server, key, &format!("/v1/batches/{id}")).await,
            "GET batch after restart",
        );
        println!(
            "restarted: {} {}",
            status_of(&after),
            after["request_counts"]
        );
    }

    let end = wait_terminal(&server, key, &id, deadline).await;
    println!("ended: {end}");
    assert_eq!(status_of(&end), "completed", "final batch: {end}");
    let output = file_lines(&server, key, &end["output_file_id"]).await;
    let errors = file_lines(&server, key, &end["error_file_id"]).await;
    assert_eq!(
        output.len() + errors.len(),
        KILL_ROWS as usize,
        "{} output + {} error lines; first errors: {:?}",
        output.len(),
        errors.len(),
        &errors[..errors.len().min(3)]
    );
    let all: Vec<&Value> = output.iter().chain(&errors).collect();
    each_exactly_once(&ids, &all, "after three kill -9");
    assert_eq!(
        counts(&end),
        (KILL_ROWS, output.len() as u64, errors.len() as u64),
        "request_counts against the files: {end}"
    );
    assert!(
        errors.is_empty(),
        "every line is valid, yet {} failed, e.g. {}",
        errors.len(),
        errors[0]
    );

    // Greedy decoding is batch-invariant: each row's text is what the same
    // request alone gets from the online API.
    let client = http();
    let mut reference: HashMap<&str, String> = HashMap::new();
    for prompt in prompt_of.values().copied().collect::<HashSet<_>>() {
        let a = answer(
            client.post(server.url("/v1/completions")).json(&json!({
                "model": model, "prompt": prompt, "max_tokens": 4, "temperature": 0})),
            Some(OPS_KEY),
        )
        .await;
        let body = ok(&a, "online completion");
        reference.insert(prompt, body["choices"][0]["text"].as_str().unwrap().into());
    }
    let mut request_ids = HashSet::new();
    for line in &output {
        let cid = line["custom_id"].as_str().unwrap();
        assert!(line["error"].is_null(), "{cid}: {line}");
        assert_eq!(line["response"]["status_code"], 200, "{cid}: {line}");
        let line_id = line["id"].as_str().unwrap_or_default();
        assert!(line_id.starts_with("batch_req_"), "{cid}: id {line_id:?}");
        assert!(
            request_ids.insert(line_id),
            "{cid}: line id {line_id} repeated"
        );
        let body = &line["response"]["body"];
        assert_eq!(body["object"], "text_completion", "{cid}: {line}");
        let fp = body["system_fingerprint"].as_str().unwrap_or_default();
        assert!(fp.starts_with("fp_"), "{cid}: system_fingerprint {fp:?}");
        let prompt = prompt_of[cid];
        assert_eq!(
            body["choices"][0]["text"].as_str(),
            Some(reference[prompt].as_str()),
            "{cid} ({prompt:?}): batch text differs from the online greedy text"
        );
    }

    // The audit log holds the batch's stream, start to end.
    let mut events = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = "/admin/v1/audit?limit=1000".to_owned();
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let page = ok(&get(&server, Some(OPS_KEY), &path).await, "GET audit");
        events.extend(
            page["data"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["stream_type"] == "batch" && e["stream_id"] == id.as_str())
                .cloned(),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap_or("?"))
        .collect();
    println!("audit of {id}: {types:?}");
    assert!(
        types.first().is_some_and(|t| t.contains("Created")),
        "the batch's first audit event is not its creation: {types:?}"
    );
    let last = events.last().unwrap();
    assert!(
        last["payload"]["outcome"] == "completed" || types.last().unwrap().contains("Complet"),
        "the batch's last audit event does not record its completion: {last}"
    );
    if let Some(n) = last["payload"]["completed"].as_u64() {
        assert_eq!(
            n, KILL_ROWS,
            "completed rows in the last audit event: {last}"
        );
    }
    assert_eq!(
        events
            .iter()
            .filter(|e| e["event_type"] == types[0])
            .count(),
        1,
        "the batch was created more than once: {types:?}"
    );
}
