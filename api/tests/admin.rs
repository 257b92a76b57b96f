//! The admin surface in process, against the real model and an embedded SQLite
//! store: what the first start records, scopes, and typed errors for
//! malformed, oversized and hostile input, with nothing recorded on refusal.

#![allow(clippy::field_reassign_with_default)]

use std::time::Duration;

use serde_json::{Value, json};
use stoker_api::Config;
use stoker_api::auth::{ApiKeyConfig, Scope};
use stoker_api::roles::{self, Server};

#[path = "admin/tenants.rs"]
mod tenants;

const ADMIN: &str = "sk-admin-ops-0001";
const INFER: &str = "sk-infer-app-0001";
const MODEL_ID: &str = "SmolLM2-135M-Instruct.Q4_1";

fn config() -> Config {
    let mut c = Config::default();
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.model = stoker_test_support::model_path();
    c.data_dir = std::env::temp_dir().join(format!(
        "stoker-admin-test-{}",
        uuid::Uuid::new_v4().simple()
    ));
    c.engine.kv_cache_mib = 64;
    c.engine.threads = 2;
    c.control.rollout_controller_interval_ms = 0;
    c.limits.max_body_bytes = 64 * 1024;
    c.api_keys = vec![
        ApiKeyConfig {
            name: Some("ops-bob".into()),
            key: ADMIN.into(),
            tenant: "ops".into(),
            scopes: vec![Scope::Admin, Scope::Inference],
        },
        ApiKeyConfig {
            name: None,
            key: INFER.into(),
            tenant: "acme".into(),
            scopes: vec![Scope::Inference],
        },
    ];
    c
}

async fn start() -> Server {
    let s = roles::start(config()).await.unwrap();
    s.wait_ready(Duration::from_secs(120)).await.unwrap();
    s
}

struct C {
    base: String,
    http: reqwest::Client,
}

impl C {
    fn new(s: &Server) -> C {
        C {
            base: format!("http://{}", s.addr),
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        let mut r = match method {
            "GET" => self.http.get(url),
            "POST" => self.http.post(url),
            "PUT" => self.http.put(url),
            "DELETE" => self.http.delete(url),
            m => panic!("{m}"),
        };
        if let Some(k) = key {
            r = r.bearer_auth(k);
        }
        if let Some(b) = body {
            r = r
                .header("content-type", "application/json")
                .body(b.to_owned());
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn admin(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let b = body.map(|b| b.to_string());
        self.send(method, path, Some(ADMIN), b.as_deref()).await
    }

    async fn event_count(&self) -> usize {
        let (s, v) = self.admin("GET", "/admin/v1/audit?limit=1000", None).await;
        assert_eq!(s, 200, "{v}");
        v["data"].as_array().unwrap().len()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_start_records_the_default_deployment_revision_and_executor() {
    let s = start().await;
    let c = C::new(&s);
    let (st, v) = c.admin("GET", "/admin/v1/audit", None).await;
    assert_eq!(st, 200, "{v}");
    let types: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "DeploymentCreated",
            "RevisionRegistered",
            "ServingRevisionSet",
            "ExecutorRegistered"
        ]
    );
    assert!(
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["actor"] == "stoker-serve")
    );
    let (_, d) = c
        .admin("GET", &format!("/admin/v1/deployments/{MODEL_ID}"), None)
        .await;
    let rev = d["serving_revision"].as_str().unwrap();
    assert_eq!(rev.len(), 12);
    assert_eq!(
        d["revisions"][0]["model_sha256"].as_str().unwrap()[..12],
        *rev
    );
    assert!(d["revisions"][0]["tokenizer_hash"].as_str().unwrap().len() == 64);
    // No capacity profile yet: admission runs on its static limits.
    let (st, adm) = c.admin("GET", "/admin/v1/admission", None).await;
    assert_eq!(st, 200, "{adm}");
    assert_eq!(adm["source"], "static", "{adm}");
    assert!(
        adm["profile"].is_null() && adm["max_outstanding"].as_u64().unwrap() > 0,
        "{adm}"
    );
    // The step planner's targets in force, and the step-cost model fitted on
    // the warm-up's calibration prefill alone: its cold first steps are
    // forgotten before the server turns ready (fitted on them, the model
    // priced a prompt token at tens of ms), and the prefill rate is live.
    let p = &adm["planner"];
    assert_eq!(p["interactive_itl_mode"], "relative", "{adm}");
    assert_eq!(p["interactive_itl_factor"], 1.6, "{adm}");
    assert_eq!(p["batch_step_target_ms"], 60.0, "{adm}");
    assert_eq!(p["batch_step_beside_chat_ms"], 40.0, "{adm}");
    let fitted = p["step_cost"]["observations"].as_u64().unwrap();
    assert!((1..=4).contains(&fitted), "the calibration's steps: {adm}");
    assert_eq!(adm["prefill_rate_source"], "live", "{adm}");
    assert!(adm["prefill_tok_s"].as_f64().unwrap() > 0.0, "{adm}");
    assert!(
        p["step_cost"]["per_token_ms"].as_f64().unwrap() > 0.0,
        "{adm}"
    );
    let (_, x) = c.admin("GET", "/admin/v1/executors", None).await;
    assert_eq!(x["data"][0]["executor_id"], "embedded-0");
    assert_eq!(x["data"][0]["status"], "active");

    // A chat request lands in the request log under the default deployment.
    let (st, body) = c
        .send(
            "POST",
            "/v1/chat/completions",
            Some(INFER),
            Some(&json!({"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).to_string()),
        )
        .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["system_fingerprint"], format!("fp_{rev}"));
    // Refused requests are logged too, with their code.
    let (st, _) = c
        .send(
            "POST",
            "/v1/chat/completions",
            Some(INFER),
            Some(
                &json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]})
                    .to_string(),
            ),
        )
        .await;
    assert_eq!(st, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_and_hostile_input_get_typed_errors_and_record_nothing() {
    let s = start().await;
    let c = C::new(&s);
    let before = c.event_count().await;

    // No key, a bad key, a key without the admin scope.
    let body = json!({"id": "d1"}).to_string();
    for (key, status, code) in [
        (None, 401, "invalid_api_key"),
        (Some("sk-not-a-key-000"), 401, "invalid_api_key"),
        (Some(INFER), 403, "insufficient_scope"),
    ] {
        for (m, p) in [
            ("POST", "/admin/v1/deployments"),
            ("GET", "/admin/v1/audit"),
            ("POST", "/admin/v1/projections/rebuild"),
            ("GET", "/admin/v1/admission"),
        ] {
            let (st, v) = c.send(m, p, key, Some(&body)).await;
            assert_eq!(st, status, "{m} {p} with {key:?}: {v}");
            assert_eq!(v["error"]["code"], code);
        }
    }

    let huge = "x".repeat(65 * 1024);
    let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
        ("POST", "/admin/v1/deployments".into(), Some("{".into()), 400, "invalid_value"),
        ("POST", "/admin/v1/deployments".into(), Some("[]".into()), 400, "invalid_value"),
        ("POST", "/admin/v1/deployments".into(), Some("{}".into()), 400, "missing_field"),
        ("POST", "/admin/v1/deployments".into(), Some(json!({"id": "d1", "bogus": 1}).to_string()), 400, "invalid_value"),
        ("POST", "/admin/v1/deployments".into(), Some(json!({"id": "../etc"}).to_string()), 400, "invalid_value"),
        ("POST", "/admin/v1/deployments".into(), Some(json!({"id": "a".repeat(65)}).to_string()), 400, "invalid_value"),
        ("POST", "/admin/v1/deployments".into(), Some(json!({"id": "d\u{0}1"}).to_string()), 400, "invalid_value"),
        ("POST", "/admin/v1/deployments".into(), Some(format!("{{\"id\":\"{huge}\"}}")), 413, "payload_too_large"),
        ("POST", "/admin/v1/deployments".into(), Some(json!({"id": "d1", "reason": "r".repeat(2000)}).to_string()), 400, "invalid_value"),
        ("POST", "/admin/v1/deployments".into(), Some(json!({"id": "d1", "limits": {"context_window": 0}}).to_string()), 400, "missing_field"),
        ("GET", "/admin/v1/audit?cursor=-5".into(), None, 400, "invalid_value"),
        ("GET", "/admin/v1/audit?cursor=abc".into(), None, 400, "invalid_value"),
        ("GET", "/admin/v1/audit?limit=0".into(), None, 400, "invalid_value"),
        ("GET", "/admin/v1/audit?limit=99999999999".into(), None, 400, "invalid_value"),
        ("GET", "/admin/v1/audit?from=yesterday".into(), None, 400, "invalid_value"),
        ("GET", "/admin/v1/audit?nonsense=1".into(), None, 400, "invalid_value"),
        ("GET", "/admin/v1/deployments/nope".into(), None, 404, "not_found"),
        ("GET", "/admin/v1/deployments/nope/history".into(), None, 404, "not_found"),
        ("GET", "/admin/v1/rollouts/ro_nope".into(), None, 404, "not_found"),
        ("POST", "/admin/v1/rollouts/ro_nope/advance".into(), None, 404, "not_found"),
        ("POST", "/admin/v1/rollouts/ro_nope/explode".into(), None, 404, "not_found"),
        ("GET", format!("/admin/v1/requests/{}", "r".repeat(300)), None, 400, "invalid_value"),
        ("GET", "/admin/v1/requests/unknown-id".into(), None, 404, "not_found"),
        ("POST", format!("/admin/v1/deployments/{MODEL_ID}/rollouts"), Some(json!({"to_revision": "ghost"}).to_string()), 400, "invalid_value"),
        ("POST", format!("/admin/v1/deployments/{MODEL_ID}/rollouts"), Some(json!({"to_revision": "ghost", "steps": [50, 20]}).to_string()), 400, "invalid_value"),
        ("PUT", format!("/admin/v1/deployments/{MODEL_ID}/serving-revision"), Some(json!({"revision_id": "ghost"}).to_string()), 400, "invalid_value"),
        ("POST", format!("/admin/v1/deployments/{MODEL_ID}/revisions"), Some(json!({"model_uri": "/tmp/x.gguf", "model_sha256": "zz"}).to_string()), 400, "invalid_value"),
        ("POST", format!("/admin/v1/deployments/{MODEL_ID}/revisions"), Some(json!({"model_uri": "/etc/passwd", "model_sha256": "a".repeat(64)}).to_string()), 400, "invalid_value"),
        ("POST", "/admin/v1/deployments/ghost/revisions".into(), Some(json!({"model_uri": "/m.gguf", "model_sha256": "a".repeat(64)}).to_string()), 404, "not_found"),
        ("POST", format!("/admin/v1/deployments/{MODEL_ID}/revisions"), Some(json!({"model_uri": "/nonexistent/x.gguf", "model_sha256": "a".repeat(64)}).to_string()), 404, "revision_absent"),
        ("POST", "/admin/v1/executors/embedded-0/drain".into(), None, 400, "invalid_value"),
        ("POST", "/admin/v1/executors/ghost/drain".into(), Some(json!({"reason": "x"}).to_string()), 404, "not_found"),
        ("POST", "/admin/v1/capacity-profiles".into(), Some(json!({"deployment_id": MODEL_ID, "revision_id": "ghost", "workload": "chat", "envelope": {"concurrency": 1, "active_tokens": 1, "ttft_p95_ms": 1.0, "tpot_p95_ms": 1.0, "throughput_tok_s": 1.0, "prompt_tokens_p95": -3}}).to_string()), 400, "invalid_value"),
        ("POST", "/admin/v1/capacity-profiles".into(), Some(json!({"deployment_id": MODEL_ID, "revision_id": "ghost", "workload": "chat", "envelope": {"concurrency": 0, "active_tokens": 1, "ttft_p95_ms": 1.0, "tpot_p95_ms": 1.0, "throughput_tok_s": 1.0}}).to_string()), 400, "invalid_value"),
        ("POST", "/admin/v1/capacity-profiles".into(), Some(json!({"deployment_id": MODEL_ID, "revision_id": "ghost", "workload": "chat", "envelope": {"concurrency": 1, "active_tokens": 1, "ttft_p95_ms": 1.0, "tpot_p95_ms": 1.0, "throughput_tok_s": 1.0}}).to_string()), 400, "invalid_value"),
    ];
    for (m, p, b, status, code) in cases {
        let (st, v) = c.send(m, &p, Some(ADMIN), b.as_deref()).await;
        let shown = &p[..p.len().min(80)];
        assert_eq!(st, status, "{m} {shown}: {v}");
        assert_eq!(v["error"]["code"], code, "{m} {shown}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
        );
    }
    assert_eq!(
        c.event_count().await,
        before,
        "a refused write recorded something"
    );

    // A conflict: creating what exists is 409 and records nothing.
    let (st, v) = c
        .admin(
            "POST",
            "/admin/v1/deployments",
            Some(json!({"id": MODEL_ID})),
        )
        .await;
    assert_eq!(st, 409, "{v}");
    assert_eq!(v["error"]["code"], "conflict");
    assert_eq!(c.event_count().await, before);

    // A good write names the key as actor; the same surface reads it back.
    let (st, v) = c
        .admin(
            "POST",
            "/admin/v1/deployments",
            Some(json!({"id": "d1", "reason": "trial"})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["events"][0]["actor"], "ops-bob");
    assert_eq!(v["events"][0]["reason"], "trial");
    assert_eq!(v["data"]["deployment_id"], "d1");
    let (_, v) = c.admin("GET", "/admin/v1/audit?actor=ops-bob", None).await;
    assert_eq!(v["data"].as_array().unwrap().len(), 1);
    // A deployment with no revision cannot serve: typed 503, not a crash.
    let (st, v) = c
        .send(
            "POST",
            "/v1/chat/completions",
            Some(INFER),
            Some(
                &json!({"model": "d1", "messages": [{"role": "user", "content": "hi"}]})
                    .to_string(),
            ),
        )
        .await;
    assert_eq!(st, 503, "{v}");
    assert_eq!(v["error"]["code"], "not_ready");
    // Retired deployments are gone for clients.
    let (st, _) = c
        .admin("POST", "/admin/v1/deployments/d1/retire", None)
        .await;
    assert_eq!(st, 200);
    let (st, v) = c
        .send(
            "POST",
            "/v1/chat/completions",
            Some(INFER),
            Some(
                &json!({"model": "d1", "messages": [{"role": "user", "content": "hi"}]})
                    .to_string(),
            ),
        )
        .await;
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["error"]["code"], "model_not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_the_embedded_executor_drains_the_server_and_records_it() {
    let s = start().await;
    let c = C::new(&s);
    let (st, v) = c
        .admin(
            "POST",
            "/admin/v1/executors/embedded-0/drain",
            Some(json!({"reason": "node upgrade"})),
        )
        .await;
    assert_eq!(st, 202, "{v}");
    assert_eq!(v["data"]["status"], "draining");
    let store = s.state.control().unwrap().cp.clone();
    s.wait().await.unwrap();
    store.refresh().await.unwrap();
    let v = store.views().await;
    let x = &v.executors["embedded-0"];
    assert_eq!(
        x.status,
        stoker_controlplane::projection::ExecutorStatus::Drained
    );
}

/// Copies the tiny Llama directory of the executor's fixtures (written by
/// `scripts/make_hf_fixtures.py`) to a fresh folder.
fn llama_dir_copy(tag: &str) -> std::path::PathBuf {
    let src = stoker_test_support::repo_root().join("executor/tests/fixtures/hf/llama");
    assert!(
        src.join("config.json").is_file(),
        "missing {}: run .venv/bin/python scripts/make_hf_fixtures.py",
        src.display()
    );
    let dst = std::env::temp_dir().join(format!(
        "stoker-admin-hf-{tag}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dst).unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
    }
    dst
}

/// A Hugging Face directory registers as a revision under its manifest
/// digest; once one of its files changes, registering it under that digest
/// is refused with a message that says so, and nothing is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_revision_is_its_manifest_and_a_changed_file_is_refused() {
    let dir = llama_dir_copy("rev");
    let sha = stoker_executor::model::hf::HfArtifact::open(&dir)
        .unwrap()
        .manifest
        .sha256;
    let s = start().await;
    let c = C::new(&s);
    let path = format!("/admin/v1/deployments/{MODEL_ID}/revisions");
    let uri = format!("file://{}", dir.display());
    let (st, v) = c
        .admin(
            "POST",
            &path,
            Some(json!({"revision_id": "hf-a", "model_uri": uri, "model_sha256": sha})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["data"]["model_sha256"], sha.as_str(), "{v}");
    assert_eq!(v["data"]["precision"], "f32", "{v}");
    assert_eq!(
        v["data"]["tokenizer_hash"].as_str().map(str::len),
        Some(64),
        "{v}"
    );

    // One byte of one file changes: the digest no longer matches.
    let before = c.event_count().await;
    let cfg = dir.join("generation_config.json");
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push('\n');
    std::fs::write(&cfg, text).unwrap();
    let (st, v) = c
        .admin(
            "POST",
            &path,
            Some(json!({"revision_id": "hf-b", "model_uri": uri, "model_sha256": sha})),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"]["code"], "invalid_value", "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(&sha) && msg.contains("content changed"),
        "{msg}"
    );
    assert_eq!(
        c.event_count().await,
        before,
        "a refused registration recorded something"
    );

    // A directory that is not a model is refused, and names what is missing.
    std::fs::remove_file(dir.join("config.json")).unwrap();
    let (st, v) = c
        .admin(
            "POST",
            &path,
            Some(json!({"revision_id": "hf-c", "model_uri": uri, "model_sha256": sha})),
        )
        .await;
    assert_eq!(st, 400, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("config.json"),
        "{v}"
    );
    assert_eq!(c.event_count().await, before);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A model that cannot load ends the server with the load's error, never
/// with success: the HTTP server closing and the loader failing race, and
/// whichever the server's loop sees first, `wait` reports the failure (an
/// operator's supervisor restarts on a non-zero exit only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_cannot_load_ends_the_server_with_its_error() {
    let dir = std::env::temp_dir().join(format!(
        "stoker-not-a-model-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for _ in 0..12 {
        let mut c = config();
        c.model = dir.clone();
        let s = roles::start(c).await.unwrap();
        let err = s.wait().await.expect_err("the server ended with success");
        assert!(format!("{err:#}").contains("no config.json"), "{err:#}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
