//! Graceful shutdown: SIGTERM turns readiness off and refuses new work, while the
//! request in flight runs to its end; then the process exits 0.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Server, ServerOptions, Sse, chunk_text, http};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_gracefully() {
    let mut server = Server::start(
        "drain",
        ServerOptions::default().config("shutdown_timeout_secs = 120\n"),
    )
    .await;
    let model = server.model_id(None).await;
    let client = http();

    // A long stream, read until its first content arrives so it is surely in flight.
    let resp = client
        .post(server.url("/v1/chat/completions"))
        .json(&json!({
            "model": model,
            "messages": [{"role": "user", "content":
                "Write a long, detailed story about a lighthouse keeper during a storm."}],
            "max_tokens": 200,
            "temperature": 0,
            "stream": true,
            "stream_options": {"include_usage": true},
        }))
        .send()
        .await
        .expect("start the long stream");
    assert_eq!(resp.status().as_u16(), 200, "long stream");
    let mut sse = Sse::new(resp);
    let mut text = String::new();
    while text.is_empty() {
        let data = sse.next().await.expect("stream ended before any content");
        assert_ne!(data, "[DONE]", "stream finished before any content");
        let chunk: Value = serde_json::from_str(&data).expect("chunk JSON");
        text.push_str(&chunk_text(&chunk));
    }

    server.sigterm();
    let signalled = Instant::now();

    // While draining the server must keep answering new connections promptly; a
    // short timeout tells "not answered" apart from a slow stream.
    let probe = Duration::from_secs(5);

    // Readiness turns 503 (the signal is handled asynchronously: allow a moment).
    let ready = loop {
        let status = client
            .get(server.url("/health/ready"))
            .timeout(probe)
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "GET /health/ready {:?} after SIGTERM: {e:?}",
                    signalled.elapsed()
                )
            })
            .status()
            .as_u16();
        if status != 200 || signalled.elapsed() > Duration::from_secs(5) {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(ready, 503, "/health/ready after SIGTERM");
    println!("/health/ready 503 {:?} after SIGTERM", signalled.elapsed());
    let live = client
        .get(server.url("/health/live"))
        .timeout(probe)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "GET /health/live {:?} after SIGTERM (stream done: {}): {e:?}",
                signalled.elapsed(),
                sse.done
            )
        })
        .status()
        .as_u16();
    assert_eq!(live, 200, "/health/live while draining");

    // New work is refused with an OpenAI-shaped 503 not_ready.
    let resp = client
        .post(server.url("/v1/chat/completions"))
        .json(&json!({
            "model": model,
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 4,
        }))
        .timeout(probe)
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "POST /v1/chat/completions {:?} after SIGTERM: {e:?}",
                signalled.elapsed()
            )
        });
    assert_eq!(resp.status().as_u16(), 503, "new chat while draining");
    let err: Value = resp.json().await.expect("error JSON");
    assert_eq!(err["error"]["code"], "not_ready", "body: {err}");
    assert!(
        sse.done || server.try_exit().is_none(),
        "server exited before the stream finished"
    );

    // The stream in flight runs to its end.
    let mut usage = Value::Null;
    while let Some(data) = sse.next().await {
        if data == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(&data).expect("chunk JSON");
        text.push_str(&chunk_text(&chunk));
        if !chunk["usage"].is_null() {
            usage = chunk["usage"].clone();
        }
    }
    assert!(sse.done, "the in-flight stream ended without [DONE]");
    println!("drained stream: {usage}, {} chars", text.len());
    assert!(
        usage["completion_tokens"].as_u64().unwrap_or(0) > 0,
        "no usage on the drained stream: {usage}"
    );

    let status = server
        .wait_exit_async(Duration::from_secs(120))
        .await
        .unwrap_or_else(|| panic!("server still running 120 s after SIGTERM"));
    assert!(
        status.success(),
        "exit status after SIGTERM: {status}\n{}",
        server.stderr_tail(4000)
    );
}
