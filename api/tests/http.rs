//! The HTTP front, in process, against the real model: validation error bodies
//! (snapshotted), SSE framing, disconnect freeing KV, the `/metrics` output
//! through a Prometheus text parser, auth, overload and deadline refusals,
//! readiness during warm-up and drain, and OpenAPI drift (including that it
//! lists exactly the error catalogue's codes).
//!
//! One runtime and one shared server serve most tests; tests that need other
//! settings or end a server's life start their own.

// Configs are built by adjusting a default, which reads best here.
#![allow(clippy::field_reassign_with_default)]

#[path = "admin.rs"]
mod admin;
#[path = "http/fuzz.rs"]
mod fuzz;
#[path = "http/mass_cancel.rs"]
mod mass_cancel;
#[path = "http/objective.rs"]
mod objective;
#[path = "http/security.rs"]
mod security;
#[path = "http/slow_clients.rs"]
mod slow_clients;
#[path = "http/tokenize.rs"]
mod tokenize;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stoker_api::Config;
use stoker_api::auth::{ApiKeyConfig, Scope};
use stoker_api::roles::{self, Server};
use stoker_api::state::Phase;
use stoker_schemas::codes::ErrorCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::runtime::Runtime;

const MODEL_ID: &str = "SmolLM2-135M-Instruct.Q4_1";

fn rt() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn config() -> Config {
    let mut c = Config::default();
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.model = stoker_test_support::model_path();
    // Each server its own store: they run side by side in this process.
    c.data_dir = std::env::temp_dir().join(format!(
        "stoker-http-test-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    c.engine.kv_cache_mib = 128;
    c.engine.threads = 2;
    c
}

async fn start(c: Config) -> Server {
    let s = roles::start(c).await.unwrap();
    s.wait_ready(Duration::from_secs(120)).await.unwrap();
    s
}

fn shared() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let mut c = config();
        c.limits.max_body_bytes = 64 * 1024;
        rt().block_on(start(c))
    })
}

fn url(s: &Server, path: &str) -> String {
    format!("http://{}{}", s.addr, path)
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

fn chat(content: &str, max_tokens: u32) -> Value {
    json!({"model": MODEL_ID, "messages": [{"role": "user", "content": content}],
           "max_tokens": max_tokens, "temperature": 0})
}

async fn post(s: &Server, path: &str, body: Value) -> reqwest::Response {
    client()
        .post(url(s, path))
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[test]
fn validation_errors_have_typed_bodies() {
    let s = shared();
    let m = MODEL_ID;
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases: Vec<(&str, &str, Value)> = vec![
        (
            "unknown model",
            "/v1/chat/completions",
            json!({"model": "gpt-9", "messages": user}),
        ),
        (
            "missing model",
            "/v1/chat/completions",
            json!({"messages": user}),
        ),
        (
            "missing messages",
            "/v1/chat/completions",
            json!({"model": m}),
        ),
        (
            "messages not a list",
            "/v1/chat/completions",
            json!({"model": m, "messages": "hi"}),
        ),
        (
            "empty messages",
            "/v1/chat/completions",
            json!({"model": m, "messages": []}),
        ),
        (
            "unknown role",
            "/v1/chat/completions",
            json!({"model": m, "messages": [{"role": "wizard", "content": "x"}]}),
        ),
        (
            "legacy function role",
            "/v1/chat/completions",
            json!({"model": m, "messages": [{"role": "function", "content": "x"}]}),
        ),
        (
            "tool_calls on a user message",
            "/v1/chat/completions",
            json!({"model": m, "messages": [{"role": "user", "content": "x", "tool_calls": []}]}),
        ),
        (
            "tool call arguments that are not JSON",
            "/v1/chat/completions",
            json!({"model": m, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]}),
        ),
        (
            "tool call without an id",
            "/v1/chat/completions",
            json!({"model": m, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}]}),
        ),
        (
            "image part",
            "/v1/chat/completions",
            json!({"model": m, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
        ),
        (
            "text part without text",
            "/v1/chat/completions",
            json!({"model": m, "messages": [{"role": "user", "content": [{"type": "text"}]}]}),
        ),
        (
            "null content",
            "/v1/chat/completions",
            json!({"model": m, "messages": [{"role": "user", "content": null}]}),
        ),
        (
            "n = 0",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "n": 0}),
        ),
        (
            "n = 17",
            "/v1/completions",
            json!({"model": m, "prompt": "x", "n": 17}),
        ),
        (
            "tool_choice auto under a template without tools",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tools": [{"type": "function", "function": {"name": "f"}}]}),
        ),
        (
            "tools not a list",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tools": {"name": "f"}}),
        ),
        (
            "129 tools",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": "required", "tools": (0..129).map(|i| json!({"type": "function", "function": {"name": format!("f{i}")}})).collect::<Vec<_>>()}),
        ),
        (
            "tool names that collide",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]}),
        ),
        (
            "a tool name with a space",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "get weather"}}]}),
        ),
        (
            "a tool of another type",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tools": [{"type": "code_interpreter"}]}),
        ),
        (
            "tool parameters not an object",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f", "parameters": [1]}}]}),
        ),
        (
            "tool parameters past the body limit",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "description": "x".repeat(70_000)}}}]}),
        ),
        (
            "tool parameters with a dangling reference",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"$ref": "#/$defs/gone"}}}]}),
        ),
        (
            "tool_choice naming no tool",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": {"type": "function", "function": {"name": "g"}}, "tools": [{"type": "function", "function": {"name": "f"}}]}),
        ),
        (
            "tool_choice required without tools",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": "required"}),
        ),
        (
            "tool_choice an unknown word",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": "always"}),
        ),
        (
            "tool_choice required beside a response_format",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": "required", "response_format": {"type": "json_object"}, "tools": [{"type": "function", "function": {"name": "f"}}]}),
        ),
        (
            "response format a string",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "response_format": "json"}),
        ),
        (
            "response format of an unknown type",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "response_format": {"type": "grammar"}}),
        ),
        (
            "json_schema without a schema",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
        ),
        (
            "json_schema schema a number",
            "/v1/completions",
            json!({"model": m, "prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": 5}}}),
        ),
        (
            "json_schema strict a string",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "response_format": {"type": "json_schema", "json_schema": {"strict": "yes", "schema": {}}}}),
        ),
        (
            "json_schema with a dangling reference",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/missing"}}}}),
        ),
        (
            "json_schema with an empty range",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "integer", "minimum": 5, "maximum": 1}}}}),
        ),
        (
            "json_schema whose $ref only refers to itself",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/loop", "$defs": {"loop": {"$ref": "#/$defs/loop"}}}}}}),
        ),
        (
            "json_schema whose $ref only refers to itself, on completions",
            "/v1/completions",
            json!({"model": m, "prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/loop", "$defs": {"loop": {"$ref": "#/$defs/loop"}}}}}}),
        ),
        (
            "json_schema whose $ref only refers to itself, streamed",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "stream": true, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/loop", "$defs": {"loop": {"$ref": "#/$defs/loop"}}}}}}),
        ),
        (
            "json_schema nothing satisfies",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}}),
        ),
        (
            "required tool whose parameters nothing satisfies",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"not": {}}}}]}),
        ),
        (
            "named tool whose parameters only refer to themselves",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "tool_choice": {"type": "function", "function": {"name": "f"}}, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"$ref": "#/$defs/loop", "$defs": {"loop": {"$ref": "#/$defs/loop"}}}}}]}),
        ),
        (
            "top_logprobs 21",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "logprobs": true, "top_logprobs": 21}),
        ),
        (
            "top_logprobs without logprobs",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "top_logprobs": 2}),
        ),
        (
            "completion logprobs -1",
            "/v1/completions",
            json!({"model": m, "prompt": "x", "logprobs": -1}),
        ),
        (
            "presence penalty 3",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "presence_penalty": 3}),
        ),
        (
            "repetition penalty 0",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "repetition_penalty": 0}),
        ),
        (
            "logit bias 101",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "logit_bias": {"42": 101}}),
        ),
        (
            "logit bias key not an id",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "logit_bias": {"hello": 1}}),
        ),
        (
            "logit bias outside the vocabulary",
            "/v1/completions",
            json!({"model": m, "prompt": "x", "logit_bias": {"4000000": 1}}),
        ),
        (
            "logit bias a list",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "logit_bias": [1, 2]}),
        ),
        (
            "logit bias same id twice",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "logit_bias": {"7": 1, "07": 2}}),
        ),
        (
            "min_tokens above max_tokens",
            "/v1/completions",
            json!({"model": m, "prompt": "x", "max_tokens": 2, "min_tokens": 3}),
        ),
        (
            "temperature 3",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "temperature": 3}),
        ),
        (
            "temperature string",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "temperature": "hot"}),
        ),
        (
            "top_p 0",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "top_p": 0}),
        ),
        (
            "top_k -5",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "top_k": -5}),
        ),
        (
            "max_tokens 0",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "max_tokens": 0}),
        ),
        (
            "max_completion_tokens -1",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "max_completion_tokens": -1}),
        ),
        (
            "context overflow",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "max_tokens": 100000}),
        ),
        (
            "five stops",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "stop": ["a", "b", "c", "d", "e"]}),
        ),
        (
            "empty stop",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "stop": [""]}),
        ),
        (
            "stream_options without stream",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "stream_options": {"include_usage": true}}),
        ),
        (
            "user too long",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "user": "u".repeat(300)}),
        ),
        (
            "huge max_tokens number",
            "/v1/chat/completions",
            json!({"model": m, "messages": user, "max_tokens": 1e300}),
        ),
        (
            "completion: two prompts",
            "/v1/completions",
            json!({"model": m, "prompt": ["a", "b"]}),
        ),
        (
            "completion: empty prompt",
            "/v1/completions",
            json!({"model": m, "prompt": ""}),
        ),
        (
            "completion: token out of range",
            "/v1/completions",
            json!({"model": m, "prompt": [1, 2, 99999999]}),
        ),
        (
            "completion: negative token",
            "/v1/completions",
            json!({"model": m, "prompt": [-1]}),
        ),
        (
            "completion: max_tokens 0 without echo",
            "/v1/completions",
            json!({"model": m, "prompt": "a", "max_tokens": 0}),
        ),
        (
            "completion: echo scoring 21 alternatives",
            "/v1/completions",
            json!({"model": m, "prompt": "a b", "echo": true, "max_tokens": 0, "logprobs": 21}),
        ),
        (
            "completion: echo not a boolean",
            "/v1/completions",
            json!({"model": m, "prompt": "a", "echo": "yes"}),
        ),
        (
            "completion: echo with negative max_tokens",
            "/v1/completions",
            json!({"model": m, "prompt": "a", "echo": true, "max_tokens": -1}),
        ),
        (
            "completion: best_of",
            "/v1/completions",
            json!({"model": m, "prompt": "a", "best_of": 3}),
        ),
        (
            "completion: suffix",
            "/v1/completions",
            json!({"model": m, "prompt": "a", "suffix": "z"}),
        ),
        (
            "completion: prompt object",
            "/v1/completions",
            json!({"model": m, "prompt": {"text": "a"}}),
        ),
    ];
    let out = rt().block_on(async {
        let mut out = Vec::new();
        for (name, path, body) in cases {
            let r = post(s, path, body).await;
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap();
            out.push(json!({"case": name, "status": status, "body": body}));
        }
        // Raw bodies that are not JSON objects at all.
        for (name, raw) in [
            ("not json", "{\"model\": "),
            ("empty body", ""),
            ("json array", "[1, 2]"),
            ("nan literal", "{\"model\": NaN}"),
            ("deep nesting", &format!("{}{}", "[".repeat(10_000), "]".repeat(10_000))),
        ] {
            let r = client()
                .post(url(s, "/v1/chat/completions"))
                .header("content-type", "application/json")
                .body(raw.to_string())
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap();
            out.push(json!({"case": name, "status": status, "body": body}));
        }
        let r = client()
            .post(url(s, "/v1/chat/completions"))
            .body(vec![b' '; 65 * 1024])
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        out.push(json!({"case": "oversized body", "status": status, "body": r.json::<Value>().await.unwrap()}));
        let r = client()
            .post(url(s, "/v1/chat/completions"))
            .header("x-stoker-deadline-ms", "soon")
            .json(&chat("hi", 2))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        out.push(json!({"case": "bad deadline header", "status": status, "body": r.json::<Value>().await.unwrap()}));
        for (name, method, path) in [("unknown route", "GET", "/v2/everything"), ("wrong method", "DELETE", "/v1/models")] {
            let r = client()
                .request(method.parse().unwrap(), url(s, path))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            out.push(json!({"case": name, "status": status, "body": r.json::<Value>().await.unwrap()}));
        }
        out
    });
    for o in &out {
        let status = o["status"].as_u64().unwrap();
        assert!((400..500).contains(&status), "{o}");
        let e = &o["body"]["error"];
        assert!(
            e["message"].is_string() && e["code"].is_string() && e["type"].is_string(),
            "{o}"
        );
    }
    insta::assert_json_snapshot!("validation_errors", out);
}

#[test]
fn unknown_fields_are_ignored_and_text_parts_join() {
    let s = shared();
    rt().block_on(async {
        let body = json!({"model": MODEL_ID, "max_tokens": 3, "temperature": 0,
            "messages": [{"role": "developer", "content": "Be brief."},
                         {"role": "user", "content": [{"type": "text", "text": "Say "}, {"type": "text", "text": "hi"}]}],
            "some_future_field": {"x": 1}, "parallel_tool_calls": false, "tool_choice": "none",
            "response_format": {"type": "text"}, "presence_penalty": 0, "logit_bias": {}});
        let r = post(s, "/v1/chat/completions", body).await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 3);
    });
}

#[test]
fn service_tier_picks_the_lane_and_ignore_eos_fills_max_tokens() {
    let s = shared();
    rt().block_on(async {
        let batch_lane = |m: &str| {
            m.lines()
                .filter(|l| {
                    l.starts_with("stoker_request_success_total{") && l.contains("lane=\"batch\"")
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>()
        };
        let metrics = || async {
            client()
                .get(url(s, "/metrics"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        };
        let before = batch_lane(&metrics().await);
        let body = json!({"model": MODEL_ID, "prompt": "The end.", "max_tokens": 24,
            "temperature": 0, "ignore_eos": true, "service_tier": "flex"});
        let r = post(s, "/v1/completions", body).await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 24, "{v}");
        assert_eq!(
            batch_lane(&metrics().await),
            before + 1.0,
            "flex ran in the batch lane"
        );
        for tier in [json!("turbo"), json!(""), json!(7), json!("x".repeat(5000))] {
            let body = json!({"model": MODEL_ID, "max_tokens": 1,
                "messages": [{"role": "user", "content": "hi"}], "service_tier": tier});
            let r = post(s, "/v1/chat/completions", body).await;
            assert_eq!(r.status(), 400, "{tier}");
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"]["code"], "invalid_value", "{tier}: {v}");
            assert!(v["error"]["message"].as_str().unwrap().len() < 300, "{v}");
        }
        let r = post(
            s,
            "/v1/completions",
            json!({"model": MODEL_ID, "prompt": "x", "ignore_eos": "yes"}),
        )
        .await;
        assert_eq!(r.status(), 400);
    });
}

/// Splits an SSE body into frames, checking the framing as it goes.
fn frames(raw: &str) -> Vec<(Option<String>, String)> {
    assert!(raw.ends_with("\n\n"), "stream must end with a blank line");
    raw.trim_end_matches("\n\n")
        .split("\n\n")
        .map(|f| {
            let mut event = None;
            let mut data = None;
            for line in f.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    assert!(data.is_none(), "one data line per frame: {f:?}");
                    data = Some(d.to_string());
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            (event, data.expect("data line"))
        })
        .collect()
}

#[test]
fn sse_framing_matches_openai_and_the_non_streamed_answer() {
    let s = shared();
    rt().block_on(async {
        let mut body = chat("Name three colors.", 12);
        let whole: Value = post(s, "/v1/chat/completions", body.clone())
            .await
            .json()
            .await
            .unwrap();
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let r = post(s, "/v1/chat/completions", body).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        assert!(r.headers().contains_key("x-stoker-revision"));
        assert!(r.headers().contains_key("x-stoker-queue-ms"));
        let raw = r.text().await.unwrap();
        let f = frames(&raw);
        assert_eq!(f.last().unwrap().1, "[DONE]");
        let chunks: Vec<Value> = f[..f.len() - 1]
            .iter()
            .map(|(e, d)| {
                assert!(e.is_none());
                serde_json::from_str(d).unwrap()
            })
            .collect();
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let ids: std::collections::HashSet<_> = chunks.iter().map(|c| c["id"].clone()).collect();
        assert_eq!(ids.len(), 1, "one id per stream");
        for c in &chunks {
            assert_eq!(c["object"], "chat.completion.chunk");
            assert_eq!(c["system_fingerprint"], whole["system_fingerprint"]);
        }
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
        assert_eq!(usage["usage"], whole["usage"].clone().tap_cached(usage));
        let fin = &chunks[chunks.len() - 2];
        assert_eq!(
            fin["choices"][0]["finish_reason"],
            whole["choices"][0]["finish_reason"]
        );
        let text: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(
            text,
            whole["choices"][0]["message"]["content"].as_str().unwrap()
        );

        // Completions stream the same framing with `text` choices.
        let r = post(
            s,
            "/v1/completions",
            json!({"model": MODEL_ID, "prompt": "The sky is",
            "max_tokens": 5, "temperature": 0, "stream": true}),
        )
        .await;
        let f = frames(&r.text().await.unwrap());
        assert_eq!(f.last().unwrap().1, "[DONE]");
        let last: Value = serde_json::from_str(&f[f.len() - 2].1).unwrap();
        assert_eq!(last["object"], "text_completion");
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        assert!(
            last.get("usage").is_none(),
            "no usage field without include_usage"
        );
    });
}

#[test]
fn logprobs_stream_per_chunk_as_the_whole_answer_has_them() {
    let s = shared();
    rt().block_on(async {
        let mut body = chat("Name three colors.", 10);
        body["logprobs"] = json!(true);
        body["top_logprobs"] = json!(3);
        let whole: Value = post(s, "/v1/chat/completions", body.clone())
            .await
            .json()
            .await
            .unwrap();
        let content = whole["choices"][0]["logprobs"]["content"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(
            content.len() as u64,
            whole["usage"]["completion_tokens"].as_u64().unwrap()
        );
        let mut bytes = Vec::new();
        for t in &content {
            let lp = t["logprob"].as_f64().unwrap();
            assert!(lp <= 0.0, "{t}");
            let top = t["top_logprobs"].as_array().unwrap();
            assert_eq!(top.len(), 3, "{t}");
            // Greedy: the sampled token is the likeliest.
            assert_eq!(top[0]["logprob"].as_f64().unwrap(), lp, "{t}");
            assert_eq!(top[0]["token"], t["token"]);
            bytes.extend(
                t["bytes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_u64().unwrap() as u8),
            );
        }
        let text = whole["choices"][0]["message"]["content"].as_str().unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            text,
            "the tokens spell the answer"
        );
        // Not asked: null.
        let plain: Value = post(s, "/v1/chat/completions", chat("Name three colors.", 3))
            .await
            .json()
            .await
            .unwrap();
        assert!(plain["choices"][0]["logprobs"].is_null());

        body["stream"] = json!(true);
        let raw = post(s, "/v1/chat/completions", body)
            .await
            .text()
            .await
            .unwrap();
        let f = frames(&raw);
        let streamed: Vec<Value> = f[..f.len() - 1]
            .iter()
            .map(|(_, d)| serde_json::from_str::<Value>(d).unwrap())
            .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array().cloned())
            .flatten()
            .collect();
        assert_eq!(streamed, content);

        // Completions: the legacy shape, text offsets continuing over chunks.
        let req = json!({"model": MODEL_ID, "prompt": "The sky is", "max_tokens": 6,
            "temperature": 0, "logprobs": 2, "ignore_eos": true});
        let whole: Value = post(s, "/v1/completions", req.clone())
            .await
            .json()
            .await
            .unwrap();
        let lp = &whole["choices"][0]["logprobs"];
        let tokens: Vec<&str> = lp["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(tokens.len(), 6);
        assert_eq!(lp["token_logprobs"].as_array().unwrap().len(), 6);
        assert!(lp["top_logprobs"].as_array().unwrap().iter().all(|m| {
            let n = m.as_object().unwrap().len();
            (1..=2).contains(&n)
        }));
        let offsets: Vec<u64> = lp["text_offset"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_u64().unwrap())
            .collect();
        let mut at = 0;
        for (t, o) in tokens.iter().zip(&offsets) {
            assert_eq!(*o, at);
            at += t.chars().count() as u64;
        }
        let mut req = req;
        req["stream"] = json!(true);
        let raw = post(s, "/v1/completions", req).await.text().await.unwrap();
        let f = frames(&raw);
        let mut s_offsets = Vec::new();
        for (_, d) in &f[..f.len() - 1] {
            let c: Value = serde_json::from_str(d).unwrap();
            if let Some(o) = c["choices"][0]["logprobs"]["text_offset"].as_array() {
                s_offsets.extend(o.iter().map(|o| o.as_u64().unwrap()));
            }
        }
        assert_eq!(s_offsets, offsets);
    });
}

/// Usage of a repeated prompt differs only in cached tokens; compare the rest.
trait TapCached {
    fn tap_cached(self, other: &Value) -> Value;
}
impl TapCached for Value {
    fn tap_cached(mut self, other: &Value) -> Value {
        self["prompt_tokens_details"] = other["usage"]["prompt_tokens_details"].clone();
        self
    }
}

async fn kv_idle(s: &Server, within: Duration) -> Duration {
    let t = Instant::now();
    let engine = &s.state.served().unwrap().backend;
    loop {
        let st = engine.stats();
        if st.kv_blocks_used == 0 && st.running() == 0 && st.waiting() == 0 {
            return t.elapsed();
        }
        assert!(
            t.elapsed() < within,
            "KV not freed within {within:?}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn raw_request(s: &Server, body: &Value) -> tokio::net::TcpStream {
    let body = body.to_string();
    let mut sock = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{}",
        body.len(),
        body
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    sock
}

#[test]
fn client_disconnect_frees_kv_within_a_second() {
    let mut c = config();
    c.engine.max_num_seqs = 4;
    rt().block_on(async {
        let s = start(c).await;
        let engine = s.state.served().unwrap().backend.clone();
        // Streaming: read the first bytes, then hang up.
        let mut body = chat("Write a very long story about a lighthouse.", 1000);
        body["stream"] = json!(true);
        let mut sock = raw_request(&s, &body).await;
        let mut buf = vec![0u8; 4096];
        let n = sock.read(&mut buf).await.unwrap();
        let head = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        while engine.stats().kv_blocks_used == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(sock);
        let took = kv_idle(&s, Duration::from_secs(1)).await;
        eprintln!("streaming disconnect freed KV in {took:?}");

        // Not streaming: the handler is waiting for the whole answer.
        body["stream"] = json!(false);
        let sock = raw_request(&s, &body).await;
        let t = Instant::now();
        while engine.stats().kv_blocks_used == 0 {
            assert!(t.elapsed() < Duration::from_secs(10));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(sock);
        let took = kv_idle(&s, Duration::from_secs(1)).await;
        eprintln!("non-streaming disconnect freed KV in {took:?}");
        assert_eq!(s.state.admission.snapshot(), Default::default());
    });
}

#[test]
fn metrics_parse_as_prometheus_text() {
    let s = shared();
    let text = rt().block_on(async {
        let r = post(s, "/v1/chat/completions", chat("Hello there", 4)).await;
        assert_eq!(r.status(), 200);
        let _ = post(
            s,
            "/v1/chat/completions",
            json!({"model": "nope", "messages": []}),
        )
        .await;
        let r = client().get(url(s, "/metrics")).send().await.unwrap();
        // Served as the OpenAPI document says.
        let doc: Value = serde_json::from_str(&stoker_api::http::openapi::document()).unwrap();
        let documented = doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
            .as_object()
            .unwrap()
            .keys()
            .next()
            .unwrap()
            .clone();
        let served = r.headers()["content-type"].to_str().unwrap().to_string();
        assert!(
            served.starts_with(&documented),
            "served {served}, documented {documented}"
        );
        r.text().await.unwrap()
    });
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid Prometheus text");
    let names: std::collections::HashSet<&str> =
        scrape.samples.iter().map(|s| s.metric.as_str()).collect();
    for want in [
        "stoker_time_to_first_token_seconds",
        "stoker_inter_token_latency_seconds",
        "stoker_e2e_request_latency_seconds",
        "stoker_request_queue_time_seconds",
        "stoker_request_prefill_time_seconds",
        "stoker_request_decode_time_seconds",
        "stoker_num_requests_running",
        "stoker_num_requests_waiting",
        "stoker_kv_cache_usage_perc",
        "stoker_num_preemptions_total",
        "stoker_prompt_tokens_total",
        "stoker_generation_tokens_total",
        "stoker_request_success_total",
        "stoker_prefix_cache_queries_total",
        "stoker_prefix_cache_hits_total",
        "stoker_requests_rejected_total",
        "stoker_engine_step_duration_seconds",
        "stoker_engine_step_prefill_tokens",
        "stoker_engine_step_decode_rows",
        "stoker_engine_step_limit_seconds",
        "stoker_engine_step_cost_relative_error",
        "stoker_engine_step_cost_ms",
    ] {
        assert!(names.contains(want), "missing {want} in {names:?}");
    }
    let get = |name: &str, label: &str, value: &str| -> f64 {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name && s.labels.get(label) == Some(value))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    assert!(get("stoker_requests_rejected_total", "code", "model_not_found") >= 1.0);
    assert!(get("stoker_generation_tokens_total", "model", MODEL_ID) >= 4.0);
    assert!(get("stoker_request_success_total", "lane", "interactive") >= 1.0);
    for s in &scrape.samples {
        if s.metric == "stoker_time_to_first_token_seconds" {
            let prometheus_parse::Value::Histogram(h) = &s.value else {
                panic!("TTFT is a histogram: {s:?}");
            };
            assert!(h.len() >= 10 && h.last().unwrap().count >= 1.0, "{h:?}");
            assert_eq!(s.labels.get("model"), Some(MODEL_ID));
            assert!(s.labels.get("revision").is_some_and(|r| r.len() == 12));
            assert_eq!(s.labels.get("lane"), Some("interactive"));
        }
        // The chat's prefill and its decode rows are in the planner's
        // per-step histograms, under the interactive lane.
        for step_metric in [
            "stoker_engine_step_duration_seconds",
            "stoker_engine_step_prefill_tokens",
            "stoker_engine_step_decode_rows",
        ] {
            if s.metric == step_metric && s.labels.get("lane") == Some("interactive") {
                let prometheus_parse::Value::Histogram(h) = &s.value else {
                    panic!("{step_metric} is a histogram: {s:?}");
                };
                assert!(h.last().unwrap().count >= 1.0, "{step_metric}: {h:?}");
                // Buckets are cumulative once: +Inf holds the count.
                assert_eq!(
                    h.last().unwrap().count,
                    get(&format!("{step_metric}_count"), "lane", "interactive"),
                    "{step_metric}: {h:?}"
                );
                assert!(h.windows(2).all(|w| w[0].count <= w[1].count), "{h:?}");
            }
        }
    }
}

#[test]
fn api_keys_and_scopes() {
    let mut c = config();
    c.api_keys = vec![
        ApiKeyConfig {
            name: None,
            key: "sk-infer-0001".into(),
            tenant: "acme".into(),
            scopes: vec![Scope::Inference],
        },
        ApiKeyConfig {
            name: None,
            key: "sk-batch-0002".into(),
            tenant: "acme".into(),
            scopes: vec![Scope::Batch],
        },
    ];
    rt().block_on(async {
        let s = start(c).await;
        let get = |key: Option<&'static str>| {
            let mut r = client().get(url(&s, "/v1/models"));
            if let Some(k) = key {
                r = r.bearer_auth(k);
            }
            r.send()
        };
        for (key, status, code) in [
            (None, 401, Some("invalid_api_key")),
            (Some("sk-wrong-0001"), 401, Some("invalid_api_key")),
            (Some("sk-batch-0002"), 403, Some("insufficient_scope")),
            (Some("sk-infer-0001"), 200, None),
        ] {
            let r = get(key).await.unwrap();
            assert_eq!(r.status().as_u16(), status, "{key:?}");
            let v: Value = r.json().await.unwrap();
            if let Some(code) = code {
                assert_eq!(v["error"]["code"], code);
            } else {
                assert_eq!(v["data"][0]["id"], MODEL_ID);
            }
        }
        // Health and metrics stay open for the platform.
        assert_eq!(
            client()
                .get(url(&s, "/health/ready"))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
    });
}

#[test]
fn overload_and_deadline_refusals_carry_retry_after() {
    let mut c = config();
    c.engine.max_num_seqs = 1;
    c.admission.max_waiting_requests = 0;
    rt().block_on(async {
        let s = start(c).await;
        // Hold the only slot with a long stream.
        let mut body = chat("Tell me a long story.", 400);
        body["stream"] = json!(true);
        let mut held = post(&s, "/v1/chat/completions", body).await;
        assert_eq!(held.status(), 200);
        let _ = held.chunk().await.unwrap();
        let r = post(&s, "/v1/chat/completions", chat("hi", 2)).await;
        assert_eq!(r.status(), 503);
        let ra: u64 = r.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let ra_ms: u64 = r.headers()["retry-after-ms"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&ra) && ra_ms >= 100, "{ra} {ra_ms}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "server_overloaded");
        drop(held);
        kv_idle(&s, Duration::from_secs(2)).await;
    });
    let mut c = config();
    c.engine.max_num_seqs = 1;
    rt().block_on(async {
        let s = start(c).await;
        let mut body = chat("Tell me a long story.", 400);
        body["stream"] = json!(true);
        let mut held = post(&s, "/v1/chat/completions", body).await;
        let _ = held.chunk().await.unwrap();
        let r = client()
            .post(url(&s, "/v1/chat/completions"))
            .header("x-stoker-deadline-ms", "1")
            .json(&chat("hi", 2))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        assert!(r.headers().contains_key("retry-after"));
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "deadline_infeasible");
        // A generous deadline is admitted.
        drop(held);
        kv_idle(&s, Duration::from_secs(2)).await;
        let r = client()
            .post(url(&s, "/v1/chat/completions"))
            .header("x-stoker-deadline-ms", "60000")
            .json(&chat("hi", 2))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    });
}

#[test]
fn readiness_during_warm_up_and_drain() {
    let mut c = config();
    c.shutdown_timeout_secs = 30;
    rt().block_on(async {
        let s = roles::start(c).await.unwrap();
        // The model takes far longer to load than this request takes.
        let r = client().get(url(&s, "/health/ready")).send().await.unwrap();
        assert_eq!(r.status(), 503);
        assert_ne!(s.state.phase(), Phase::Ready);
        assert_eq!(
            client()
                .get(url(&s, "/health/live"))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
        let r = post(&s, "/v1/chat/completions", chat("hi", 2)).await;
        assert_eq!(r.status(), 503);
        assert!(r.headers().contains_key("retry-after"));
        assert_eq!(
            r.json::<Value>().await.unwrap()["error"]["code"],
            "not_ready"
        );
        s.wait_ready(Duration::from_secs(120)).await.unwrap();
        assert_eq!(
            client()
                .get(url(&s, "/health/ready"))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );

        // Drain with a request in flight: it finishes, new ones are refused.
        let mut body = chat("Count to twenty.", 40);
        body["stream"] = json!(true);
        let inflight = post(&s, "/v1/chat/completions", body).await;
        assert_eq!(inflight.status(), 200);
        let addr = s.addr;
        let trigger = s.shutdown_trigger();
        trigger();
        let t = Instant::now();
        while s.state.phase() != Phase::Draining {
            assert!(t.elapsed() < Duration::from_secs(2));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let r = client()
            .get(format!("http://{addr}/health/ready"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        let r = client()
            .post(format!("http://{addr}/v1/chat/completions"))
            .json(&chat("hi", 2))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503);
        assert_eq!(
            r.json::<Value>().await.unwrap()["error"]["code"],
            "not_ready"
        );
        let f = frames(&inflight.text().await.unwrap());
        assert_eq!(f.last().unwrap().1, "[DONE]", "in-flight stream completes");
        tokio::time::timeout(Duration::from_secs(10), s.wait())
            .await
            .unwrap()
            .unwrap();
    });
}

#[test]
fn shutdown_timeout_ends_streams_with_a_typed_error_event() {
    let mut c = config();
    c.shutdown_timeout_secs = 0;
    rt().block_on(async {
        let s = start(c).await;
        let mut body = chat("Write a very long story about a lighthouse.", 1000);
        body["stream"] = json!(true);
        let mut r = post(&s, "/v1/chat/completions", body).await;
        let first = r.chunk().await.unwrap().unwrap();
        assert!(first.starts_with(b"data: "), "{first:?}");
        s.shutdown_trigger()();
        let mut rest = String::from_utf8(first.to_vec()).unwrap();
        while let Some(c) = r.chunk().await.unwrap() {
            rest.push_str(std::str::from_utf8(&c).unwrap());
        }
        let f = frames(&rest);
        let (event, data) = f.last().unwrap();
        assert_eq!(event.as_deref(), Some("error"));
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["error"]["code"], "not_ready");
        tokio::time::timeout(Duration::from_secs(10), s.wait())
            .await
            .unwrap()
            .unwrap();
    });
}

#[test]
fn openapi_document_is_checked_in() {
    let path = stoker_test_support::repo_root().join("schemas/openapi.json");
    let doc = stoker_api::http::openapi::document();
    if std::env::var_os("STOKER_UPDATE_SCHEMAS").is_some() {
        std::fs::write(&path, &doc).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == doc,
        "schemas/openapi.json is stale; regenerate with `stoker openapi > schemas/openapi.json` \
         or STOKER_UPDATE_SCHEMAS=1 cargo test --release -p stoker-api --test http"
    );
}

#[test]
fn openapi_lists_exactly_the_error_catalogue() {
    let doc: Value = serde_json::from_str(&stoker_api::http::openapi::document()).unwrap();
    let code = &doc["components"]["schemas"]["ErrorDetail"]["properties"]["code"];
    assert_eq!(code["type"], "string", "{code}");
    let listed: Vec<&str> = code["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("ErrorDetail.code has no enum: {code}"))
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let catalogue: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(listed, catalogue);
}

/// Greedy decoding under `logit_bias`, `min_tokens`, the penalties and
/// `include_stop_str_in_output`: each changes the answer the way it says,
/// and log probabilities stay those of the raw logits.
#[test]
fn sampling_controls_shape_greedy_output() {
    let s = shared();
    rt().block_on(async {
        let complete = |extra: Value| {
            let mut body = json!({"model": MODEL_ID, "prompt": "The sky is", "max_tokens": 4,
                "temperature": 0, "logprobs": 0});
            for (k, v) in extra.as_object().unwrap() {
                body[k] = v.clone();
            }
            async move {
                let v: Value = post(s, "/v1/completions", body).await.json().await.unwrap();
                assert!(v["error"].is_null(), "{v}");
                v
            }
        };
        let tokens = |v: &Value| -> Vec<String> {
            v["choices"][0]["logprobs"]["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_str().unwrap().to_string())
                .collect()
        };
        let plain = complete(json!({})).await;
        let biased = complete(json!({"logit_bias": {"1000": 100}})).await;
        let b = tokens(&biased);
        assert_eq!(b.len(), 4, "{biased}");
        assert!(
            b.iter().all(|t| *t == b[0]),
            "bias +100 forces one token: {b:?}"
        );
        assert_ne!(
            tokens(&plain)[0],
            b[0],
            "the unbiased answer starts elsewhere"
        );
        let lp = biased["choices"][0]["logprobs"]["token_logprobs"][0]
            .as_f64()
            .unwrap();
        assert!(
            lp < -1.0,
            "logprobs are of the raw logits, not the biased ones: {lp}"
        );

        let repetitive = json!({"prompt": "one one one one one one one one", "max_tokens": 6});
        let rep_plain = complete(repetitive.clone()).await;
        let mut penalized = repetitive.clone();
        penalized["repetition_penalty"] = json!(3.0);
        penalized["frequency_penalty"] = json!(2.0);
        let rep_pen = complete(penalized).await;
        let (a, b) = (tokens(&rep_plain), tokens(&rep_pen));
        let distinct = |v: &[String]| v.iter().collect::<std::collections::HashSet<_>>().len();
        assert!(
            distinct(&b) > distinct(&a),
            "penalties make the answer less repetitive: {a:?} then {b:?}"
        );

        // An answer that ends early with the end-of-sequence token goes on
        // to min_tokens.
        let mut short = chat("Say hi.", 60);
        let v: Value = post(s, "/v1/chat/completions", short.clone())
            .await
            .json()
            .await
            .unwrap();
        let n = v["usage"]["completion_tokens"].as_u64().unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{v}");
        assert!(n < 40, "the premise: a short answer ({n} tokens)");
        short["min_tokens"] = json!(40);
        let v: Value = post(s, "/v1/chat/completions", short)
            .await
            .json()
            .await
            .unwrap();
        let n = v["usage"]["completion_tokens"].as_u64().unwrap();
        assert!(n >= 40, "min_tokens 40 gave {n} tokens: {v}");

        // A stop string in the plain answer, dropped or kept.
        let body = json!({"model": MODEL_ID, "prompt": "A list of fruits: apple, banana,",
            "max_tokens": 16, "temperature": 0});
        let text = |v: Value| v["choices"][0]["text"].as_str().unwrap().to_string();
        let whole = text(
            post(s, "/v1/completions", body.clone())
                .await
                .json()
                .await
                .unwrap(),
        );
        let stop: String = whole.chars().skip(3).take(3).collect();
        let at = whole.find(&stop).unwrap();
        let mut stopped = body.clone();
        stopped["stop"] = json!([stop]);
        let cut = text(
            post(s, "/v1/completions", stopped.clone())
                .await
                .json()
                .await
                .unwrap(),
        );
        assert_eq!(cut, whole[..at], "stop {stop:?} in {whole:?}");
        stopped["include_stop_str_in_output"] = json!(true);
        let kept = text(
            post(s, "/v1/completions", stopped)
                .await
                .json()
                .await
                .unwrap(),
        );
        assert_eq!(kept, whole[..at + stop.len()], "stop {stop:?} in {whole:?}");
    });
}

/// Every answer names the tokenizer and chat template that shaped its
/// prompt, as the model file defines them.
#[test]
fn responses_name_the_tokenizer_and_template_hashes() {
    let s = shared();
    let meta = stoker_executor::model::ModelMeta::read(&stoker_test_support::model_path()).unwrap();
    let id = &meta.identity;
    assert_eq!(id.chat_template_sha256, meta.chat_template.sha256_hex());
    rt().block_on(async {
        for stream in [false, true] {
            let mut body = chat("Hi", 2);
            body["stream"] = json!(stream);
            let r = post(s, "/v1/chat/completions", body).await;
            assert_eq!(r.status(), 200);
            let h = r.headers();
            assert_eq!(h["x-stoker-model-sha256"], id.sha256.as_str());
            assert_eq!(h["x-stoker-tokenizer-sha256"], id.tokenizer_sha256.as_str());
            assert_eq!(
                h["x-stoker-template-sha256"],
                id.chat_template_sha256.as_str()
            );
        }
    });
}

/// `response_format` on chat and completions, streamed and not, sampled at
/// a high temperature: every answer parses and holds to the schema, and the
/// label's log probabilities come with it.
#[test]
fn response_formats_always_parse() {
    let s = shared();
    let schema = json!({
        "type": "object",
        "properties": {
            "label": {"enum": ["spam", "ham"]},
            "score": {"type": "number", "minimum": 0, "maximum": 1}
        },
        "required": ["label", "score"],
        "additionalProperties": false
    });
    let check = |text: &str| {
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(
            ["spam", "ham"].contains(&v["label"].as_str().unwrap_or("")),
            "{text}"
        );
        let score = v["score"].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&score), "{text}");
        assert_eq!(v.as_object().unwrap().len(), 2, "{text}");
    };
    rt().block_on(async {
        let format = json!({"type": "json_schema",
            "json_schema": {"name": "verdict", "strict": true, "schema": schema}});
        for seed in 0..3 {
            let mut body = chat("Is 'WIN A FREE PHONE NOW' spam? Answer in JSON.", 60);
            body["response_format"] = format.clone();
            body["temperature"] = json!(1.3);
            body["seed"] = json!(seed);
            body["logprobs"] = json!(true);
            body["top_logprobs"] = json!(5);
            let r = post(s, "/v1/chat/completions", body.clone()).await;
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            let choice = &v["choices"][0];
            assert_eq!(choice["finish_reason"], "stop", "{v}");
            let text = choice["message"]["content"].as_str().unwrap();
            check(text);
            let lp = choice["logprobs"]["content"].as_array().unwrap();
            let joined: String = lp.iter().map(|t| t["token"].as_str().unwrap()).collect();
            assert_eq!(joined, text);
            assert!(
                lp.iter()
                    .all(|t| t["top_logprobs"].as_array().unwrap().len() == 5)
            );

            body["stream"] = json!(true);
            let r = post(s, "/v1/chat/completions", body).await;
            assert_eq!(r.status(), 200);
            let raw = r.text().await.unwrap();
            let streamed: String = frames(&raw)
                .iter()
                .filter(|(_, d)| d != "[DONE]")
                .filter_map(|(_, d)| {
                    let c: Value = serde_json::from_str(d).ok()?;
                    c["choices"][0]["delta"]["content"]
                        .as_str()
                        .map(str::to_owned)
                })
                .collect();
            assert_eq!(streamed, text, "the same seed streams the same answer");
        }
        let r = post(
            s,
            "/v1/completions",
            json!({"model": MODEL_ID, "prompt": "A JSON object describing a dog:",
                "max_tokens": 80, "temperature": 1.0, "seed": 5,
                "response_format": {"type": "json_object"}}),
        )
        .await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        let text = v["choices"][0]["text"].as_str().unwrap();
        if v["choices"][0]["finish_reason"] == "stop" {
            let o: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
            assert!(o.is_object(), "{text}");
        } else {
            assert!(text.starts_with('{'), "{text}");
        }
    });
}

/// `n` choices, streamed and not: each choice is the answer its own seed
/// gives alone (`seed + index`), usage counts the prompt once, and a stream
/// carries every index with one finish each.
#[test]
fn n_choices_are_each_their_seeds_answer() {
    let s = shared();
    rt().block_on(async {
        let mut body = chat("Name a color and a fruit.", 10);
        body["temperature"] = json!(1.0);
        body["seed"] = json!(11);
        body["n"] = json!(3);
        body["logprobs"] = json!(true);
        let r = post(s, "/v1/chat/completions", body.clone()).await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        let choices = v["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 3, "{v}");
        let mut completion_tokens = 0;
        for (i, c) in choices.iter().enumerate() {
            assert_eq!(c["index"], i, "{v}");
            let mut alone = body.clone();
            alone["n"] = json!(1);
            alone["seed"] = json!(11 + i);
            let a: Value = post(s, "/v1/chat/completions", alone)
                .await
                .json()
                .await
                .unwrap();
            assert_eq!(
                c["message"]["content"], a["choices"][0]["message"]["content"],
                "choice {i}"
            );
            assert_eq!(c["logprobs"], a["choices"][0]["logprobs"], "choice {i}");
            completion_tokens += a["usage"]["completion_tokens"].as_u64().unwrap();
        }
        let u = &v["usage"];
        assert_eq!(u["completion_tokens"], completion_tokens, "{v}");
        assert_eq!(
            u["total_tokens"].as_u64().unwrap(),
            u["prompt_tokens"].as_u64().unwrap() + completion_tokens
        );

        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let raw = post(s, "/v1/chat/completions", body)
            .await
            .text()
            .await
            .unwrap();
        let mut texts = vec![String::new(); 3];
        let mut finishes = vec![0; 3];
        let mut usage = None;
        for (_, d) in frames(&raw) {
            if d == "[DONE]" {
                continue;
            }
            let c: Value = serde_json::from_str(&d).unwrap();
            if let Some(ch) = c["choices"].as_array().and_then(|a| a.first()) {
                let i = ch["index"].as_u64().unwrap() as usize;
                texts[i].push_str(ch["delta"]["content"].as_str().unwrap_or(""));
                finishes[i] += ch["finish_reason"].is_string() as usize;
            } else {
                usage = Some(c["usage"].clone());
            }
        }
        assert!(raw.ends_with("data: [DONE]\n\n"), "{raw}");
        assert_eq!(finishes, [1, 1, 1], "{raw}");
        for (i, c) in choices.iter().enumerate() {
            assert_eq!(
                texts[i],
                c["message"]["content"].as_str().unwrap(),
                "choice {i}"
            );
        }
        assert_eq!(usage.unwrap()["completion_tokens"], completion_tokens);

        let r = post(
            s,
            "/v1/completions",
            json!({"model": MODEL_ID, "prompt": "Once upon a time", "max_tokens": 6,
                "n": 4, "temperature": 1.0, "seed": 3}),
        )
        .await;
        let v: Value = r.json().await.unwrap();
        let idx: Vec<u64> = v["choices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["index"].as_u64().unwrap())
            .collect();
        assert_eq!(idx, [0, 1, 2, 3], "{v}");
    });
}

/// `tool_choice` `required` and a named function decode under the
/// function's parameter schema, so the calls parse whatever the temperature
/// and whatever the template (SmolLM2's renders no tools); streamed, the
/// call comes whole in one `delta.tool_calls` entry.
#[test]
fn forced_tool_calls_always_parse() {
    let s = shared();
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
            "required": ["city"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {
            "type": "object", "properties": {"tz": {"enum": ["UTC", "CET"]}},
            "required": ["tz"], "additionalProperties": false}}},
    ]);
    let valid = |name: &str, args: &str| {
        let v: Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("{e}: {args:?}"));
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        match name {
            "get_weather" => assert!(keys == ["city"] && v["city"].is_string(), "{args}"),
            "get_time" => assert!(
                v == json!({"tz": "UTC"}) || v == json!({"tz": "CET"}),
                "{args}"
            ),
            other => panic!("called {other}"),
        }
    };
    rt().block_on(async {
        for seed in 0..3 {
            let mut body = chat("What is the weather in Paris?", 80);
            body["tools"] = tools.clone();
            body["tool_choice"] = json!("required");
            body["temperature"] = json!(1.3);
            body["seed"] = json!(seed);
            let r = post(s, "/v1/chat/completions", body).await;
            assert_eq!(r.status(), 200);
            let v: Value = r.json().await.unwrap();
            let choice = &v["choices"][0];
            assert_eq!(choice["finish_reason"], "tool_calls", "{v}");
            assert!(choice["message"]["content"].is_null(), "{v}");
            let calls = choice["message"]["tool_calls"].as_array().unwrap();
            assert!(!calls.is_empty());
            for c in calls {
                assert_eq!(c["type"], "function");
                assert!(c["id"].as_str().unwrap().starts_with("call_"));
                valid(
                    c["function"]["name"].as_str().unwrap(),
                    c["function"]["arguments"].as_str().unwrap(),
                );
            }
        }
        let mut body = chat("What time is it?", 40);
        body["tools"] = tools.clone();
        body["tool_choice"] = json!({"type": "function", "function": {"name": "get_time"}});
        body["temperature"] = json!(0);
        let whole: Value = post(s, "/v1/chat/completions", body.clone())
            .await
            .json()
            .await
            .unwrap();
        let choice = &whole["choices"][0];
        assert_eq!(choice["finish_reason"], "stop", "{whole}");
        let call = &choice["message"]["tool_calls"][0];
        assert_eq!(call["function"]["name"], "get_time");
        valid("get_time", call["function"]["arguments"].as_str().unwrap());
        body["stream"] = json!(true);
        let raw = post(s, "/v1/chat/completions", body)
            .await
            .text()
            .await
            .unwrap();
        let f = frames(&raw);
        assert_eq!(f.last().unwrap().1, "[DONE]");
        let chunks: Vec<Value> = f[..f.len() - 1]
            .iter()
            .map(|(_, d)| serde_json::from_str(d).unwrap())
            .collect();
        let deltas: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"].get("tool_calls"))
            .collect();
        assert_eq!(deltas.len(), 1, "{raw}");
        assert_eq!(deltas[0][0]["index"], 0);
        assert_eq!(deltas[0][0]["function"], call["function"], "{raw}");
        let text: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, "", "no content beside a named call");
        let fin = chunks
            .iter()
            .rev()
            .find_map(|c| c["choices"][0]["finish_reason"].as_str());
        assert_eq!(fin, Some("stop"));
    });
}

/// The legacy `logprobs` of a completion body's first choice, as numbers or
/// nulls, and its tokens.
fn legacy_logprobs(v: &Value) -> (Vec<String>, Vec<Option<f64>>) {
    let lp = &v["choices"][0]["logprobs"];
    let tokens = lp["tokens"]
        .as_array()
        .unwrap_or_else(|| panic!("no tokens: {v}"))
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    let lps = lp["token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(Value::as_f64)
        .collect();
    (tokens, lps)
}

#[test]
fn echo_scores_the_prompt_and_leads_the_output_with_it() {
    let s = shared();
    rt().block_on(async {
        let prompt = "The sky above the port was the color of television";
        // Scoring without generating: OpenAI's legacy `echo` + `max_tokens: 0`.
        let score = json!({"model": MODEL_ID, "prompt": prompt, "echo": true,
            "max_tokens": 0, "logprobs": 2, "temperature": 0});
        let r = post(s, "/v1/completions", score.clone()).await;
        assert_eq!(r.status(), 200);
        let scored: Value = r.json().await.unwrap();
        let choice = &scored["choices"][0];
        assert_eq!(choice["text"], prompt, "{scored}");
        assert_eq!(choice["finish_reason"], "length");
        assert_eq!(scored["usage"]["completion_tokens"], 0);
        let n = scored["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
        let (tokens, lps) = legacy_logprobs(&scored);
        assert_eq!(tokens.len(), n);
        assert_eq!(tokens.concat(), prompt, "the tokens spell the prompt");
        assert_eq!(lps[0], None, "nothing precedes the first token");
        assert!(choice["logprobs"]["top_logprobs"][0].is_null());
        assert!(
            lps[1..].iter().all(|l| l.is_some_and(|l| l <= 0.0)),
            "{lps:?}"
        );
        let tops = choice["logprobs"]["top_logprobs"].as_array().unwrap();
        assert!(
            tops[1..]
                .iter()
                .all(|m| (1..=2).contains(&m.as_object().unwrap().len()))
        );
        // The same prompt scores the same, cached blocks or not.
        let again: Value = post(s, "/v1/completions", score.clone())
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(again["choices"], scored["choices"]);

        // With output: the prompt, then what the same request without echo
        // says, token for token and number for number.
        let mut generate = json!({"model": MODEL_ID, "prompt": prompt, "max_tokens": 5,
            "logprobs": 2, "temperature": 0, "ignore_eos": true});
        let plain: Value = post(s, "/v1/completions", generate.clone())
            .await
            .json()
            .await
            .unwrap();
        generate["echo"] = json!(true);
        let echoed: Value = post(s, "/v1/completions", generate.clone())
            .await
            .json()
            .await
            .unwrap();
        let text = plain["choices"][0]["text"].as_str().unwrap();
        assert_eq!(echoed["choices"][0]["text"], format!("{prompt}{text}"));
        let (et, el) = legacy_logprobs(&echoed);
        let (pt, pl) = legacy_logprobs(&plain);
        assert_eq!(et[..n], tokens[..]);
        assert_eq!(el[..n], lps[..]);
        assert_eq!(et[n..], pt[..]);
        assert_eq!(el[n..], pl[..]);
        let offsets: Vec<u64> = echoed["choices"][0]["logprobs"]["text_offset"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_u64().unwrap())
            .collect();
        assert_eq!(offsets[n], prompt.chars().count() as u64);

        // Streamed: the prompt's chunk first, then the output's; together
        // they are the whole answer.
        generate["stream"] = json!(true);
        let raw = post(s, "/v1/completions", generate.clone())
            .await
            .text()
            .await
            .unwrap();
        let f = frames(&raw);
        let chunks: Vec<Value> = f[..f.len() - 1]
            .iter()
            .map(|(_, d)| serde_json::from_str(d).unwrap())
            .collect();
        assert_eq!(chunks[0]["choices"][0]["text"], prompt);
        let streamed: String = chunks
            .iter()
            .map(|c| c["choices"][0]["text"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(streamed, echoed["choices"][0]["text"].as_str().unwrap());
        let streamed_lps: Vec<Option<f64>> = chunks
            .iter()
            .filter_map(|c| {
                c["choices"][0]["logprobs"]["token_logprobs"]
                    .as_array()
                    .cloned()
            })
            .flatten()
            .map(|l| l.as_f64())
            .collect();
        assert_eq!(streamed_lps, el);

        // Without logprobs the prompt leads the text all the same, and two
        // choices each carry it.
        let body = json!({"model": MODEL_ID, "prompt": prompt, "echo": true,
            "max_tokens": 3, "n": 2, "temperature": 1.0, "seed": 4});
        let two: Value = post(s, "/v1/completions", body.clone())
            .await
            .json()
            .await
            .unwrap();
        for c in two["choices"].as_array().unwrap() {
            assert!(c["text"].as_str().unwrap().starts_with(prompt), "{two}");
            assert!(c["logprobs"].is_null());
        }
        let mut body = body;
        body["stream"] = json!(true);
        body["logprobs"] = json!(0);
        let raw = post(s, "/v1/completions", body).await.text().await.unwrap();
        let mut texts = [String::new(), String::new()];
        for (_, d) in frames(&raw) {
            if d == "[DONE]" {
                continue;
            }
            let c: Value = serde_json::from_str(&d).unwrap();
            let i = c["choices"][0]["index"].as_u64().unwrap() as usize;
            texts[i].push_str(c["choices"][0]["text"].as_str().unwrap_or(""));
        }
        assert!(texts.iter().all(|t| t.starts_with(prompt)), "{texts:?}");
        kv_idle(s, Duration::from_secs(5)).await;
    });
}
