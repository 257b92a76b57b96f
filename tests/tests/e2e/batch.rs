//! The Batch API end to end (`/v1/files`, `/v1/batches`): the OpenAI SDK's
//! workflow (tests/python/sdk_batch.py), a 2,000-line batch that survives three
//! `kill -9`s of the server and still holds every line exactly once with the
//! online API's greedy output, the `stoker batch` CLI, and every malformed
//! upload or batch request refused with its typed error and nothing stored.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::multipart::{Form, Part};
use serde_json::{Value, json};
use stoker_test_support::TestRng;

use crate::harness::{Server, ServerOptions, fresh_dir, http, stoker_bin};

pub(crate) const TERMINAL: [&str; 4] = ["completed", "failed", "expired", "cancelled"];

/// One HTTP answer: the status, the body as JSON (`Null` when it is not JSON)
/// and the `Retry-After` header.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub body: Value,
    pub retry_after: Option<String>,
}

pub(crate) async fn answer(req: reqwest::RequestBuilder, key: Option<&str>) -> Answer {
    let req = match key {
        Some(k) => req.bearer_auth(k),
        None => req,
    };
    let resp = req.send().await.expect("HTTP request");
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = resp.text().await.expect("response body");
    Answer {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        retry_after,
    }
}

pub(crate) async fn get(server: &Server, key: Option<&str>, path: &str) -> Answer {
    answer(http().get(server.url(path)), key).await
}

pub(crate) async fn post(server: &Server, key: Option<&str>, path: &str, body: &Value) -> Answer {
    answer(http().post(server.url(path)).json(body), key).await
}

/// `POST /v1/files` with the given multipart form.
pub(crate) async fn upload(server: &Server, key: Option<&str>, form: Form) -> Answer {
    answer(http().post(server.url("/v1/files")).multipart(form), key).await
}

/// The form the OpenAI SDK sends: `purpose` and a `file` part.
pub(crate) fn file_form(name: &str, data: &[u8], purpose: Option<&str>) -> Form {
    let part = Part::bytes(data.to_vec())
        .file_name(name.to_owned())
        .mime_str("application/jsonl")
        .expect("mime type");
    let form = Form::new();
    let form = match purpose {
        Some(p) => form.text("purpose", p.to_owned()),
        None => form,
    };
    form.part("file", part)
}

pub(crate) fn ok(a: &Answer, what: &str) -> Value {
    assert_eq!(a.status, 200, "{what}: {a:?}");
    a.body.clone()
}

/// Departures from the contract, collected so that one run reports every
/// case of a table-driven test instead of stopping at the first.
#[derive(Debug, Default)]
struct Findings(Vec<String>);

impl Findings {
    fn check(&mut self, holds: bool, finding: impl FnOnce() -> String) {
        if !holds {
            self.note(finding());
        }
    }

    fn note(&mut self, finding: String) {
        // Printed at once too, in case a later hard assertion ends the test.
        println!("DEPARTURE: {finding}");
        self.0.push(finding);
    }

    /// Checks for an OpenAI error body with this status and code (and `param`,
    /// when given); returns the message when status and code match.
    fn refused(
        &mut self,
        a: &Answer,
        status: u16,
        code: &str,
        param: Option<&str>,
        what: &str,
    ) -> Option<String> {
        let err = &a.body["error"];
        if (a.status, err["code"].as_str()) != (status, Some(code)) {
            self.note(format!(
                "{what}: want {status} {code}, got {} {}",
                a.status, a.body
            ));
            return None;
        }
        self.check(
            err["message"].is_string() && err["type"].is_string(),
            || format!("{what}: error.message or error.type missing: {}", a.body),
        );
        if let Some(p) = param {
            self.check(err["param"] == p, || {
                format!("{what}: want param {p:?}: {}", a.body)
            });
        }
        err["message"].as_str().map(str::to_owned)
    }

    fn assert_none(self, server: &Server) {
        assert!(
            self.0.is_empty(),
            "{} departure(s) from the contract:\n- {}\n{}",
            self.0.len(),
            self.0.join("\n- "),
            server.stderr_tail(3000)
        );
    }
}

pub(crate) fn jsonl(lines: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines {
        out.extend_from_slice(line.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

pub(crate) fn chat_line(custom_id: &str, model: &str, content: &str, max_tokens: u32) -> Value {
    json!({
        "custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": model, "messages": [{"role": "user", "content": content}],
                 "max_tokens": max_tokens, "temperature": 0},
    })
}

pub(crate) fn completion_line(
    custom_id: &str,
    model: &str,
    prompt: &str,
    max_tokens: u32,
) -> Value {
    json!({
        "custom_id": custom_id, "method": "POST", "url": "/v1/completions",
        "body": {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
    })
}

pub(crate) fn status_of(batch: &Value) -> &str {
    batch["status"].as_str().unwrap_or("?")
}

pub(crate) fn counts(batch: &Value) -> (u64, u64, u64) {
    let n = |k: &str| batch["request_counts"][k].as_u64().unwrap_or(0);
    (n("total"), n("completed"), n("failed"))
}

/// Polls a batch until it ends or `deadline` passes.
pub(crate) async fn wait_terminal(
    server: &Server,
    key: Option<&str>,
    id: &str,
    deadline: Instant,
) -> Value {
    let mut last = String::new();
    loop {
        let b = ok(
            &get(server, key, &format!("/v1/batches/{id}")).await,
            "GET batch",
        );
        let status = status_of(&b).to_owned();
        if status != last {
            println!("{id}: {status} {}", b["request_counts"]);
            last = status.clone();
        }
        if TERMINAL.contains(&status.as_str()) {
            return b;
        }
        assert!(
            Instant::now() < deadline,
            "{id} still {status} at the deadline: {b}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The parsed lines of a file (none for a missing file id).
pub(crate) async fn file_lines(server: &Server, key: Option<&str>, file_id: &Value) -> Vec<Value> {
    let Some(id) = file_id.as_str() else {
        return Vec::new();
    };
    let mut req = http().get(server.url(&format!("/v1/files/{id}/content")));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.expect("GET file content");
    assert_eq!(resp.status().as_u16(), 200, "GET /v1/files/{id}/content");
    let text = resp.text().await.expect("file content");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{id} line {}: not JSON ({e}): {l}", n + 1))
        })
        .collect()
}

/// Asserts each of `ids` appears exactly once across the lines.
pub(crate) fn each_exactly_once(ids: &[String], lines: &[&Value], what: &str) {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for line in lines {
        let id = line["custom_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: line without custom_id: {line}"));
        *seen.entry(id).or_default() += 1;
    }
    let repeated: BTreeMap<&&str, &usize> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "{what}: repeated custom_ids {repeated:?}"
    );
    let missing: Vec<&String> = ids
        .iter()
        .filter(|i| !seen.contains_key(i.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: {} custom_ids missing, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert_eq!(seen.len(), ids.len(), "{what}: unexpected custom_ids");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_batch() {
    // Small shards, so even these batches run as several.
    let server = Server::start(
        "sdk-batch",
        ServerOptions::default().config("[batch]\nshard_rows = 5\n"),
    )
    .await;
    let out = server.run_python("sdk_batch.py", &[]).await;
    print!("{out}");
    assert!(
        out.contains("OK sdk_batch"),
        "script did not finish:\n{out}"
    );
}

const PROMPTS: [&str; 16] = [
    "The capital of France is",
    "Water boils at",
    "The opposite of hot is",
    "One, two, three,",
    "The sky is",
    "My favourite fruit is",
    "Cats like to",
    "The sun rises in the",
    "A week has seven",
    "Roses are red, violets are",
    "The largest planet is",
    "To be or not to",
    "Monday comes before",
    "The colour of grass is",
    "Ice is frozen",
    "Birds can",
];

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

/// Runs `stoker batch ARGS` against the server; returns (exit code, stdout, stderr).
async fn cli(server: &Server, args: &[&str]) -> (i32, String, String) {
    let dir = server.dir.clone();
    let url = server.base.clone();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out_path = dir.join(format!("cli-{n}.stdout"));
        let err_path = dir.join(format!("cli-{n}.stderr"));
        let mut cmd = Command::new(stoker_bin());
        cmd.arg("batch")
            .args(&args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .env("STOKER_URL", &url)
            .env_remove("STOKER_API_KEY")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        let mut child = cmd.spawn().expect("spawn stoker batch");
        let started = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                break s;
            }
            if started.elapsed() > Duration::from_secs(300) {
                let _ = child.kill();
                panic!("stoker batch {args:?} ran over 300 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let out = std::fs::read_to_string(&out_path).unwrap_or_default();
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        println!("$ stoker batch {}\n{out}{err}", args.join(" "));
        (status.code().unwrap_or(-1), out, err)
    })
    .await
    .expect("cli thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stoker_batch_cli_submits_waits_and_downloads() {
    let server = Server::start("batch-cli", ServerOptions::default()).await;
    let model = server.model_id(None).await;
    let input = server.dir.join("prompts.jsonl");
    let lines: Vec<Value> = (0..6)
        .map(|i| completion_line(&format!("cli-{i}"), &model, PROMPTS[i], 4))
        .collect();
    std::fs::write(&input, jsonl(&lines)).unwrap();
    let input = input.to_str().unwrap();

    // No --endpoint: the first line's url (/v1/completions) is used.
    let (code, out, err) = cli(
        &server,
        &[
            "submit",
            input,
            "--wait",
            "--metadata",
            "suite=cli",
            "--poll-interval",
            "0.5",
        ],
    )
    .await;
    assert_eq!(code, 0, "submit --wait:\n{out}\n{err}");
    let id = out.lines().next().unwrap_or_default().trim().to_owned();
    assert!(id.starts_with("batch_"), "first stdout line: {out}");
    let summary = out.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with(&format!("{id} completed: 6/6 rows, 6 completed, 0 failed")),
        "summary: {summary}"
    );
    assert!(err.contains("uploaded prompts.jsonl"), "stderr: {err}");
    assert!(err.contains("6/6  100%"), "no final progress line: {err}");

    let (code, out, _) = cli(&server, &["status", &id, "--json"]).await;
    assert_eq!(code, 0);
    let b: Value = serde_json::from_str(&out).expect("status --json");
    assert_eq!(
        (status_of(&b), &b["metadata"]["suite"], &b["endpoint"]),
        ("completed", &json!("cli"), &json!("/v1/completions"))
    );
    let (code, out, _) = cli(&server, &["status", &id]).await;
    assert_eq!(code, 0);
    assert!(out.starts_with("BATCH") && out.contains(&id) && out.contains("6/6"));
    let (code, out, _) = cli(&server, &["list", "--limit", "5"]).await;
    assert_eq!(code, 0);
    assert!(out.contains(&id), "list: {out}");

    let out_path = server.dir.join("out.jsonl");
    let err_path = server.dir.join("err.jsonl");
    let (code, _, _) = cli(
        &server,
        &[
            "download",
            &id,
            "--output",
            out_path.to_str().unwrap(),
            "--errors",
            err_path.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, 0);
    let written = std::fs::read_to_string(&out_path).unwrap();
    let got: HashSet<String> = written
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            v["custom_id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(got.len(), 6, "output: {written}");
    assert_eq!(std::fs::read_to_string(&err_path).unwrap(), "");
    let (code, stdout, _) = cli(&server, &["download", &id]).await;
    assert_eq!((code, stdout.as_str()), (0, written.as_str()));

    // Failures: a server 4xx exits 2 with the server's code; bad local input exits 2.
    let (code, _, err) = cli(&server, &["status", "batch_doesnotexist"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("404"), "{err}");
    let missing = server.dir.join("missing.jsonl");
    let (code, _, err) = cli(&server, &["submit", missing.to_str().unwrap()]).await;
    assert_eq!(code, 2);
    assert!(err.contains("no such file"), "{err}");
    let (code, _, err) = cli(&server, &["submit", input, "--metadata", "novalue"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("KEY=VALUE"), "{err}");
    let bad = server.dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"custom_id\": \"x\"}\n").unwrap();
    let (code, _, err) = cli(&server, &["submit", bad.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("400 invalid_value"), "{err}");
}

const FILES_KEY: &str = "sk-e2e-files-0001";
const INFERENCE_KEY: &str = "sk-e2e-infer-0001";
const MAX_FILE_BYTES: usize = 4096;
const MAX_LINES: usize = 20;

const BAD_INPUT_CONFIG: &str = r#"
[[api_keys]]
key = "sk-e2e-files-0001"
tenant = "acme"
scopes = ["batch"]

[[api_keys]]
key = "sk-e2e-infer-0001"
tenant = "acme"
scopes = ["inference"]

[batch]
max_file_bytes = 4096
max_lines = 20
max_backlog_tokens = 2000
"#;

/// A batch request the server must refuse, and how.
struct Refusal {
    what: &'static str,
    body: Value,
    status: u16,
    code: &'static str,
    param: Option<&'static str>,
    /// Text the message must contain (a line number).
    names: Option<&'static str>,
}

async fn count_files(server: &Server) -> usize {
    let list = ok(
        &get(server, Some(FILES_KEY), "/v1/files").await,
        "list files",
    );
    assert_eq!(list["object"], "list", "{list}");
    list["data"].as_array().expect("files data").len()
}

async fn count_batches(server: &Server) -> usize {
    let list = ok(
        &get(server, Some(FILES_KEY), "/v1/batches?limit=100").await,
        "list batches",
    );
    assert_eq!(list["object"], "list", "{list}");
    list["data"].as_array().expect("batches data").len()
}

fn line_bytes(v: &Value) -> Vec<u8> {
    let mut b = v.to_string().into_bytes();
    b.push(b'\n');
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_files_bad_input() {
    let server = Server::start(
        "batch-bad-input",
        ServerOptions::default().config(BAD_INPUT_CONFIG),
    )
    .await;
    let key = Some(FILES_KEY);
    let model = server.model_id(Some(INFERENCE_KEY)).await;
    let good = |id: &str| chat_line(id, &model, "Say hi.", 4);
    let with = |id: &str, field: &str, value: Value| {
        let mut l = good(id);
        l[field] = value;
        l
    };
    let mut f = Findings::default();
    let files_before = count_files(&server).await;
    assert_eq!(files_before, 0);

    // Keys: the batch scope is needed.
    let a = upload(
        &server,
        Some(INFERENCE_KEY),
        file_form("x.jsonl", &jsonl(&[good("a")]), Some("batch")),
    )
    .await;
    f.refused(
        &a,
        403,
        "insufficient_scope",
        None,
        "upload with an inference key",
    );
    let a = upload(
        &server,
        None,
        file_form("x.jsonl", &jsonl(&[good("a")]), Some("batch")),
    )
    .await;
    f.refused(&a, 401, "invalid_api_key", None, "upload without a key");

    // Lines that break the structure: each refused naming line 3.
    let not_object = json!(["c3", good("c3")]);
    let mut no_custom_id = good("c3");
    no_custom_id.as_object_mut().unwrap().remove("custom_id");
    let mixed_url = completion_line("c3", &model, "Hi", 4);
    let line_cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "a line that is not JSON",
            b"{\"custom_id\": \"c3\", \"method\": \n".to_vec(),
        ),
        ("a line that is not an object", line_bytes(&not_object)),
        ("a line without custom_id", line_bytes(&no_custom_id)),
        (
            "a custom_id that is not a string",
            line_bytes(&with("c3", "custom_id", json!(3))),
        ),
        (
            "a custom_id of 65 characters",
            line_bytes(&good(&"x".repeat(65))),
        ),
        ("a duplicate custom_id", line_bytes(&good("c1"))),
        (
            "method GET",
            line_bytes(&with("c3", "method", json!("GET"))),
        ),
        (
            "url /v1/embeddings",
            line_bytes(&with("c3", "url", json!("/v1/embeddings"))),
        ),
        (
            "a body that is not an object",
            line_bytes(&with("c3", "body", json!("Say hi."))),
        ),
        (
            "a url that differs from the other lines'",
            line_bytes(&mixed_url),
        ),
    ];
    for (what, line3) in line_cases {
        let mut data = jsonl(&[good("c1"), good("c2")]);
        data.extend_from_slice(&line3);
        data.extend_from_slice(&jsonl(&[good("c4")]));
        let a = upload(&server, key, file_form("bad.jsonl", &data, Some("batch"))).await;
        if let Some(message) = f.refused(&a, 400, "invalid_value", Some("file"), what) {
            f.check(message.contains("line 3"), || {
                format!("{what}: the message does not name line 3: {message}")
            });
        }
        let files = count_files(&server).await;
        f.check(files == files_before, || {
            format!("{what}: {files} files stored, want {files_before}")
        });
    }

    // Whole-file and form problems.
    let good_file = jsonl(&[good("c1"), good("c2")]);
    let big_line = chat_line("big", &model, &"word ".repeat(100), 4);
    let oversized: Vec<Value> = (0..10)
        .map(|i| with(&format!("big-{i}"), "body", big_line["body"].clone()))
        .collect();
    let oversized = jsonl(&oversized);
    assert!(oversized.len() > MAX_FILE_BYTES, "{}", oversized.len());
    let too_many: Vec<Value> = (0..=MAX_LINES).map(|i| good(&format!("n{i}"))).collect();
    let too_many = jsonl(&too_many);
    assert!(too_many.len() < MAX_FILE_BYTES, "{}", too_many.len());
    let form_cases: Vec<(&str, Form, u16, &str, Option<&str>)> = vec![
        (
            "a file of blank lines",
            file_form("e.jsonl", b"\n", Some("batch")),
            400,
            "invalid_value",
            None,
        ),
        (
            "a 0-byte file",
            file_form("e.jsonl", b"", Some("batch")),
            400,
            "invalid_value",
            None,
        ),
        (
            "purpose fine-tune",
            file_form("g.jsonl", &good_file, Some("fine-tune")),
            400,
            "invalid_value",
            Some("purpose"),
        ),
        (
            "no purpose",
            file_form("g.jsonl", &good_file, None),
            400,
            "missing_field",
            Some("purpose"),
        ),
        (
            "no file part",
            Form::new().text("purpose", "batch"),
            400,
            "missing_field",
            Some("file"),
        ),
        (
            "a file over max_file_bytes",
            file_form("big.jsonl", &oversized, Some("batch")),
            413,
            "payload_too_large",
            None,
        ),
        (
            "a file over max_lines",
            file_form("many.jsonl", &too_many, Some("batch")),
            400,
            "invalid_value",
            Some("file"),
        ),
    ];
    for (what, form, status, code, param) in form_cases {
        let a = upload(&server, key, form).await;
        f.refused(&a, status, code, param, what);
        let files = count_files(&server).await;
        f.check(files == files_before, || {
            format!("{what}: {files} files stored, want {files_before}")
        });
    }

    // A good file: stored as sent. The 64-character custom_id is the limit.
    let id64 = "y".repeat(64);
    let good_data = jsonl(&[good("c1"), good(&id64), good("c3")]);
    let file = ok(
        &upload(
            &server,
            key,
            file_form("good.jsonl", &good_data, Some("batch")),
        )
        .await,
        "upload a good file",
    );
    let file_id = file["id"].as_str().unwrap().to_owned();
    assert!(file_id.starts_with("file-"), "{file}");
    assert_eq!(
        (
            &file["object"],
            &file["bytes"],
            &file["filename"],
            &file["purpose"],
            &file["status"]
        ),
        (
            &json!("file"),
            &json!(good_data.len()),
            &json!("good.jsonl"),
            &json!("batch"),
            &json!("processed")
        ),
        "{file}"
    );
    let files = count_files(&server).await;
    f.check(files == files_before + 1, || {
        format!(
            "{files} files listed after one good upload, want {}",
            files_before + 1
        )
    });
    let again = ok(
        &get(&server, key, &format!("/v1/files/{file_id}")).await,
        "GET file",
    );
    assert_eq!(again, file);
    let content = http()
        .get(server.url(&format!("/v1/files/{file_id}/content")))
        .bearer_auth(FILES_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(content.status().as_u16(), 200);
    assert_eq!(
        content.bytes().await.unwrap().as_ref(),
        good_data.as_slice()
    );
    for (method, path) in [
        ("GET", "/v1/files/file-doesnotexist"),
        ("GET", "/v1/files/file-doesnotexist/content"),
        ("DELETE", "/v1/files/file-doesnotexist"),
    ] {
        let req = match method {
            "GET" => http().get(server.url(path)),
            _ => http().delete(server.url(path)),
        };
        let a = answer(req, key).await;
        f.refused(&a, 404, "file_not_found", None, &format!("{method} {path}"));
    }

    // Batch requests that are refused, with no batch created.
    let create = |body: Value| {
        let server = &server;
        async move { post(server, key, "/v1/batches", &body).await }
    };
    let base = json!({"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                      "completion_window": "24h"});
    let with_field = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    // Against the backlog ceiling of 2,000 tokens: a file of 15 rows of 500
    // output tokens (about 7,500) can never fit; one of 2 rows of 800 fits
    // alone, and then a second one of 1 row of 800 does not while the first
    // is open.
    let essays = |name: &'static str, rows: usize, max_tokens: u32| {
        let lines: Vec<Value> = (0..rows)
            .map(|i| chat_line(&format!("{name}{i}"), &model, "Write an essay.", max_tokens))
            .collect();
        let server = &server;
        async move {
            let a = upload(
                server,
                key,
                file_form(&format!("{name}.jsonl"), &jsonl(&lines), Some("batch")),
            )
            .await;
            ok(&a, "upload a file of essays")["id"].clone()
        }
    };
    let never_fits = essays("huge", 15, 500).await;
    let open_batch = essays("open", 2, 800).await;
    let one_more = essays("more", 1, 800).await;
    let open = ok(
        &create(with_field("input_file_id", open_batch)).await,
        "a batch that fits the empty backlog",
    );
    let batch_cases = vec![
        Refusal {
            what: "an unknown input file",
            body: with_field("input_file_id", json!("file-doesnotexist")),
            status: 404,
            code: "file_not_found",
            param: None,
            names: None,
        },
        Refusal {
            what: "no input_file_id",
            body: json!({"endpoint": "/v1/chat/completions", "completion_window": "24h"}),
            status: 400,
            code: "missing_field",
            param: Some("input_file_id"),
            names: None,
        },
        Refusal {
            what: "endpoint /v1/embeddings",
            body: with_field("endpoint", json!("/v1/embeddings")),
            status: 400,
            code: "invalid_value",
            param: Some("endpoint"),
            names: None,
        },
        Refusal {
            what: "completion_window \"soon\"",
            body: with_field("completion_window", json!("soon")),
            status: 400,
            code: "invalid_value",
            param: Some("completion_window"),
            names: None,
        },
        Refusal {
            what: "completion_window 169h (past the 168h this server accepts)",
            body: with_field("completion_window", json!("169h")),
            status: 400,
            code: "invalid_value",
            param: Some("completion_window"),
            names: None,
        },
        Refusal {
            what: "a chat file for /v1/completions",
            body: with_field("endpoint", json!("/v1/completions")),
            status: 400,
            code: "invalid_value",
            param: None,
            names: Some("line 1"),
        },
        Refusal {
            what: "a batch larger than the whole backlog ceiling",
            body: with_field("input_file_id", never_fits),
            status: 400,
            code: "invalid_value",
            param: Some("input_file_id"),
            names: None,
        },
        Refusal {
            what: "a batch that does not fit the backlog left",
            body: with_field("input_file_id", one_more),
            status: 429,
            code: "batch_backlog_full",
            param: None,
            names: None,
        },
    ];
    for Refusal {
        what,
        body,
        status,
        code,
        param,
        names,
    } in batch_cases
    {
        let before = count_batches(&server).await;
        let a = create(body).await;
        let message = f.refused(&a, status, code, param, what);
        if let (Some(m), Some(n)) = (message, names) {
            f.check(m.contains(n), || {
                format!("{what}: the message does not name {n}: {m}")
            });
        }
        if status == 429 {
            let retry = a.retry_after.as_deref().unwrap_or_default();
            f.check(retry.parse::<u64>().is_ok_and(|s| s >= 1), || {
                format!(
                    "{what}: Retry-After {:?} is not a positive number of seconds",
                    a.retry_after
                )
            });
        }
        let after = count_batches(&server).await;
        f.check(after == before, || {
            format!("{what}: {after} batches listed, want {before}")
        });
    }
    let cancelled = ok(
        &answer(
            http().post(server.url(&format!(
                "/v1/batches/{}/cancel",
                open["id"].as_str().unwrap()
            ))),
            key,
        )
        .await,
        "cancel the batch that held the backlog",
    );
    f.check(
        ["cancelling", "cancelled"].contains(&status_of(&cancelled)),
        || format!("status after cancel: {cancelled}"),
    );
    let batches_before = count_batches(&server).await;

    // Two small batches fit; the list pages newest first with `after`.
    let first = ok(&create(base.clone()).await, "a batch that fits");
    let second = ok(&create(base.clone()).await, "a second batch that fits");
    for b in [&first, &second] {
        assert!(b["id"].as_str().unwrap().starts_with("batch_"), "{b}");
        assert_eq!(
            (
                &b["object"],
                &b["input_file_id"],
                &b["request_counts"]["total"]
            ),
            (&json!("batch"), &json!(file_id), &json!(3)),
            "{b}"
        );
    }
    assert_eq!(count_batches(&server).await, batches_before + 2);
    let page1 = ok(&get(&server, key, "/v1/batches?limit=1").await, "page 1");
    assert_eq!(page1["data"].as_array().unwrap().len(), 1, "{page1}");
    assert_eq!(page1["has_more"], true, "{page1}");
    assert_eq!(page1["first_id"], page1["data"][0]["id"], "{page1}");
    assert_eq!(page1["last_id"], page1["data"][0]["id"], "{page1}");
    let after = page1["last_id"].as_str().unwrap();
    let page2 = ok(
        &get(&server, key, &format!("/v1/batches?limit=1&after={after}")).await,
        "page 2",
    );
    assert_eq!(page2["data"].as_array().unwrap().len(), 1, "{page2}");
    let paged: HashSet<&Value> = [&page1["data"][0]["id"], &page2["data"][0]["id"]].into();
    let created: HashSet<&Value> = [&first["id"], &second["id"]].into();
    assert_eq!(paged, created, "pages {page1} {page2}");
    let a = get(&server, key, "/v1/batches/batch_doesnotexist").await;
    f.check(a.status == 404, || format!("GET an unknown batch: {a:?}"));
    let a = answer(
        http().post(server.url("/v1/batches/batch_doesnotexist/cancel")),
        key,
    )
    .await;
    f.check(a.status == 404, || {
        format!("cancel an unknown batch: {a:?}")
    });
    f.assert_none(&server);
}
