//! The official OpenAI Python SDK against the server (scripts in tests/python/).

use serde_json::{Value, json};

use crate::harness::{Server, ServerOptions, hermes_tool_template, http, metric_sum};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_chat_completions_models() {
    let server = Server::start("sdk-basic", ServerOptions::default()).await;
    let out = server.run_python("sdk_basic.py", &[]).await;
    print!("{out}");
    assert!(
        out.contains("OK sdk_basic"),
        "script did not finish:\n{out}"
    );
}

/// Tool calling with SmolLM2 served under llama.cpp's Hermes 2 Pro
/// tool-use template (`chat_template`, as `--chat-template` sets it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_tool_calls() {
    let path = hermes_tool_template().to_string_lossy().into_owned();
    let server = Server::start(
        "sdk-tools",
        ServerOptions::default().config(&format!("chat_template = {path:?}")),
    )
    .await;
    let out = server
        .run_python("sdk_tools.py", &[("STOKER_TEMPLATE_PATH", &path)])
        .await;
    print!("{out}");
    assert!(
        out.contains("OK sdk_tools"),
        "script did not finish:\n{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_bad_key() {
    const GOOD: &str = "sk-e2e-good-key";
    const BAD: &str = "sk-e2e-wrong-key";
    let server = Server::start(
        "sdk-bad-key",
        ServerOptions::default().config(&format!(
            "[[api_keys]]\nkey = \"{GOOD}\"\ntenant = \"acme\"\nscopes = [\"inference\"]\n"
        )),
    )
    .await;

    // Without any Authorization header: 401 invalid_api_key, OpenAI-shaped.
    let model = server.model_id(Some(GOOD)).await;
    let body = json!({
        "model": model,
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 4,
    });
    let resp = http()
        .post(server.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .expect("POST without a key");
    assert_eq!(resp.status().as_u16(), 401, "no Authorization header");
    let err: Value = resp.json().await.expect("error JSON");
    assert_eq!(err["error"]["code"], "invalid_api_key", "body: {err}");
    for field in ["message", "type"] {
        assert!(
            err["error"][field].is_string(),
            "error.{field} missing: {err}"
        );
    }

    let out = server
        .run_python(
            "sdk_bad_key.py",
            &[("STOKER_GOOD_KEY", GOOD), ("STOKER_BAD_KEY", BAD)],
        )
        .await;
    print!("{out}");
    assert!(
        out.contains("OK sdk_bad_key"),
        "script did not finish:\n{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_retries_overload() {
    // The queue bound decides here, not the time-to-first-token objective:
    // whether a request queued behind a 256-token stream would start within
    // 5 s depends on this machine's speed.
    let server = Server::start(
        "sdk-overload",
        ServerOptions::default().config(
            "[engine]\nmax_num_seqs = 1\n\n[admission]\nmax_waiting_requests = 1\nmax_ttft_ms = 0\n",
        ),
    )
    .await;
    let before = metric_sum(
        &server.metrics().await,
        "stoker_requests_rejected_total",
        &["code=\"server_overloaded\""],
    );
    assert_eq!(before, 0.0, "rejections before any load");

    let out = server.run_python("sdk_overload.py", &[]).await;
    print!("{out}");
    assert!(
        out.contains("OK sdk_overload"),
        "script did not finish:\n{out}"
    );
    let retried: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("retried_503="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no retried_503= line in the script's output:\n{out}"));

    let metrics = server.metrics().await;
    let rejected = metric_sum(
        &metrics,
        "stoker_requests_rejected_total",
        &["code=\"server_overloaded\""],
    );
    println!("stoker_requests_rejected_total{{code=\"server_overloaded\"}} = {rejected}");
    // One deterministic rejection for the max_retries=0 client, plus one for every
    // 503 the retrying client saw (and retried).
    assert!(
        rejected > 0.0,
        "no server_overloaded rejection counted in /metrics:\n{metrics}"
    );
    assert!(
        rejected >= 1.0 + retried,
        "metrics count {rejected} server_overloaded rejections, the SDK saw {retried} + 1:\n{metrics}"
    );
    for gauge in ["stoker_num_requests_running", "stoker_kv_cache_usage_perc"] {
        assert!(
            metrics.lines().any(|l| l.starts_with(gauge)),
            "{gauge} missing from /metrics:\n{metrics}"
        );
    }
    assert_eq!(
        metric_sum(&metrics, "stoker_num_requests_running", &[]),
        0.0,
        "requests still running after all finished"
    );
}
