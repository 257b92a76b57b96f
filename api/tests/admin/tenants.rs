//! Tenants, keys and quotas over HTTP, in process: the lifecycle of an
//! issued key (its secret shown once, its revocation effective at once),
//! what the audit trail and the request log record, quota refusals with
//! `Retry-After` and their refill, and hostile input on every new route.

use serde_json::{Value, json};

use super::{ADMIN, C, INFER, start};

impl C {
    /// A raw call, for headers.
    async fn raw(
        &self,
        method: reqwest::Method,
        path: &str,
        key: &str,
        body: Option<Value>,
    ) -> reqwest::Response {
        let mut r = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(key);
        if let Some(b) = body {
            r = r.json(&b);
        }
        r.send().await.unwrap()
    }

    /// A chat that generates exactly `max_tokens` (`min_tokens` holds the
    /// end of sequence back), so it uses its whole reservation.
    async fn chat(&self, key: &str, max_tokens: u32) -> reqwest::Response {
        self.raw(
            reqwest::Method::POST,
            "/v1/chat/completions",
            key,
            Some(json!({
                "model": super::MODEL_ID,
                "messages": [{"role": "user", "content": "Say hi."}],
                "max_tokens": max_tokens,
                "min_tokens": max_tokens,
                "temperature": 0
            })),
        )
        .await
    }

    async fn tenant(&self, id: &str) {
        let (st, v) = self
            .admin(
                "POST",
                "/admin/v1/tenants",
                Some(json!({"tenant_id": id, "reason": "onboarding"})),
            )
            .await;
        assert_eq!(st, 201, "{v}");
    }

    async fn key(&self, tenant: &str, scopes: Value) -> (String, String) {
        let (st, v) = self
            .admin(
                "POST",
                "/admin/v1/keys",
                Some(
                    json!({"tenant_id": tenant, "name": format!("{tenant}-app"), "scopes": scopes}),
                ),
            )
            .await;
        assert_eq!(st, 201, "{v}");
        (
            v["data"]["key_id"].as_str().unwrap().to_owned(),
            v["data"]["secret"].as_str().unwrap().to_owned(),
        )
    }

    async fn quota(&self, tenant: &str, quota: Value) {
        let (st, v) = self
            .admin(
                "PUT",
                &format!("/admin/v1/tenants/{tenant}/quota"),
                Some(json!({"quota": quota, "reason": "plan change"})),
            )
            .await;
        assert_eq!(st, 200, "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issued_key_works_until_revoked_and_the_audit_names_who_did_what() {
    let s = start().await;
    let c = C::new(&s);
    c.tenant("acme").await;
    let (st, v) = c
        .admin(
            "POST",
            "/admin/v1/keys",
            Some(json!({"tenant_id": "acme", "name": "acme-prod", "scopes": ["inference"], "reason": "launch"})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let secret = v["data"]["secret"].as_str().unwrap().to_owned();
    let key_id = v["data"]["key_id"].as_str().unwrap().to_owned();
    assert!(secret.starts_with(&format!("stk_{key_id}_")), "{secret}");
    assert_eq!(v["data"]["status"], "active");
    assert_eq!(v["events"][0]["event_type"], "ApiKeyIssued");
    let payload = v["events"][0]["payload"].to_string();
    let secret_part = secret.rsplit('_').next().unwrap();
    assert!(
        !payload.contains(secret_part),
        "the event holds the secret: {payload}"
    );

    // The key serves inference as its tenant, and the request log says so.
    let r = c.chat(&secret, 2).await;
    assert_eq!(r.status(), 200);
    let rid = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    // The request log's writer is asynchronous.
    let mut row = Value::Null;
    for _ in 0..50 {
        let (st, v) = c
            .admin("GET", &format!("/admin/v1/requests/{rid}"), None)
            .await;
        if st == 200 {
            row = v;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(row["tenant"], "acme", "{row}");
    // Its scope is inference only.
    let r = c
        .raw(reqwest::Method::GET, "/admin/v1/tenants", &secret, None)
        .await;
    assert_eq!(r.status(), 403);

    // Listing never shows a secret, salt or digest.
    let (_, keys) = c.admin("GET", "/admin/v1/keys?tenant=acme", None).await;
    let text = keys.to_string();
    assert!(!text.contains(secret_part) && !text.contains("salt") && !text.contains("sha256"));
    assert_eq!(keys["data"][0]["prefix"], format!("stk_{key_id}"));

    // Revocation needs a reason, then stops the key at once.
    let (st, v) = c
        .admin(
            "POST",
            &format!("/admin/v1/keys/{key_id}/revoke"),
            Some(json!({})),
        )
        .await;
    assert_eq!(
        (st, v["error"]["code"].as_str()),
        (400, Some("invalid_value")),
        "{v}"
    );
    let (st, v) = c
        .admin(
            "POST",
            &format!("/admin/v1/keys/{key_id}/revoke"),
            Some(json!({"reason": "leaked in a CI log"})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["data"]["status"], "revoked");
    assert_eq!(v["data"]["revoked_by"], "ops-bob");
    let r = c.chat(&secret, 2).await;
    assert_eq!(r.status(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key");
    let (st, _) = c
        .admin(
            "POST",
            &format!("/admin/v1/keys/{key_id}/revoke"),
            Some(json!({"reason": "twice"})),
        )
        .await;
    assert_eq!(st, 409);

    let (_, audit) = c.admin("GET", "/admin/v1/audit?limit=1000", None).await;
    let tenant_events: Vec<(String, String, Value)> = audit["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["stream_type"] == "tenant")
        .map(|e| {
            (
                e["event_type"].as_str().unwrap().to_owned(),
                e["actor"].as_str().unwrap().to_owned(),
                e["reason"].clone(),
            )
        })
        .collect();
    assert_eq!(
        tenant_events,
        vec![
            (
                "TenantCreated".into(),
                "ops-bob".into(),
                json!("onboarding")
            ),
            ("ApiKeyIssued".into(), "ops-bob".into(), json!("launch")),
            (
                "ApiKeyRevoked".into(),
                "ops-bob".into(),
                json!("leaked in a CI log")
            ),
        ]
    );
    let (_, t) = c.admin("GET", "/admin/v1/tenants/acme", None).await;
    assert_eq!(t["keys_active"], 0, "{t}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_refuse_with_retry_after_and_leave_other_tenants_alone() {
    let s = start().await;
    let c = C::new(&s);
    c.tenant("small").await;
    let (_, small) = c.key("small", json!(["inference"])).await;
    // About 20 prompt tokens plus 100: two requests fit in 300, a third not.
    c.quota(
        "small",
        json!({"tokens_per_minute": 300, "max_concurrent_requests": 4}),
    )
    .await;
    let mut codes = Vec::new();
    let mut refusal = None;
    for _ in 0..4 {
        let r = c.chat(&small, 100).await;
        codes.push(r.status().as_u16());
        if r.status() == 429 {
            let retry: u64 = r.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            let body: Value = r.json().await.unwrap();
            refusal = Some((retry, body));
            break;
        }
    }
    let (retry, body) = refusal.unwrap_or_else(|| panic!("never refused: {codes:?}"));
    assert_eq!(body["error"]["code"], "tenant_quota_exceeded", "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("tokens_per_minute") && msg.contains("small"),
        "{msg}"
    );
    // What is missing refills at 5 tokens a second.
    assert!((1..=60).contains(&retry), "{retry}");
    // The config file's tenant has no quota: unaffected.
    assert_eq!(c.chat(INFER, 4).await.status(), 200);
    // Usage shows the reservation and what the bucket holds.
    let (_, t) = c.admin("GET", "/admin/v1/tenants/small", None).await;
    assert_eq!(t["quota"]["tokens_per_minute"], 300, "{t}");
    assert!(
        t["usage"]["tokens_available"].as_u64().unwrap() < 120,
        "{t}"
    );
    // Metrics carry the tenant's own label, since it has a quota.
    let m = c
        .http
        .get(format!("{}/metrics", c.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        m.contains(
            "stoker_tenant_quota_refusals_total{tenant=\"small\",quota=\"tokens_per_minute\"} 1"
        ),
        "{m}"
    );
    assert!(m.trim_end().ends_with("# EOF"), "{m}");
    // Raising the quota takes effect at once.
    c.quota("small", json!({"tokens_per_minute": 100000})).await;
    assert_eq!(c.chat(&small, 100).await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_concurrency_quota_counts_streams_in_flight() {
    let s = start().await;
    let c = C::new(&s);
    c.tenant("solo").await;
    let (_, key) = c.key("solo", json!(["inference"])).await;
    c.quota("solo", json!({"max_concurrent_requests": 1})).await;
    let stream = c
        .raw(
            reqwest::Method::POST,
            "/v1/chat/completions",
            &key,
            Some(json!({
                "model": super::MODEL_ID,
                "messages": [{"role": "user", "content": "Count to fifty."}],
                "max_tokens": 200, "stream": true, "temperature": 0
            })),
        )
        .await;
    assert_eq!(stream.status(), 200);
    let r = c.chat(&key, 2).await;
    assert_eq!(r.status(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_concurrent_requests"),
        "{body}"
    );
    // Once the stream ends the slot comes back.
    drop(stream.text().await.unwrap());
    let mut ok = false;
    for _ in 0..50 {
        if c.chat(&key, 2).await.status() == 200 {
            ok = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(ok, "the slot never came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_on_the_tenant_routes_is_refused_and_records_nothing() {
    let s = start().await;
    let c = C::new(&s);
    c.tenant("acme").await;
    let before = c.event_count().await;
    let long = "x".repeat(65);
    let cases: Vec<(&str, String, Option<Value>, u16)> = vec![
        (
            "POST",
            "/admin/v1/tenants".into(),
            Some(json!({"tenant_id": "../etc"})),
            400,
        ),
        (
            "POST",
            "/admin/v1/tenants".into(),
            Some(json!({"tenant_id": long})),
            400,
        ),
        (
            "POST",
            "/admin/v1/tenants".into(),
            Some(json!({"tenant_id": "é"})),
            400,
        ),
        (
            "POST",
            "/admin/v1/tenants".into(),
            Some(json!({"tenant_id": "ok", "extra": 1})),
            400,
        ),
        (
            "POST",
            "/admin/v1/tenants".into(),
            Some(json!({"tenant_id": 7})),
            400,
        ),
        (
            "POST",
            "/admin/v1/tenants".into(),
            Some(json!({"tenant_id": "ok", "display_name": "a\u{0}b"})),
            400,
        ),
        (
            "POST",
            "/admin/v1/tenants".into(),
            Some(json!({"tenant_id": "acme"})),
            409,
        ),
        (
            "POST",
            "/admin/v1/tenants".into(),
            Some(json!({"tenant_id": "ok", "reason": "r".repeat(2000)})),
            400,
        ),
        ("GET", "/admin/v1/tenants/nobody".into(), None, 404),
        ("GET", "/admin/v1/tenants/..%2F..".into(), None, 404),
        (
            "PUT",
            "/admin/v1/tenants/nobody/quota".into(),
            Some(json!({"quota": {}})),
            404,
        ),
        (
            "PUT",
            "/admin/v1/tenants/acme/quota".into(),
            Some(json!({"quota": {"weight": 0}})),
            400,
        ),
        (
            "PUT",
            "/admin/v1/tenants/acme/quota".into(),
            Some(json!({"quota": {"weight": 1001}})),
            400,
        ),
        (
            "PUT",
            "/admin/v1/tenants/acme/quota".into(),
            Some(json!({"quota": {"tokens_per_minute": 0}})),
            400,
        ),
        (
            "PUT",
            "/admin/v1/tenants/acme/quota".into(),
            Some(json!({"quota": {"tokens_per_minute": -5}})),
            400,
        ),
        (
            "PUT",
            "/admin/v1/tenants/acme/quota".into(),
            Some(json!({"quota": {"max_gpus": 3}})),
            400,
        ),
        (
            "PUT",
            "/admin/v1/tenants/acme/quota".into(),
            Some(json!({"weight": 3})),
            400,
        ),
        (
            "POST",
            "/admin/v1/keys".into(),
            Some(json!({"tenant_id": "acme", "name": "a", "scopes": ["root"]})),
            400,
        ),
        (
            "POST",
            "/admin/v1/keys".into(),
            Some(json!({"tenant_id": "acme", "name": "a", "scopes": []})),
            400,
        ),
        (
            "POST",
            "/admin/v1/keys".into(),
            Some(json!({"tenant_id": "acme", "name": "", "scopes": ["batch"]})),
            400,
        ),
        (
            "POST",
            "/admin/v1/keys".into(),
            Some(json!({"tenant_id": "acme", "name": "n".repeat(100), "scopes": ["batch"]})),
            400,
        ),
        (
            "POST",
            "/admin/v1/keys".into(),
            Some(json!({"tenant_id": "acme", "name": "a\nb", "scopes": ["batch"]})),
            400,
        ),
        (
            "POST",
            "/admin/v1/keys".into(),
            Some(json!({"tenant_id": "nobody", "name": "a", "scopes": ["batch"]})),
            404,
        ),
        (
            "POST",
            "/admin/v1/keys".into(),
            Some(json!({"tenant_id": "acme", "name": "a", "scopes": vec!["batch"; 9]})),
            400,
        ),
        (
            "POST",
            "/admin/v1/keys/k0000000000000000/revoke".into(),
            Some(json!({"reason": "x"})),
            404,
        ),
        (
            "POST",
            "/admin/v1/keys/not-a-key/revoke".into(),
            Some(json!({"reason": "x"})),
            404,
        ),
        ("GET", "/admin/v1/keys?tenant=acme&x=1".into(), None, 400),
    ];
    for (method, path, body, want) in cases {
        let (st, v) = c.admin(method, &path, body.clone()).await;
        assert_eq!(st, want, "{method} {path} {body:?}: {v}");
        assert!(v["error"]["message"].as_str().is_some(), "{v}");
    }
    // Malformed JSON and wrong credentials.
    let (st, _) = c
        .send(
            "POST",
            "/admin/v1/tenants",
            Some(ADMIN),
            Some("{\"tenant_id\":"),
        )
        .await;
    assert_eq!(st, 400);
    let (st, _) = c.send("GET", "/admin/v1/tenants", Some(INFER), None).await;
    assert_eq!(st, 403);
    let (st, _) = c.send("GET", "/admin/v1/keys", None, None).await;
    assert_eq!(st, 401);
    // Forged keys in the issued format are refused without a panic.
    for forged in [
        "stk_k0000000000000000_00",
        "stk_k_",
        "stk_../x_y",
        &format!("stk_k{}_{}", "0".repeat(60), "f".repeat(5000)),
    ] {
        let (st, v) = c.send("GET", "/v1/models", Some(forged), None).await;
        assert_eq!(st, 401, "{forged}: {v}");
    }
    assert_eq!(
        c.event_count().await,
        before,
        "a refused write recorded events"
    );
}
