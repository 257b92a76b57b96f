//! Every route against keys of each scope, a wrong key and none: 401 and 403
//! exactly where the route's scope says, in OpenAI's error shape; a refused
//! caller records nothing (no audit event, no file, no batch, no request-log
//! row); and a body cannot claim another tenant's identity.

use serde_json::{Value, json};
use stoker_api::auth::{ApiKeyConfig, Scope};

use super::{MODEL_ID, client, config, rt, start, url};

const INFER: &str = "sk-sec-infer-0001";
const BATCH: &str = "sk-sec-batch-0002";
const ADMIN: &str = "sk-sec-admin-0003";
const WRONG: &str = "sk-sec-wrong-0004";

/// The scope each route needs; `None`: open to the platform (probes,
/// metrics).
const ROUTES: &[(&str, &str, Option<Scope>)] = &[
    ("GET", "/health/live", None),
    ("GET", "/health/ready", None),
    ("GET", "/metrics", None),
    ("POST", "/v1/chat/completions", Some(Scope::Inference)),
    ("POST", "/v1/completions", Some(Scope::Inference)),
    ("GET", "/v1/models", Some(Scope::Inference)),
    ("GET", "/v1/models/{id}", Some(Scope::Inference)),
    ("POST", "/tokenize", Some(Scope::Inference)),
    ("POST", "/detokenize", Some(Scope::Inference)),
    ("GET", "/v1/files", Some(Scope::Batch)),
    ("POST", "/v1/files", Some(Scope::Batch)),
    ("GET", "/v1/files/{id}", Some(Scope::Batch)),
    ("DELETE", "/v1/files/{id}", Some(Scope::Batch)),
    ("GET", "/v1/files/{id}/content", Some(Scope::Batch)),
    ("GET", "/v1/batches", Some(Scope::Batch)),
    ("POST", "/v1/batches", Some(Scope::Batch)),
    ("GET", "/v1/batches/{id}", Some(Scope::Batch)),
    ("POST", "/v1/batches/{id}/cancel", Some(Scope::Batch)),
    ("GET", "/admin/v1/deployments", Some(Scope::Admin)),
    ("POST", "/admin/v1/deployments", Some(Scope::Admin)),
    ("GET", "/admin/v1/deployments/{id}", Some(Scope::Admin)),
    (
        "PUT",
        "/admin/v1/deployments/{id}/limits",
        Some(Scope::Admin),
    ),
    (
        "POST",
        "/admin/v1/deployments/{id}/retire",
        Some(Scope::Admin),
    ),
    (
        "PUT",
        "/admin/v1/deployments/{id}/serving-revision",
        Some(Scope::Admin),
    ),
    (
        "GET",
        "/admin/v1/deployments/{id}/history",
        Some(Scope::Admin),
    ),
    (
        "GET",
        "/admin/v1/deployments/{id}/revisions",
        Some(Scope::Admin),
    ),
    (
        "POST",
        "/admin/v1/deployments/{id}/revisions",
        Some(Scope::Admin),
    ),
    (
        "GET",
        "/admin/v1/deployments/{id}/traffic",
        Some(Scope::Admin),
    ),
    (
        "POST",
        "/admin/v1/deployments/{id}/rollouts",
        Some(Scope::Admin),
    ),
    ("GET", "/admin/v1/rollouts", Some(Scope::Admin)),
    ("GET", "/admin/v1/rollouts/{id}", Some(Scope::Admin)),
    ("POST", "/admin/v1/rollouts/{id}/pause", Some(Scope::Admin)),
    ("GET", "/admin/v1/capacity-profiles", Some(Scope::Admin)),
    ("POST", "/admin/v1/capacity-profiles", Some(Scope::Admin)),
    ("GET", "/admin/v1/admission", Some(Scope::Admin)),
    ("GET", "/admin/v1/executors", Some(Scope::Admin)),
    ("POST", "/admin/v1/executors/{id}/drain", Some(Scope::Admin)),
    ("GET", "/admin/v1/audit", Some(Scope::Admin)),
    ("GET", "/admin/v1/requests/{id}", Some(Scope::Admin)),
    ("POST", "/admin/v1/projections/rebuild", Some(Scope::Admin)),
    ("GET", "/admin/v1/tenants", Some(Scope::Admin)),
    ("POST", "/admin/v1/tenants", Some(Scope::Admin)),
    ("GET", "/admin/v1/tenants/{id}", Some(Scope::Admin)),
    ("PUT", "/admin/v1/tenants/{id}/quota", Some(Scope::Admin)),
    ("GET", "/admin/v1/keys", Some(Scope::Admin)),
    ("POST", "/admin/v1/keys", Some(Scope::Admin)),
    ("POST", "/admin/v1/keys/{id}/revoke", Some(Scope::Admin)),
];

/// Whether the OpenAPI document lists `status` for the route (routes it
/// leaves out, the admin API, count as listed).
fn documented(method: &str, path: &str, status: u16) -> bool {
    let doc: Value = serde_json::from_str(include_str!("../../../schemas/openapi.json")).unwrap();
    let op = &doc["paths"][path][method.to_lowercase()];
    op.is_null() || op["responses"].get(status.to_string()).is_some()
}

fn key(name: &str, key: &str, tenant: &str, scope: Scope) -> ApiKeyConfig {
    ApiKeyConfig {
        name: Some(name.into()),
        key: key.into(),
        tenant: tenant.into(),
        scopes: vec![scope],
    }
}

/// A body a refused caller would use to change something, were it let in.
fn body_for(path: &str) -> Value {
    match path {
        "/v1/chat/completions" => json!({"model": MODEL_ID, "max_tokens": 1,
            "messages": [{"role": "user", "content": "hi"}]}),
        "/v1/completions" => json!({"model": MODEL_ID, "max_tokens": 1, "prompt": "hi"}),
        "/admin/v1/deployments" => json!({"id": "intruder", "model": MODEL_ID}),
        _ => json!({}),
    }
}

async fn call(base: &str, method: &str, path: &str, key: Option<&str>) -> (u16, Value, String) {
    let path = path.replace("{id}", "x");
    let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut r = client().request(m.clone(), format!("{base}{path}"));
    if let Some(k) = key {
        r = r.bearer_auth(k);
    }
    if path == "/v1/files" && m == reqwest::Method::POST {
        let form = reqwest::multipart::Form::new()
            .text("purpose", "batch")
            .part(
                "file",
                reqwest::multipart::Part::bytes(b"{}".to_vec()).file_name("x.jsonl"),
            );
        r = r.multipart(form);
    } else if m == reqwest::Method::POST || m == reqwest::Method::PUT {
        r = r.json(&body_for(&path));
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let id = resp
        .headers()
        .get("x-request-id")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        id,
    )
}

async fn audit_len(base: &str) -> usize {
    let (s, v, _) = call(base, "GET", "/admin/v1/audit?limit=1000", Some(ADMIN)).await;
    assert_eq!(s, 200, "{v}");
    v["data"].as_array().map_or(0, Vec::len)
}

#[test]
fn every_route_answers_each_scope_as_it_should_and_a_refusal_records_nothing() {
    let mut c = config();
    c.api_keys = vec![
        key("infer", INFER, "acme", Scope::Inference),
        key("batch", BATCH, "acme", Scope::Batch),
        key("ops", ADMIN, "ops", Scope::Admin),
    ];
    rt().block_on(async {
        let s = start(c).await;
        let base = url(&s, "");
        let audit_before = audit_len(&base).await;
        let mut refused_ids = Vec::new();
        // Refusals first, then what the right key may do.
        for (method, path, need) in ROUTES {
            for (k, held) in [
                (None, None),
                (Some(WRONG), None),
                (Some(INFER), Some(Scope::Inference)),
                (Some(BATCH), Some(Scope::Batch)),
                (Some(ADMIN), Some(Scope::Admin)),
            ] {
                let Some(need) = need else {
                    let (status, _, _) = call(&base, method, path, k).await;
                    assert_eq!(status, 200, "{method} {path} with {k:?}");
                    continue;
                };
                if held == Some(*need) {
                    continue;
                }
                let (status, v, id) = call(&base, method, path, k).await;
                let (want, code) = if k.is_none() || k == Some(WRONG) {
                    (401, "invalid_api_key")
                } else {
                    (403, "insufficient_scope")
                };
                assert_eq!(status, want, "{method} {path} with {k:?}: {v}");
                assert_eq!(v["error"]["code"], code, "{method} {path} with {k:?}: {v}");
                assert!(v["error"]["message"].is_string() && v["error"]["type"].is_string());
                assert!(
                    documented(method, path, want),
                    "{method} {path} answers {want}, which schemas/openapi.json does not list"
                );
                if path.starts_with("/v1/") && path.contains("completions") {
                    refused_ids.push(id);
                }
            }
        }
        // Nothing the refused callers sent was recorded.
        assert_eq!(
            audit_len(&base).await,
            audit_before,
            "audit events after refusals"
        );
        for (path, field) in [("/v1/files", "data"), ("/v1/batches", "data")] {
            let (st, v, _) = call(&base, "GET", path, Some(BATCH)).await;
            assert_eq!(st, 200, "{v}");
            assert_eq!(v[field].as_array().map(Vec::len), Some(0), "{path}: {v}");
        }
        assert!(!refused_ids.is_empty());
        for id in &refused_ids {
            let (st, v, _) = call(
                &base,
                "GET",
                &format!("/admin/v1/requests/{id}"),
                Some(ADMIN),
            )
            .await;
            assert_eq!(st, 404, "a refused request left a row: {v}");
        }
        // The right key is let through (what it sent may still be invalid).
        for (method, path, need) in ROUTES {
            let Some(need) = need else { continue };
            let k = match need {
                Scope::Inference => INFER,
                Scope::Batch => BATCH,
                Scope::Admin => ADMIN,
            };
            let (status, v, _) = call(&base, method, path, Some(k)).await;
            assert!(
                status != 401 && status != 403 && status < 500,
                "{method} {path} with its scope: {status} {v}"
            );
        }
        // A body cannot claim another tenant: the key's tenant is recorded.
        let r = client()
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(INFER)
            .json(
                &json!({"model": MODEL_ID, "max_tokens": 1, "user": "ops", "tenant": "ops",
                          "messages": [{"role": "user", "content": "hi"}]}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
        let (st, row, _) = call(
            &base,
            "GET",
            &format!("/admin/v1/requests/{id}"),
            Some(ADMIN),
        )
        .await;
        assert_eq!(st, 200, "{row}");
        assert_eq!(row["tenant"], "acme", "{row}");
        s.begin_shutdown();
        s.wait().await.unwrap();
    });
}
