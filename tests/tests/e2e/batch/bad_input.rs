//! Every bad input to the Batch API, as one table: malformed, oversized and
//! hostile JSONL uploads, bad forms and keys, bad batch bodies, batches past the
//! backlog ceiling, unknown files and batches. Each case must be refused (4xx)
//! with nothing stored, and the responses (status, `Retry-After`, error body)
//! are snapshot-tested with `insta` (`snapshots/`), ids redacted, so a change to
//! any status, code, `param` or message shows up as a reviewed diff.
//!
//! Update the snapshot after an intended change with `INSTA_UPDATE=always` (or
//! `cargo insta review`) and review the diff.

use reqwest::multipart::Form;
use serde_json::{Value, json};

use super::{
    Answer, FILES_KEY, INFERENCE_KEY, LIMITS_CONFIG, MAX_FILE_BYTES, MAX_LINES, answer, chat_line,
    completion_line, count_batches, count_files, file_form, jsonl, ok, post, status_of, upload,
};
use crate::harness::{Server, ServerOptions, http};

/// One request of the table.
enum Request {
    /// `POST /v1/files` with this key and form.
    Upload(Option<&'static str>, Form),
    /// `POST /v1/batches` with this JSON body.
    Create(Value),
    /// `POST /v1/batches` with this raw body, sent as `application/json`.
    CreateRaw(&'static str),
    Get(&'static str),
    Delete(&'static str),
    Post(&'static str),
}

impl Request {
    /// Method and path, for the snapshot.
    fn line(&self) -> String {
        match self {
            Request::Upload(..) => "POST /v1/files".into(),
            Request::Create(_) | Request::CreateRaw(_) => "POST /v1/batches".into(),
            Request::Get(p) => format!("GET {p}"),
            Request::Delete(p) => format!("DELETE {p}"),
            Request::Post(p) => format!("POST {p}"),
        }
    }

    async fn send(self, server: &Server) -> Answer {
        let key = Some(FILES_KEY);
        match self {
            Request::Upload(key, form) => upload(server, key, form).await,
            Request::Create(body) => post(server, key, "/v1/batches", &body).await,
            Request::CreateRaw(body) => {
                let req = http()
                    .post(server.url("/v1/batches"))
                    .header("content-type", "application/json")
                    .body(body);
                answer(req, key).await
            }
            Request::Get(p) => answer(http().get(server.url(p)), key).await,
            Request::Delete(p) => answer(http().delete(server.url(p)), key).await,
            Request::Post(p) => answer(http().post(server.url(p)), key).await,
        }
    }
}

fn line_bytes(v: &Value) -> Vec<u8> {
    let mut b = v.to_string().into_bytes();
    b.push(b'\n');
    b
}

/// `s` with the given volatile strings replaced by their placeholders, and any
/// other generated `file-…` or `batch_…` id (alphanumeric with a digit, so
/// codes such as `batch_not_found` and made-up `…doesnotexist` ids stay) by `[id]`.
fn redact(s: &str, known: &[(String, &str)]) -> String {
    let mut s = s.to_owned();
    for (value, placeholder) in known {
        s = s.replace(value.as_str(), placeholder);
    }
    let mut out = String::new();
    let mut rest = s.as_str();
    while let Some((at, prefix)) = ["file-", "batch_"]
        .iter()
        .filter_map(|p| rest.find(p).map(|i| (i, p.len())))
        .min()
    {
        let tail = &rest[at + prefix..];
        let len = tail
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(tail.len());
        let id = &rest[at..at + prefix + len];
        out.push_str(&rest[..at]);
        if tail[..len].bytes().any(|b| b.is_ascii_digit()) {
            out.push_str("[id]");
        } else {
            out.push_str(id);
        }
        rest = &rest[at + prefix + len..];
    }
    out.push_str(rest);
    out
}

/// Every string in `v`, redacted.
fn redact_value(v: &Value, known: &[(String, &str)]) -> Value {
    match v {
        Value::String(s) => Value::String(redact(s, known)),
        Value::Array(a) => a.iter().map(|x| redact_value(x, known)).collect(),
        Value::Object(o) => o
            .iter()
            .map(|(k, x)| (k.clone(), redact_value(x, known)))
            .collect(),
        other => other.clone(),
    }
}

#[test]
fn redaction_keeps_made_up_ids_and_hides_real_ones() {
    let known = [("file-abc123".to_owned(), "[file:huge]")];
    assert_eq!(
        redact(
            "file-abc123, file-x9y8, batch_77aa and file-doesnotexist; file-; batch_not_found",
            &known
        ),
        "[file:huge], [id], [id] and file-doesnotexist; file-; batch_not_found"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_bad_input_is_refused_typed_and_stores_nothing() {
    let server = Server::start(
        "batch-bad-input",
        ServerOptions::default().config(LIMITS_CONFIG),
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

    // What the batch cases refer to: a good file, and against the backlog
    // ceiling of 2,000 tokens a file of 15 rows of 500 output tokens (about
    // 7,500) that can never fit, one of 2 rows of 800 that fits alone and is
    // left open, and one of 1 row of 800 that then does not fit.
    let upload_ok = |name: &'static str, lines: Vec<Value>| {
        let server = &server;
        async move {
            let a = upload(
                server,
                key,
                file_form(&format!("{name}.jsonl"), &jsonl(&lines), Some("batch")),
            )
            .await;
            ok(&a, name)["id"].as_str().expect("file id").to_owned()
        }
    };
    let essays = |name: &str, rows: usize, max_tokens: u32| -> Vec<Value> {
        (0..rows)
            .map(|i| chat_line(&format!("{name}{i}"), &model, "Write an essay.", max_tokens))
            .collect()
    };
    let good_file = upload_ok("good", vec![good("c1"), good("c2"), good("c3")]).await;
    let never_fits = upload_ok("huge", essays("huge", 15, 500)).await;
    let open_file = upload_ok("open", essays("open", 2, 800)).await;
    let one_more = upload_ok("more", essays("more", 1, 800)).await;
    let batch = |file: &str| {
        json!({"input_file_id": file, "endpoint": "/v1/chat/completions",
               "completion_window": "24h"})
    };
    let with_field = |k: &str, v: Value| {
        let mut b = batch(&good_file);
        b[k] = v;
        b
    };
    // Uploads whose line 3 (of 4) breaks the structure.
    let line3 = |line: Vec<u8>| {
        let mut data = jsonl(&[good("c1"), good("c2")]);
        data.extend_from_slice(&line);
        data.extend_from_slice(&jsonl(&[good("c4")]));
        Request::Upload(key, file_form("bad.jsonl", &data, Some("batch")))
    };
    let mut no_custom_id = good("c3");
    no_custom_id.as_object_mut().unwrap().remove("custom_id");
    let good_data = jsonl(&[good("c1"), good("c2")]);
    let big_body = chat_line("big", &model, &"word ".repeat(100), 4)["body"].clone();
    let oversized: Vec<Value> = (0..10)
        .map(|i| with(&format!("big-{i}"), "body", big_body.clone()))
        .collect();
    let oversized = jsonl(&oversized);
    assert!(oversized.len() > MAX_FILE_BYTES, "{}", oversized.len());
    let too_many: Vec<Value> = (0..=MAX_LINES).map(|i| good(&format!("n{i}"))).collect();
    let too_many = jsonl(&too_many);
    assert!(too_many.len() < MAX_FILE_BYTES, "{}", too_many.len());

    let one_good = jsonl(&[good("a")]);
    let cases: Vec<(&str, Request)> = vec![
        // The backlog first, while the batch that holds it is surely still open.
        (
            "a batch larger than the whole backlog ceiling",
            Request::Create(batch(&never_fits)),
        ),
        (
            "a batch that does not fit the backlog left",
            Request::Create(batch(&one_more)),
        ),
        // Keys: the batch scope is needed.
        (
            "upload with an inference key",
            Request::Upload(
                Some(INFERENCE_KEY),
                file_form("x.jsonl", &one_good, Some("batch")),
            ),
        ),
        (
            "upload without a key",
            Request::Upload(None, file_form("x.jsonl", &one_good, Some("batch"))),
        ),
        // Lines that break the structure: each refused naming line 3.
        (
            "a line that is not JSON",
            line3(b"{\"custom_id\": \"c3\", \"method\": \n".to_vec()),
        ),
        (
            "a line that is not an object",
            line3(line_bytes(&json!(["c3", good("c3")]))),
        ),
        ("a line without custom_id", line3(line_bytes(&no_custom_id))),
        (
            "a custom_id that is not a string",
            line3(line_bytes(&with("c3", "custom_id", json!(3)))),
        ),
        (
            "a custom_id of 65 characters",
            line3(line_bytes(&good(&"x".repeat(65)))),
        ),
        ("a duplicate custom_id", line3(line_bytes(&good("c1")))),
        (
            "method GET",
            line3(line_bytes(&with("c3", "method", json!("GET")))),
        ),
        (
            "url /v1/embeddings",
            line3(line_bytes(&with("c3", "url", json!("/v1/embeddings")))),
        ),
        (
            "a body that is not an object",
            line3(line_bytes(&with("c3", "body", json!("Say hi.")))),
        ),
        (
            "a url that differs from the other lines'",
            line3(line_bytes(&completion_line("c3", &model, "Hi", 4))),
        ),
        // Whole-file and form problems.
        (
            "a file of blank lines",
            Request::Upload(key, file_form("e.jsonl", b"\n", Some("batch"))),
        ),
        (
            "a 0-byte file",
            Request::Upload(key, file_form("e.jsonl", b"", Some("batch"))),
        ),
        (
            "purpose fine-tune",
            Request::Upload(key, file_form("g.jsonl", &good_data, Some("fine-tune"))),
        ),
        (
            "no purpose",
            Request::Upload(key, file_form("g.jsonl", &good_data, None)),
        ),
        (
            "no file part",
            Request::Upload(key, Form::new().text("purpose", "batch")),
        ),
        (
            "a file over max_file_bytes",
            Request::Upload(key, file_form("big.jsonl", &oversized, Some("batch"))),
        ),
        (
            "a file over max_lines",
            Request::Upload(key, file_form("many.jsonl", &too_many, Some("batch"))),
        ),
        // Unknown files.
        (
            "GET an unknown file",
            Request::Get("/v1/files/file-doesnotexist"),
        ),
        (
            "GET an unknown file's content",
            Request::Get("/v1/files/file-doesnotexist/content"),
        ),
        (
            "DELETE an unknown file",
            Request::Delete("/v1/files/file-doesnotexist"),
        ),
        // Batch bodies.
        (
            "a batch body that is not JSON",
            Request::CreateRaw("{\"input_file_id\": "),
        ),
        (
            "a batch body that is a JSON array",
            Request::CreateRaw("[]"),
        ),
        (
            "an unknown input file",
            Request::Create(with_field("input_file_id", json!("file-doesnotexist"))),
        ),
        (
            "no input_file_id",
            Request::Create(
                json!({"endpoint": "/v1/chat/completions", "completion_window": "24h"}),
            ),
        ),
        (
            "endpoint /v1/embeddings",
            Request::Create(with_field("endpoint", json!("/v1/embeddings"))),
        ),
        (
            "completion_window \"soon\"",
            Request::Create(with_field("completion_window", json!("soon"))),
        ),
        (
            "completion_window 169h (past the 168h this server accepts)",
            Request::Create(with_field("completion_window", json!("169h"))),
        ),
        (
            "a chat file for /v1/completions",
            Request::Create(with_field("endpoint", json!("/v1/completions"))),
        ),
        // Unknown batches.
        (
            "GET an unknown batch",
            Request::Get("/v1/batches/batch_doesnotexist"),
        ),
        (
            "cancel an unknown batch",
            Request::Post("/v1/batches/batch_doesnotexist/cancel"),
        ),
    ];

    let open = ok(
        &post(&server, key, "/v1/batches", &batch(&open_file)).await,
        "a batch that fits the empty backlog",
    );
    let open_id = open["id"].as_str().expect("batch id").to_owned();
    let known = [
        (good_file.clone(), "[file:good]"),
        (never_fits.clone(), "[file:huge]"),
        (open_file.clone(), "[file:open]"),
        (one_more.clone(), "[file:more]"),
        (open_id.clone(), "[batch:open]"),
        (model.clone(), "[model]"),
    ];
    let mut records = Vec::new();
    let mut departures = Vec::new();
    for (what, request) in cases {
        let (files, batches) = (count_files(&server).await, count_batches(&server).await);
        let line = request.line();
        let a = request.send(&server).await;
        if !(400..500).contains(&a.status) {
            departures.push(format!("{what}: not refused with a 4xx: {a:?}"));
        }
        let after = (count_files(&server).await, count_batches(&server).await);
        if after != (files, batches) {
            departures.push(format!(
                "{what}: stored something: (files, batches) {:?} -> {after:?}",
                (files, batches)
            ));
        }
        // The seconds to wait vary with the backlog; that there are some does not.
        let retry_after = a.retry_after.as_deref().map(|r| match r.parse::<u64>() {
            Ok(s) if s >= 1 => "[positive seconds]".to_owned(),
            _ => r.to_owned(),
        });
        let body = if a.body.is_null() {
            Value::String(a.text.clone())
        } else {
            a.body.clone()
        };
        records.push(json!({
            "case": what,
            "request": line,
            "status": a.status,
            "retry_after": retry_after,
            "body": redact_value(&body, &known),
        }));
    }

    let cancel = http().post(server.url(&format!("/v1/batches/{open_id}/cancel")));
    let cancelled = ok(
        &answer(cancel, key).await,
        "cancel the batch that held the backlog",
    );
    assert!(
        ["cancelling", "cancelled"].contains(&status_of(&cancelled)),
        "status after cancel: {cancelled}"
    );

    assert!(
        departures.is_empty(),
        "{} departure(s) from the contract:\n- {}\n{}",
        departures.len(),
        departures.join("\n- "),
        server.stderr_tail(3000)
    );
    insta::assert_json_snapshot!("responses", records);
}
