//! Tenants, API keys and quotas end to end, on the real binary and model:
//!
//! * a key issued through one `stoker api` works on a second one, and once
//!   revoked on the first, both refuse it within seconds; the audit log holds
//!   who created, issued and revoked, why, and never the secret;
//! * the same surface from `stoker admin tenants|keys` against `stoker serve`,
//!   hostile input refused with the server's message;
//! * quotas over HTTP: a second concurrent request and a spent tokens-per-minute
//!   budget are refused with 429 `tenant_quota_exceeded` and `Retry-After`,
//!   the budget refills, another tenant is unaffected, and the request log
//!   names the tenant.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::batch::{Answer, answer, get, post};
use crate::cluster::Cluster;
use crate::harness::{Server, ServerOptions, Sse, chunk_text, http, stoker_bin};

const OPS_KEY: &str = "sk-ops-alice-0001";
/// A key from the config file, of tenant `acme`: not one the admin API issued.
const APP_KEY: &str = "sk-app-acme-0001";

const KEYS: &str = r#"
[[api_keys]]
name = "ops-alice"
key = "sk-ops-alice-0001"
tenant = "ops"
scopes = ["admin", "inference"]

[[api_keys]]
name = "acme-app"
key = "sk-app-acme-0001"
tenant = "acme"
scopes = ["inference"]
"#;

/// An admin write or read that must succeed with `want`.
fn must(a: &Answer, want: u16, what: &str, server: &Server) -> Value {
    assert_eq!(
        a.status,
        want,
        "{what}: {} {}\n{}",
        a.status,
        a.text,
        server.stderr_tail(3000)
    );
    a.body.clone()
}

async fn put(server: &Server, key: &str, path: &str, body: &Value) -> Answer {
    answer(http().put(server.url(path)).json(body), Some(key)).await
}

async fn create_tenant(server: &Server, id: &str, reason: &str) -> Value {
    let a = post(
        server,
        Some(OPS_KEY),
        "/admin/v1/tenants",
        &json!({"tenant_id": id, "display_name": format!("{id} Corp"), "reason": reason}),
    )
    .await;
    must(&a, 201, &format!("create tenant {id}"), server)
}

/// Issues an inference key to `tenant`; returns (key id, secret).
async fn issue_key(server: &Server, tenant: &str, reason: &str) -> (String, String) {
    let a = post(
        server,
        Some(OPS_KEY),
        "/admin/v1/keys",
        &json!({"tenant_id": tenant, "name": format!("{tenant}-prod"),
                "scopes": ["inference"], "reason": reason}),
    )
    .await;
    let v = must(&a, 201, &format!("issue a key to {tenant}"), server);
    let key_id = v["data"]["key_id"].as_str().expect("key_id").to_owned();
    let secret = v["data"]["secret"]
        .as_str()
        .unwrap_or_else(|| panic!("no secret in the issue answer: {v}"))
        .to_owned();
    assert!(
        secret.starts_with(&format!("stk_{key_id}_")),
        "the secret is stk_<key_id>_<secret>: {secret} for {key_id}"
    );
    assert_eq!(v["data"]["prefix"], format!("stk_{key_id}").as_str(), "{v}");
    assert_eq!(v["data"]["status"], "active", "{v}");
    assert_eq!(v["data"]["tenant_id"], tenant, "{v}");
    (key_id, secret)
}

async fn set_quota(server: &Server, tenant: &str, quota: Value) -> Value {
    let a = put(
        server,
        OPS_KEY,
        &format!("/admin/v1/tenants/{tenant}/quota"),
        &json!({"quota": quota, "reason": "e2e limits"}),
    )
    .await;
    must(&a, 200, &format!("set the quota of {tenant}"), server)
}

async fn tenant(server: &Server, id: &str) -> Value {
    let a = get(server, Some(OPS_KEY), &format!("/admin/v1/tenants/{id}")).await;
    must(&a, 200, &format!("GET tenant {id}"), server)
}

/// One chat completion's answer and its request id.
struct Reply {
    status: u16,
    body: Value,
    text: String,
    retry_after: Option<String>,
    request_id: String,
}

fn chat_body(model: &str, max_tokens: u32) -> Value {
    json!({
        "model": model,
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": max_tokens,
        "ignore_eos": true,
        "temperature": 0,
        "stream": false,
    })
}

async fn chat(server: &Server, key: &str, model: &str, max_tokens: u32) -> Reply {
    let resp = http()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&chat_body(model, max_tokens))
        .send()
        .await
        .expect("chat request");
    reply(resp).await
}

async fn reply(resp: reqwest::Response) -> Reply {
    let header = |k: &str| {
        resp.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let retry_after = header("retry-after");
    let request_id = header("x-request-id").unwrap_or_default();
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("response body");
    Reply {
        status,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
        retry_after,
        request_id,
    }
}

/// Retries `chat` (`max_tokens`) every 200 ms until it answers `want` or `limit` passes;
/// returns the last answer and how long it took.
async fn chat_until(
    server: &Server,
    key: &str,
    model: &str,
    max_tokens: u32,
    want: u16,
    limit: Duration,
) -> (Reply, Duration) {
    let start = Instant::now();
    loop {
        let r = chat(server, key, model, max_tokens).await;
        if r.status == want || start.elapsed() > limit {
            return (r, start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The request log's row for `request_id`, once it is written.
async fn logged(server: &Server, request_id: &str) -> Value {
    assert!(!request_id.is_empty(), "the answer had no x-request-id");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = get(
            server,
            Some(OPS_KEY),
            &format!("/admin/v1/requests/{request_id}"),
        )
        .await;
        if a.status == 200 {
            return a.body;
        }
        assert!(
            Instant::now() < deadline,
            "request {request_id} not in the request log after 30 s: {} {}",
            a.status,
            a.text
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `api` sees `n` executors alive and ready.
async fn wait_executors(api: &Server, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let a = get(api, Some(OPS_KEY), "/admin/v1/executors").await;
        let live = a.body["data"]
            .as_array()
            .map(|d| {
                d.iter()
                    .filter(|e| e["live"]["ready"] == Value::Bool(true))
                    .count()
            })
            .unwrap_or(0);
        if live == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} sees {live} ready executors, not {n}: {}",
            api.base,
            a.text
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_on_one_api_is_refused_by_both_within_seconds_and_audited() {
    let cluster = Cluster::start_with("tenantsrev", 1, KEYS, Some(OPS_KEY)).await;
    let api2 = cluster.start_api("tenantsrev-api2").await;
    wait_executors(&api2, 1).await;
    let api1 = &cluster.api;
    let model = api1.model_id(Some(OPS_KEY)).await;

    create_tenant(api1, "globex", "new customer globex").await;
    let (key_id, secret) = issue_key(api1, "globex", "globex production key").await;

    // The key works on the API that issued it at once, and on the other one
    // once its read models have caught up.
    let r = chat(api1, &secret, &model, 2).await;
    assert_eq!(r.status, 200, "the new key on API #1: {}", r.text);
    let (r, took) = chat_until(&api2, &secret, &model, 2, 200, Duration::from_secs(10)).await;
    assert_eq!(
        r.status,
        200,
        "the new key on API #2 after {took:?}: {}\n{}",
        r.text,
        api2.stderr_tail(3000)
    );
    let row = logged(&api2, &r.request_id).await;
    assert_eq!(row["tenant"], "globex", "{row}");

    // Revoked on API #1: both refuse it within a few seconds.
    let a = post(
        api1,
        Some(OPS_KEY),
        &format!("/admin/v1/keys/{key_id}/revoke"),
        &json!({"reason": "leaked in a public repo"}),
    )
    .await;
    let v = must(&a, 200, "revoke", api1);
    assert_eq!(v["data"]["status"], "revoked", "{v}");
    assert_eq!(v["data"]["revoked_by"], "ops-alice", "{v}");
    assert_eq!(v["data"]["revoke_reason"], "leaked in a public repo", "{v}");
    assert!(v["data"].get("secret").is_none(), "{v}");
    for (name, api) in [("API #1", api1), ("API #2", &api2)] {
        let (r, took) = chat_until(api, &secret, &model, 2, 401, Duration::from_secs(10)).await;
        assert_eq!(
            r.status, 401,
            "{name} still accepts the revoked key after {took:?}: {}",
            r.text
        );
        assert_eq!(
            r.body["error"]["code"], "invalid_api_key",
            "{name}: {}",
            r.text
        );
        println!("{name} refuses the revoked key after {took:?}");
    }
    // Both instances' admin views agree.
    for (name, api) in [("API #1", api1), ("API #2", &api2)] {
        let a = get(api, Some(OPS_KEY), "/admin/v1/keys?tenant=globex").await;
        let keys = must(&a, 200, "keys list", api);
        let k = keys["data"]
            .as_array()
            .and_then(|d| d.iter().find(|k| k["key_id"] == key_id.as_str()))
            .unwrap_or_else(|| panic!("{name}: {key_id} missing from {keys}"));
        assert_eq!(k["status"], "revoked", "{name}: {k}");
        assert!(
            !a.text.contains(&secret),
            "{name}: a key list shows the secret"
        );
        assert_eq!(tenant(api, "globex").await["keys_active"], 0, "{name}");
    }

    // The audit trail, read through API #2: who, why, and no secret.
    let audit = get(&api2, Some(OPS_KEY), "/admin/v1/audit?limit=1000").await;
    let audit = must(&audit, 200, "audit", &api2);
    let events: Vec<&Value> = audit["data"]
        .as_array()
        .expect("audit data")
        .iter()
        .filter(|e| e["stream_type"] == "tenant" && e["stream_id"] == "globex")
        .collect();
    let trail: Vec<(&str, &str, Option<&str>)> = events
        .iter()
        .map(|e| {
            (
                e["event_type"].as_str().unwrap_or("?"),
                e["actor"].as_str().unwrap_or("?"),
                e["reason"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        trail,
        vec![
            ("TenantCreated", "ops-alice", Some("new customer globex")),
            ("ApiKeyIssued", "ops-alice", Some("globex production key")),
            (
                "ApiKeyRevoked",
                "ops-alice",
                Some("leaked in a public repo")
            ),
        ],
        "{events:#?}"
    );
    let issued = events[1];
    let payload = issued["payload"].to_string();
    let secret_part = &secret[format!("stk_{key_id}_").len()..];
    assert!(
        !payload.contains(secret_part) && !audit.to_string().contains(secret_part),
        "the audit log holds the secret: {issued}"
    );
    assert!(payload.contains(&key_id), "{issued}");
    drop(api2);
}

/// `stoker admin --url … --api-key OPS_KEY ARGS`: (exit code, stdout, stderr).
fn cli(server: &Server, args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(stoker_bin())
        .args(["admin", "--url", &server.base, "--api-key", OPS_KEY])
        .args(args)
        .env_remove("STOKER_URL")
        .env_remove("STOKER_API_KEY")
        .output()
        .expect("run stoker admin");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A command that must succeed; returns its stdout.
fn cli_ok(server: &Server, args: &[&str]) -> String {
    let (code, out, err) = cli(server, args);
    assert_eq!(code, Some(0), "stoker admin {args:?}: {out}\n{err}");
    out
}

/// A command that must fail as a 4xx does (exit 2), with the server's message.
fn cli_refused(server: &Server, args: &[&str], status: u16, needle: &str) -> String {
    let (code, out, err) = cli(server, args);
    assert_eq!(
        code,
        Some(2),
        "stoker admin {args:?} must fail: {out}\n{err}"
    );
    assert!(
        err.contains(&format!("the server answered {status}")) && err.contains(needle),
        "stoker admin {args:?}: want the server's {status} naming {needle:?}, got: {err}"
    );
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_manages_tenants_quotas_and_keys() {
    let server = Server::start("tenants-cli", ServerOptions::default().config(KEYS)).await;
    let model = server.model_id(Some(OPS_KEY)).await;

    let out = cli_ok(
        &server,
        &[
            "tenants",
            "create",
            "initech",
            "--display-name",
            "Initech",
            "--reason",
            "signed",
        ],
    );
    assert!(out.starts_with("TENANT"), "{out}");
    assert!(
        out.contains("initech") && out.contains("TenantCreated"),
        "{out}"
    );
    let out = cli_ok(
        &server,
        &[
            "tenants",
            "quota",
            "initech",
            "--concurrent",
            "4",
            "--tokens-per-minute",
            "120000",
            "--weight",
            "3",
            "--reason",
            "gold plan",
        ],
    );
    assert!(
        out.contains("TenantQuotaSet") && out.contains("120000"),
        "{out}"
    );

    // Issue, as a table: the secret once, with the warning.
    let out = cli_ok(
        &server,
        &[
            "keys",
            "issue",
            "--tenant",
            "initech",
            "--name",
            "initech-prod",
            "--scope",
            "inference",
            "--scope",
            "batch",
            "--reason",
            "go live",
        ],
    );
    assert!(out.contains("will not be shown again"), "{out}");
    assert!(
        // Both scopes, in whatever order the server keeps them.
        (out.contains("inference,batch") || out.contains("batch,inference"))
            && out.contains("ApiKeyIssued"),
        "{out}"
    );
    let secret = out
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .unwrap_or_else(|| panic!("no `secret: ` line in {out}"))
        .trim()
        .to_owned();
    assert!(secret.starts_with("stk_"), "{secret}");
    assert_eq!(
        out.matches(&secret).count(),
        1,
        "the secret is printed once: {out}"
    );
    let r = chat(&server, &secret, &model, 1).await;
    assert_eq!(r.status, 200, "the key the CLI issued: {}", r.text);

    // Issue with --json: the server's answer.
    let out = cli_ok(
        &server,
        &[
            "--json",
            "keys",
            "issue",
            "--tenant",
            "initech",
            "--name",
            "initech-ci",
            "--scope",
            "inference",
        ],
    );
    let v: Value = serde_json::from_str(&out).expect("--json prints JSON");
    let ci_key = v["data"]["key_id"].as_str().expect("key_id").to_owned();
    let ci_secret = v["data"]["secret"].as_str().expect("secret").to_owned();
    assert!(ci_secret.starts_with(&format!("stk_{ci_key}_")), "{v}");
    assert_eq!(v["data"]["scopes"], json!(["inference"]), "{v}");
    assert_eq!(v["events"][0]["event_type"], "ApiKeyIssued", "{v}");

    // Lists never show secrets.
    let out = cli_ok(&server, &["keys", "list", "--tenant", "initech"]);
    assert!(out.starts_with("KEY"), "{out}");
    assert!(
        out.contains(&ci_key) && out.contains("initech-prod"),
        "{out}"
    );
    assert!(!out.contains(&secret) && !out.contains(&ci_secret), "{out}");
    let out = cli_ok(&server, &["--json", "keys", "list"]);
    let v: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| k["tenant_id"] == "initech")
            .count(),
        2,
        "{v}"
    );
    assert!(!out.contains(&secret) && !out.contains(&ci_secret), "{out}");

    let out = cli_ok(&server, &["keys", "revoke", &ci_key, "--reason", "rotated"]);
    assert!(
        out.contains("revoked") && out.contains("ApiKeyRevoked"),
        "{out}"
    );
    let r = chat(&server, &ci_secret, &model, 1).await;
    assert_eq!(r.status, 401, "a revoked key: {}", r.text);

    let out = cli_ok(&server, &["--json", "tenants", "get", "initech"]);
    let t: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(t["tenant_id"], "initech", "{t}");
    assert_eq!(t["display_name"], "Initech", "{t}");
    assert_eq!(t["created_by"], "ops-alice", "{t}");
    assert_eq!(t["keys_active"], 1, "{t}");
    assert_eq!(
        t["quota"],
        json!({"max_concurrent_requests": 4, "tokens_per_minute": 120000,
               "max_batch_queued_rows": null, "max_batch_queued_tokens": null,
               "max_file_bytes": null, "weight": 3}),
        "{t}"
    );
    assert_eq!(t["usage"]["concurrent_requests"], 0, "{t}");
    assert!(t["usage"]["tokens_available"].is_u64(), "{t}");
    let out = cli_ok(&server, &["tenants", "get", "initech"]);
    assert!(
        out.contains("usage") && out.contains("TOKENS_AVAILABLE"),
        "{out}"
    );
    let out = cli_ok(&server, &["tenants", "list"]);
    let line = out
        .lines()
        .find(|l| l.starts_with("initech "))
        .unwrap_or_else(|| panic!("no initech row in {out}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    // TENANT NAME WEIGHT CONCURRENT TOKENS/MIN KEYS IN_FLIGHT
    assert_eq!(
        cells,
        ["initech", "Initech", "3", "4", "120000", "1", "0"],
        "{out}"
    );

    // Hostile input: refused by the server, with its message, exit 2.
    cli_refused(&server, &["tenants", "create", "../x"], 400, "tenant_id");
    let long = "a".repeat(100);
    cli_refused(&server, &["tenants", "create", &long], 400, "tenant_id");
    cli_refused(&server, &["tenants", "create", "initech"], 409, "initech");
    cli_refused(
        &server,
        &[
            "keys", "issue", "--tenant", "initech", "--name", "x", "--scope", "root",
        ],
        400,
        "root",
    );
    cli_refused(
        &server,
        &[
            "keys",
            "issue",
            "--tenant",
            "nobody",
            "--name",
            "x",
            "--scope",
            "inference",
        ],
        404,
        "nobody",
    );
    cli_refused(
        &server,
        &["tenants", "quota", "initech", "--weight", "0"],
        400,
        "weight",
    );
    cli_refused(
        &server,
        &["keys", "revoke", &ci_key, "--reason", "again"],
        409,
        &ci_key,
    );
    // A revocation needs a reason: the CLI asks for one, and the server
    // refuses a blank one.
    let prod_key = cli_ok(&server, &["--json", "keys", "list", "--tenant", "initech"]);
    let prod_key: Value = serde_json::from_str(&prod_key).unwrap();
    let prod_key = prod_key["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["status"] == "active")
        .and_then(|k| k["key_id"].as_str())
        .expect("the active key")
        .to_owned();
    let (code, out, err) = cli(&server, &["keys", "revoke", &prod_key]);
    assert_eq!(code, Some(2), "{out}\n{err}");
    assert!(err.contains("--reason"), "{err}");
    cli_refused(
        &server,
        &["keys", "revoke", &prod_key, "--reason", " "],
        400,
        "reason",
    );
    let a = post(
        &server,
        Some(OPS_KEY),
        &format!("/admin/v1/keys/{prod_key}/revoke"),
        &json!({}),
    )
    .await;
    assert_eq!(a.status, 400, "a revocation without a reason: {}", a.text);
    assert!(a.text.contains("reason"), "{}", a.text);
    // Nothing of that changed the tenant.
    let t2: Value =
        serde_json::from_str(&cli_ok(&server, &["--json", "tenants", "get", "initech"])).unwrap();
    assert_eq!(t2["keys_active"], 1, "{t2}");
    assert_eq!(t2["quota"], t["quota"], "{t2}");
    // Without the admin scope: 403, exit 2.
    let out = std::process::Command::new(stoker_bin())
        .args(["admin", "--url", &server.base, "--api-key", APP_KEY])
        .args(["tenants", "list"])
        .output()
        .expect("run stoker admin");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("403"));
}

/// Reads a stream until its first content; fails on an error event.
async fn first_content(sse: &mut Sse) {
    let mut text = String::new();
    while text.is_empty() {
        let data = sse
            .next()
            .await
            .expect("the stream ended before any content");
        let chunk: Value = serde_json::from_str(&data).expect("chunk JSON");
        assert!(
            chunk.get("error").is_none(),
            "error before content: {chunk}"
        );
        text.push_str(&chunk_text(&chunk));
    }
}

fn assert_refused(r: &Reply, quota: &str, what: &str) -> u64 {
    assert_eq!(r.status, 429, "{what}: {}", r.text);
    assert_eq!(
        r.body["error"]["code"], "tenant_quota_exceeded",
        "{what}: {}",
        r.text
    );
    let message = r.body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(quota),
        "{what}: the message names {quota}: {message}"
    );
    let retry = r
        .retry_after
        .as_deref()
        .unwrap_or_else(|| panic!("{what}: no Retry-After on the 429"));
    let secs: u64 = retry
        .parse()
        .unwrap_or_else(|_| panic!("{what}: Retry-After {retry:?} is not seconds"));
    assert!(secs >= 1, "{what}: Retry-After {secs}");
    secs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quotas_refuse_with_429_and_retry_after_and_spare_other_tenants() {
    let server = Server::start("tenants-quota", ServerOptions::default().config(KEYS)).await;
    let model = server.model_id(Some(OPS_KEY)).await;
    for t in ["solo", "meter", "free"] {
        create_tenant(&server, t, "quota e2e").await;
    }
    let (_, solo) = issue_key(&server, "solo", "quota e2e").await;
    let (_, meter) = issue_key(&server, "meter", "quota e2e").await;
    let (_, free) = issue_key(&server, "free", "quota e2e").await;
    let v = set_quota(&server, "solo", json!({"max_concurrent_requests": 1})).await;
    assert_eq!(v["data"]["quota"]["max_concurrent_requests"], 1, "{v}");
    assert_eq!(v["data"]["quota"]["weight"], 1, "weight defaults to 1: {v}");
    let v = set_quota(
        &server,
        "meter",
        json!({"tokens_per_minute": 300, "weight": 1}),
    )
    .await;
    assert_eq!(v["data"]["usage"]["tokens_available"], 300, "{v}");

    // Concurrency: one stream in flight; a second one is refused before any
    // model work; other tenants are served meanwhile.
    let stream = |key: &str| {
        http()
            .post(server.url("/v1/chat/completions"))
            .bearer_auth(key)
            .json(&json!({
                "model": model,
                "messages": [{"role": "user", "content": "Write a long story about a ship."}],
                "max_tokens": 400, "ignore_eos": true, "temperature": 0, "stream": true,
            }))
            .send()
    };
    let resp = stream(&solo).await.expect("first stream");
    assert_eq!(resp.status().as_u16(), 200, "the first stream of solo");
    let mut sse = Sse::new(resp);
    first_content(&mut sse).await;
    assert_eq!(
        tenant(&server, "solo").await["usage"]["concurrent_requests"],
        1
    );
    let r = reply(stream(&solo).await.expect("second stream")).await;
    assert_refused(&r, "concurrent", "a second stream of solo");
    let r = chat(&server, &free, &model, 2).await;
    assert_eq!(
        r.status, 200,
        "another tenant during solo's stream: {}",
        r.text
    );
    let r = chat(&server, APP_KEY, &model, 2).await;
    assert_eq!(
        r.status, 200,
        "a config key during solo's stream: {}",
        r.text
    );
    // The stream ends (its client goes away): solo may send again.
    drop(sse);
    let (r, took) = chat_until(&server, &solo, &model, 2, 200, Duration::from_secs(30)).await;
    assert_eq!(
        r.status, 200,
        "solo after its stream ended ({took:?}): {}",
        r.text
    );
    assert_eq!(logged(&server, &r.request_id).await["tenant"], "solo");

    // Tokens per minute: 300, each request reserves its prompt and 100 tokens.
    let mut served = Vec::new();
    let refused = loop {
        let r = chat(&server, &meter, &model, 100).await;
        if r.status != 200 {
            break r;
        }
        assert_eq!(r.body["usage"]["completion_tokens"], 100, "{}", r.text);
        served.push(r.request_id);
        assert!(
            served.len() <= 3,
            "300 tokens a minute served {} requests of 100+ tokens",
            served.len()
        );
    };
    let retry = assert_refused(&refused, "tokens_per_minute", "meter over its budget");
    println!("meter: {} served, then Retry-After {retry}", served.len());
    assert!(!served.is_empty(), "the first request fits the budget");
    assert!(
        retry <= 60,
        "a minute refills the whole budget: Retry-After {retry}"
    );
    let t = tenant(&server, "meter").await;
    let available = t["usage"]["tokens_available"]
        .as_u64()
        .unwrap_or_else(|| panic!("meter has a tokens_per_minute bucket: {t}"));
    assert!(available < 300, "{t}");
    assert!(tenant(&server, "free").await["usage"]["tokens_available"].is_null());
    // Another tenant is unaffected.
    let r = chat(&server, &free, &model, 100).await;
    assert_eq!(r.status, 200, "free while meter is refused: {}", r.text);
    assert_eq!(logged(&server, &r.request_id).await["tenant"], "free");
    for id in &served {
        assert_eq!(logged(&server, id).await["tenant"], "meter");
    }
    // The budget refills: after Retry-After, meter is served again.
    tokio::time::sleep(Duration::from_secs(retry)).await;
    let (r, took) = chat_until(&server, &meter, &model, 100, 200, Duration::from_secs(15)).await;
    assert_eq!(
        r.status, 200,
        "meter {took:?} after waiting Retry-After ({retry} s): {}",
        r.text
    );
    assert_eq!(logged(&server, &r.request_id).await["tenant"], "meter");
}
