//! Privacy of the logs: at `RUST_LOG=debug` the server's stderr holds neither a
//! prompt, nor generated text, nor an API key.

use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Server, ServerOptions, Sse, chunk_text, http, repo_root, unique_token};

/// Generated text is checked in windows of this many characters: no such piece of
/// any output may appear in the logs.
const WINDOW: usize = 13;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_never_contain_prompt_or_output() {
    let key = unique_token("sk-e2e-secret-");
    let marker = unique_token("zqxmarker");
    let server = Server::start(
        "logs",
        ServerOptions::default()
            .config(&format!(
                "[[api_keys]]\nkey = \"{key}\"\ntenant = \"acme\"\nscopes = [\"inference\"]\n"
            ))
            .env("RUST_LOG", "debug"),
    )
    .await;
    let model = server.model_id(Some(&key)).await;
    let client = http();
    let post = |path: &str, body: Value| {
        client
            .post(server.url(path))
            .bearer_auth(&key)
            .json(&body)
            .send()
    };
    let mut outputs: Vec<String> = Vec::new();

    let chat_messages = json!([
        {"role": "system", "content": format!("You are a helpful assistant. Secret tag {marker}.")},
        {"role": "user", "content": format!("Write two sentences about the ocean. ({marker})")},
    ]);

    // Chat, non-streaming.
    let resp = post(
        "/v1/chat/completions",
        json!({"model": model, "messages": chat_messages, "max_tokens": 32, "temperature": 0}),
    )
    .await
    .expect("chat");
    assert_eq!(resp.status().as_u16(), 200, "chat");
    let body: Value = resp.json().await.expect("chat JSON");
    outputs.push(
        body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("no content: {body}"))
            .to_string(),
    );

    // Chat, streaming (a different prompt, so a different output).
    let resp = post(
        "/v1/chat/completions",
        json!({
            "model": model,
            "messages": [{"role": "user", "content": format!("Describe a forest at night. {marker}")}],
            "max_tokens": 32,
            "temperature": 0,
            "stream": true,
            "stream_options": {"include_usage": true},
        }),
    )
    .await
    .expect("chat stream");
    assert_eq!(resp.status().as_u16(), 200, "chat stream");
    outputs.push(collect_stream(resp).await);

    // Completions, non-streaming and streaming.
    let prompt = format!("Marker {marker}. A short poem about mountains:\n");
    let resp = post(
        "/v1/completions",
        json!({"model": model, "prompt": prompt, "max_tokens": 32, "temperature": 0}),
    )
    .await
    .expect("completion");
    assert_eq!(resp.status().as_u16(), 200, "completion");
    let body: Value = resp.json().await.expect("completion JSON");
    outputs.push(
        body["choices"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text: {body}"))
            .to_string(),
    );
    let resp = post(
        "/v1/completions",
        json!({
            "model": model,
            "prompt": format!("Marker {marker}. The history of bread begins"),
            "max_tokens": 32,
            "temperature": 0,
            "stream": true,
        }),
    )
    .await
    .expect("completion stream");
    assert_eq!(resp.status().as_u16(), 200, "completion stream");
    outputs.push(collect_stream(resp).await);

    // Requests that fail must not log their content either: a context overflow and a
    // body that does not deserialize (serde errors tend to quote the offending value).
    let huge = format!("{marker} {}", "hello ".repeat(9000));
    let resp = post(
        "/v1/chat/completions",
        json!({"model": model, "messages": [{"role": "user", "content": huge}], "max_tokens": 8}),
    )
    .await
    .expect("overflow");
    assert_eq!(resp.status().as_u16(), 400, "context overflow");
    let resp = post(
        "/v1/chat/completions",
        json!({
            "model": model,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": format!("{marker} not a number"),
        }),
    )
    .await
    .expect("malformed");
    assert!(
        resp.status().is_client_error(),
        "malformed body: status {}",
        resp.status()
    );

    // Stop the server so every log line is flushed, then read them all.
    let mut server = server;
    server.sigterm();
    let status = server.wait_exit_async(Duration::from_secs(60)).await;
    assert!(status.is_some(), "server did not exit after SIGTERM");
    let logs = strip_ansi(&server.stderr());

    println!("outputs: {outputs:#?}");
    println!("{} bytes of logs", logs.len());
    assert!(
        !logs.trim().is_empty(),
        "the server logged nothing at all, so this test would prove nothing"
    );
    if !logs.contains("DEBUG") {
        println!("note: no DEBUG lines in the logs although RUST_LOG=debug");
    }
    assert!(
        outputs.iter().any(|o| o.chars().count() > WINDOW),
        "outputs too short to check: {outputs:?}"
    );
    if let Some(line) = logs.lines().find(|l| l.contains(&marker)) {
        panic!("the logs contain the prompt marker {marker}:\n{line}");
    }
    if let Some(line) = logs.lines().find(|l| l.contains(&key)) {
        panic!("the logs contain the API key:\n{line}");
    }
    let shipped = shipped_sql();
    for output in &outputs {
        if let Some(piece) = leaked_piece(output, &logs, &shipped) {
            let line = logs.lines().find(|l| l.contains(&piece)).unwrap_or("");
            panic!("the logs contain generated text {piece:?} (from output {output:?}):\n{line}");
        }
    }
}

/// The text without ANSI colour sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Reads an SSE body to `[DONE]` and returns the concatenated text.
async fn collect_stream(resp: reqwest::Response) -> String {
    let mut sse = Sse::new(resp);
    let mut text = String::new();
    while let Some(data) = sse.next().await {
        if data == "[DONE]" {
            break;
        }
        let chunk: Value =
            serde_json::from_str(&data).unwrap_or_else(|e| panic!("bad chunk {data:?}: {e}"));
        text.push_str(&chunk_text(&chunk));
    }
    assert!(sse.done, "stream ended without [DONE]");
    text
}

/// The text of every migration the server ships. sqlx logs each statement it runs
/// at debug, comments included, so a piece of ordinary English that happens to be
/// in a migration's comment ("figures, and the split") is in the logs whatever the
/// model wrote, and proves nothing about a leak.
fn shipped_sql() -> String {
    let mut text = String::new();
    for flavour in ["sqlite", "postgres"] {
        let dir = repo_root().join("migrations").join(flavour);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("migration entry").path();
            text.push_str(
                &std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display())),
            );
        }
    }
    assert!(!text.is_empty(), "no migrations found under migrations/");
    text
}

/// The first `WINDOW`-character piece of `output` (with at least one letter in it)
/// that occurs in `logs` and is not text the server ships (`shipped`).
fn leaked_piece(output: &str, logs: &str, shipped: &str) -> Option<String> {
    let chars: Vec<char> = output.chars().collect();
    if chars.len() < WINDOW {
        return None;
    }
    (0..=chars.len() - WINDOW)
        .map(|i| chars[i..i + WINDOW].iter().collect::<String>())
        .filter(|piece| piece.chars().any(char::is_alphabetic))
        .find(|piece| logs.contains(piece.as_str()) && !shipped.contains(piece.as_str()))
}
