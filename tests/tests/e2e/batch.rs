//! The Batch API end to end (`/v1/files`, `/v1/batches`), one subject a file:
//!
//! * `clients`: the OpenAI SDK's workflow (tests/python/sdk_batch.py) and the
//!   `stoker batch` CLI;
//! * `kill9`: a 2,000-line batch that survives three `kill -9`s of the server and
//!   still holds every line exactly once with the online API's greedy output;
//! * `bad_input`: every malformed upload or batch request refused with its typed
//!   error and nothing stored, one table snapshot-tested with `insta`;
//! * `files_and_listing`: a good file stored as sent, batches that fit, paging;
//! * `cancel`: a running batch cancelled: its rows stop, each line written once.
//!
//! This file holds what they (and the distributed and architecture suites) share:
//! the HTTP helpers, the JSONL line builders and the polling of a batch.

mod bad_input;
mod cancel;
mod clients;
mod files_and_listing;
mod hostile_grammars;
mod kill9;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use reqwest::multipart::{Form, Part};
use serde_json::{Value, json};

use crate::harness::{Server, http};

pub(crate) const TERMINAL: [&str; 4] = ["completed", "failed", "expired", "cancelled"];

/// One HTTP answer: the status, the body as JSON (`Null` when it is not JSON),
/// the body's text and the `Retry-After` header.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub body: Value,
    pub text: String,
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
        text,
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

/// A tenant with a batch key and an inference key, and small batch limits: the
/// configuration of the bad-input and the files-and-listing tests.
const LIMITS_CONFIG: &str = r#"
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
/// [`LIMITS_CONFIG`]'s keys and limits.
const FILES_KEY: &str = "sk-e2e-files-0001";
const INFERENCE_KEY: &str = "sk-e2e-infer-0001";
const MAX_FILE_BYTES: usize = 4096;
const MAX_LINES: usize = 20;

/// How many files [`FILES_KEY`]'s tenant has.
async fn count_files(server: &Server) -> usize {
    let list = ok(
        &get(server, Some(FILES_KEY), "/v1/files").await,
        "list files",
    );
    assert_eq!(list["object"], "list", "{list}");
    list["data"].as_array().expect("files data").len()
}

/// How many batches [`FILES_KEY`]'s tenant has.
async fn count_batches(server: &Server) -> usize {
    let list = ok(
        &get(server, Some(FILES_KEY), "/v1/batches?limit=100").await,
        "list batches",
    );
    assert_eq!(list["object"], "list", "{list}");
    list["data"].as_array().expect("batches data").len()
}

/// Short prompts with short, stable greedy continuations.
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

/// Creates a batch over an uploaded file (`completion_window` 24h) and returns
/// its id; anything but a 200 fails the test.
pub(crate) async fn create_batch(
    server: &Server,
    key: Option<&str>,
    file_id: &Value,
    endpoint: &str,
) -> String {
    let body = json!({"input_file_id": file_id, "endpoint": endpoint, "completion_window": "24h"});
    let batch = ok(
        &post(server, key, "/v1/batches", &body).await,
        "create batch",
    );
    batch["id"]
        .as_str()
        .unwrap_or_else(|| panic!("a batch without an id: {batch}"))
        .to_owned()
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
