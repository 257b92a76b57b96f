//! The control plane end to end, through HTTP on the real binary and model: a
//! deployment with two revisions, a 25 % canary, 200 chat requests split by
//! user, the request log, a rollback, the audit trail with actors and reasons,
//! and all of it read back after a restart.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};
use stoker_controlplane::routing::{RolloutRoute, route};

use crate::harness::{
    HERMES_TOOL_TEMPLATE, Server, ServerOptions, fresh_dir, hermes_tool_template, http,
};

const OPS_KEY: &str = "sk-ops-alice-0001";
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

[control]
rollout_controller_interval_ms = 0
"#;

struct Admin<'a> {
    server: &'a Server,
    client: reqwest::Client,
}

impl<'a> Admin<'a> {
    fn new(server: &'a Server) -> Self {
        Admin {
            server,
            client: http(),
        }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>, key: &str) -> (u16, Value) {
        let url = self.server.url(path);
        let req = match method {
            "GET" => self.client.get(url),
            "POST" => self.client.post(url),
            "PUT" => self.client.put(url),
            m => panic!("method {m}"),
        };
        let req = req.bearer_auth(key);
        let req = match body {
            Some(b) => req.json(&b),
            None => req,
        };
        let resp = req.send().await.expect("admin call");
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        (status, v)
    }

    async fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (s, v) = self.call(method, path, body, OPS_KEY).await;
        assert!(
            (200..300).contains(&s),
            "{method} {path} answered {s}: {v}\n{}",
            self.server.stderr_tail(3000)
        );
        v
    }

    /// `GET /admin/v1/deployments/{id}`.
    async fn deployment(&self, id: &str) -> Value {
        self.ok("GET", &format!("/admin/v1/deployments/{id}"), None)
            .await
    }

    /// Every audit event of a deployment, following cursors with small pages.
    async fn audit(&self, deployment: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/admin/v1/audit?deployment={deployment}&limit=2");
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let page = self.ok("GET", &path, None).await;
            out.extend(page["data"].as_array().unwrap().iter().cloned());
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        out
    }
}

/// (event type, actor, reason) of each event.
fn trail(events: &[Value]) -> Vec<(String, String, Option<String>)> {
    events
        .iter()
        .map(|e| {
            (
                e["event_type"].as_str().unwrap().to_owned(),
                e["actor"].as_str().unwrap().to_owned(),
                e["reason"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

async fn chat(client: &reqwest::Client, server: &Server, user: &str) -> (String, String, Value) {
    let resp = client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(APP_KEY)
        .json(&json!({
            "model": "canary",
            "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 1,
            "user": user,
        }))
        .send()
        .await
        .expect("chat request");
    if resp.status() != 200 {
        let status = resp.status();
        panic!(
            "chat for {user}: {status} {}",
            resp.text().await.unwrap_or_default()
        );
    }
    let h = |k: &str| {
        resp.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let revision = h("x-stoker-revision");
    let request_id = h("x-request-id");
    let body: Value = resp.json().await.expect("chat body");
    (revision, request_id, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn canary_split_request_log_rollback_and_audit_survive_a_restart() {
    let data = fresh_dir("control-data");
    let opts = || ServerOptions::default().config(KEYS).data_dir(data.path());
    let server = Server::start("control", opts()).await;
    let admin = Admin::new(&server);

    // The primary model's hash, as the server reports it.
    let models = admin.ok("GET", "/v1/models", None).await;
    let sha = models["data"][0]["sha256"].as_str().unwrap().to_owned();
    let uri = format!("file://{}", crate::harness::model_path().display());

    // A write without the admin scope is 403 and records nothing.
    let before = admin.audit("canary").await;
    let (s, v) = admin
        .call(
            "POST",
            "/admin/v1/deployments",
            Some(json!({"id": "canary"})),
            APP_KEY,
        )
        .await;
    assert_eq!(s, 403, "{v}");
    assert_eq!(v["error"]["code"], "insufficient_scope");
    assert_eq!(admin.audit("canary").await.len(), before.len());
    assert!(before.is_empty());

    admin
        .ok(
            "POST",
            "/admin/v1/deployments",
            Some(json!({"id": "canary", "reason": "new chat product"})),
        )
        .await;
    for rev in ["a", "b"] {
        let v = admin
            .ok(
                "POST",
                "/admin/v1/deployments/canary/revisions",
                Some(
                    json!({"revision_id": rev, "model_uri": uri, "model_sha256": sha,
                            "reason": format!("candidate {rev}")}),
                ),
            )
            .await;
        assert_eq!(v["data"]["model_sha256"], sha.as_str());
        assert_eq!(v["data"]["registered_by"], "ops-alice");
    }
    // A revision whose artifact hash does not match is refused and recorded nowhere.
    let (s, v) = admin
        .call(
            "POST",
            "/admin/v1/deployments/canary/revisions",
            Some(json!({"revision_id": "bad", "model_uri": uri, "model_sha256": "0".repeat(64)})),
            OPS_KEY,
        )
        .await;
    assert_eq!(s, 400, "{v}");
    let (s, v) = admin
        .call(
            "POST",
            "/admin/v1/deployments/canary/revisions",
            Some(
                json!({"revision_id": "gone", "model_uri": "file:///nonexistent/m.gguf",
                        "model_sha256": sha}),
            ),
            OPS_KEY,
        )
        .await;
    assert_eq!(s, 404, "{v}");
    assert_eq!(v["error"]["code"], "revision_absent");

    let started = admin
        .ok(
            "POST",
            "/admin/v1/deployments/canary/rollouts",
            Some(json!({"to_revision": "b", "steps": [25, 50, 100], "reason": "canary b at 25%"})),
        )
        .await;
    let rollout_id = started["data"]["rollout_id"].as_str().unwrap().to_owned();
    assert_eq!(started["data"]["percent"], 25);
    // One active rollout per deployment.
    let (s, v) = admin
        .call(
            "POST",
            "/admin/v1/deployments/canary/rollouts",
            Some(json!({"to_revision": "b"})),
            OPS_KEY,
        )
        .await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["error"]["code"], "conflict");

    // 200 users, 8 at a time: each lands where the stable hash says.
    let client = http();
    let mut served: BTreeMap<String, (String, String)> = BTreeMap::new();
    let users: Vec<String> = (0..200).map(|i| format!("user-{i:03}")).collect();
    for group in users.chunks(8) {
        let calls = group.iter().map(|u| {
            let client = client.clone();
            let server = &server;
            async move {
                let (rev, rid, body) = chat(&client, server, u).await;
                assert_eq!(body["system_fingerprint"], format!("fp_{rev}"));
                assert_eq!(body["model"], "canary");
                (u.clone(), rev, rid)
            }
        });
        for (u, rev, rid) in futures_util::future::join_all(calls).await {
            served.insert(u, (rev, rid));
        }
    }
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (user, (rev, _)) in &served {
        let want = route(
            "canary",
            "a",
            Some(RolloutRoute {
                rollout_id: &rollout_id,
                to_revision: "b",
                percent: 25,
            }),
            user,
        );
        assert_eq!(rev, want, "user {user} went to {rev}, the hash says {want}");
        *counts.entry(rev.as_str()).or_default() += 1;
    }
    let on_b = counts.get("b").copied().unwrap_or(0);
    assert!(
        (30..=70).contains(&on_b),
        "25 % of 200 users should be near 50 on b, got {counts:?}"
    );
    // Sticky: the same users land on the same revision again.
    for user in users.iter().take(20) {
        let (rev, _, _) = chat(&client, &server, user).await;
        assert_eq!(rev, served[user].0, "user {user} moved");
    }

    // The request log knows which revision and executor served each request.
    for user in users.iter().take(5) {
        let (rev, rid) = &served[user];
        let row = admin
            .ok("GET", &format!("/admin/v1/requests/{rid}"), None)
            .await;
        assert_eq!(row["revision_id"], rev.as_str(), "{row}");
        assert_eq!(row["deployment_id"], "canary");
        assert_eq!(row["tenant"], "acme");
        assert_eq!(row["rollout_id"], rollout_id.as_str());
        assert_eq!(row["status_code"], 200);
        assert_eq!(row["finish_reason"], "length");
        assert_eq!(row["completion_tokens"], 1);
        assert!(row["ttft_ms"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row.get("prompt").is_none() && row.get("text").is_none());
    }
    let traffic = admin
        .ok("GET", "/admin/v1/deployments/canary/traffic", None)
        .await;
    let logged: HashMap<String, u64> = traffic["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["revision_id"].as_str().unwrap().to_owned(),
                r["requests"].as_u64().unwrap(),
            )
        })
        .collect();
    let sticky_b = users
        .iter()
        .take(20)
        .filter(|u| served[*u].0 == "b")
        .count();
    assert_eq!(
        logged.get("b").copied().unwrap_or(0) as usize,
        on_b + sticky_b,
        "{traffic}"
    );
    assert_eq!(logged.values().sum::<u64>(), 220, "{traffic}");

    // Roll back: a reason is required; then everyone is on a.
    let (s, v) = admin
        .call(
            "POST",
            &format!("/admin/v1/rollouts/{rollout_id}/rollback"),
            None,
            OPS_KEY,
        )
        .await;
    assert_eq!(s, 400, "{v}");
    admin
        .ok(
            "POST",
            &format!("/admin/v1/rollouts/{rollout_id}/rollback"),
            Some(json!({"reason": "ttft regression on b"})),
        )
        .await;
    for user in served
        .iter()
        .filter(|(_, (r, _))| r == "b")
        .map(|(u, _)| u)
        .take(5)
    {
        let (rev, _, _) = chat(&client, &server, user).await;
        assert_eq!(rev, "a", "after the rollback {user} must be on a");
    }

    let want = vec![
        ("DeploymentCreated", "ops-alice", Some("new chat product")),
        ("RevisionRegistered", "ops-alice", Some("candidate a")),
        (
            "ServingRevisionSet",
            "ops-alice",
            Some("first revision of the deployment"),
        ),
        ("RevisionRegistered", "ops-alice", Some("candidate b")),
        ("RolloutStarted", "ops-alice", Some("canary b at 25%")),
        (
            "RolloutRolledBack",
            "ops-alice",
            Some("ttft regression on b"),
        ),
    ];
    let want: Vec<(String, String, Option<String>)> = want
        .into_iter()
        .map(|(t, a, r)| (t.into(), a.into(), r.map(str::to_owned)))
        .collect();
    let events = admin.audit("canary").await;
    assert_eq!(trail(&events), want);
    let positions: Vec<i64> = events
        .iter()
        .map(|e| e["position"].as_i64().unwrap())
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    let history = admin
        .ok(
            "GET",
            "/admin/v1/deployments/canary/history?limit=100",
            None,
        )
        .await;
    assert_eq!(history["data"].as_array().unwrap(), &events);
    let rolled_back = admin
        .ok(
            "GET",
            "/admin/v1/audit?deployment=canary&event_type=RolloutRolledBack",
            None,
        )
        .await;
    assert_eq!(rolled_back["data"].as_array().unwrap().len(), 1);
    let by_app = admin
        .ok("GET", "/admin/v1/audit?actor=acme-app", None)
        .await;
    assert!(by_app["data"].as_array().unwrap().is_empty());
    let rid = served[&users[0]].1.clone();
    let row_before = admin
        .ok("GET", &format!("/admin/v1/requests/{rid}"), None)
        .await;

    // Restart on the same data dir: everything reads back the same.
    drop(admin);
    drop(server);
    let server = Server::start("control-restart", opts()).await;
    let admin = Admin::new(&server);
    assert_eq!(admin.audit("canary").await, events);
    let d = admin.ok("GET", "/admin/v1/deployments/canary", None).await;
    assert_eq!(d["serving_revision"], "a");
    assert!(
        d["active_rollout"].is_null() && d["rollout"].is_null(),
        "{d}"
    );
    assert_eq!(d["revisions"].as_array().unwrap().len(), 2);
    let r = admin
        .ok("GET", &format!("/admin/v1/rollouts/{rollout_id}"), None)
        .await;
    assert_eq!(r["status"], "rolled_back");
    assert_eq!(r["last_reason"], "ttft regression on b");
    let row_after = admin
        .ok("GET", &format!("/admin/v1/requests/{rid}"), None)
        .await;
    assert_eq!(row_after, row_before);
    let (rev, _, _) = chat(&client, &server, "user-after-restart").await;
    assert_eq!(rev, "a");
    // The rebuilt read models equal the live ones.
    let report = admin
        .ok("POST", "/admin/v1/projections/rebuild", None)
        .await;
    assert_eq!(report["unchanged"], true, "{report}");

    // The same surface from the command line.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(crate::harness::stoker_bin())
            .args(["admin", "--url", &server.base, "--api-key", OPS_KEY])
            .args(args)
            .output()
            .expect("run stoker admin");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, err) = cli(&["--json", "audit", "--deployment", "canary"]);
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(v["data"].as_array().unwrap(), &events);
    let (code, out, err) = cli(&["rollouts", "list", "--deployment", "canary"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("ROLLOUT"), "{out}");
    assert!(
        out.contains(&rollout_id) && out.contains("rolled_back"),
        "{out}"
    );
    // A 4xx is the request's fault: exit 2, as for every client command.
    let (code, _, err) = cli(&["rollouts", "rollback", "ro_nope", "--reason", "x"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("404") && err.contains("not_found"), "{err}");
    drop(admin);
    drop(server);
}

/// `x-stoker-revision` and `x-stoker-template-sha256` of one chat request.
async fn served_by(server: &Server, model: &str) -> (String, String) {
    let resp = http()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(APP_KEY)
        .json(&json!({
            "model": model,
            "messages": [{"role": "user", "content": "Say hi."}],
            "max_tokens": 1,
        }))
        .send()
        .await
        .expect("chat request");
    assert_eq!(resp.status().as_u16(), 200, "{}", server.stderr_tail(3000));
    let h = |k: &str| {
        resp.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    (h("x-stoker-revision"), h("x-stoker-template-sha256"))
}

/// A restart under another chat template (`--chat-template`) is another
/// revision of the same file: recorded with the template's hash and origin,
/// made the serving one with an audited reason, and named by the response
/// headers. A restart under the same template records nothing; one without it
/// routes back to the first revision, which was kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_template_override_is_recorded_as_a_revision_of_its_own() {
    let template = hermes_tool_template();
    let out = std::process::Command::new("sha256sum")
        .arg(&template)
        .output()
        .expect("run sha256sum");
    let file_sha = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("sha256sum prints a digest")
        .to_owned();
    let data = fresh_dir("control-template-data");
    let plain = || ServerOptions::default().config(KEYS).data_dir(data.path());
    let overridden = || {
        plain()
            .arg("--chat-template")
            .arg(template.to_string_lossy().into_owned())
    };

    // First start: the model file's own template.
    let server = Server::start("control-template-1", plain()).await;
    let dep = server.model_id(Some(OPS_KEY)).await;
    let admin = Admin::new(&server);
    let d = admin.deployment(&dep).await;
    let revs = d["revisions"].as_array().unwrap().clone();
    assert_eq!(revs.len(), 1, "{d}");
    let first = revs[0]["revision_id"].as_str().unwrap().to_owned();
    let own_sha = revs[0]["chat_template_hash"].as_str().unwrap().to_owned();
    assert_eq!(revs[0]["chat_template_origin"], "the model file's template");
    assert_ne!(own_sha, file_sha);
    assert_eq!(
        served_by(&server, &dep).await,
        (first.clone(), own_sha.clone())
    );
    drop(admin);
    drop(server);

    // Restart under the Hermes template: a second revision, now serving.
    let server = Server::start("control-template-2", overridden()).await;
    let admin = Admin::new(&server);
    let d = admin.deployment(&dep).await;
    let revs = d["revisions"].as_array().unwrap().clone();
    assert_eq!(revs.len(), 2, "{d}");
    let second = revs
        .iter()
        .find(|r| r["revision_id"] != first.as_str())
        .expect("a second revision");
    let second_id = second["revision_id"].as_str().unwrap().to_owned();
    assert!(second_id.starts_with(&first), "{second_id} extends {first}");
    assert_eq!(second["chat_template_hash"], file_sha.as_str());
    assert_eq!(
        second["chat_template_origin"],
        format!("--chat-template {HERMES_TOOL_TEMPLATE}").as_str()
    );
    assert_eq!(second["model_sha256"], revs[0]["model_sha256"]);
    assert_eq!(d["serving_revision"], second_id.as_str());
    assert_eq!(
        served_by(&server, &dep).await,
        (second_id.clone(), file_sha.clone())
    );
    let audit = trail(&admin.audit(&dep).await);
    let moved = audit
        .iter()
        .filter(|(_, actor, reason)| {
            actor == "stoker-serve"
                && reason.as_deref().is_some_and(|r| {
                    r.starts_with("stoker serve started with --chat-template")
                        && r.contains(&file_sha[..12])
                })
        })
        .count();
    assert_eq!(moved, 1, "{audit:?}");
    // Every start also registers its executor (and finds the killed one
    // lost); what a start decides about revisions is the rest.
    let revision_events = |t: &[(String, String, Option<String>)]| {
        t.iter().filter(|e| !e.0.starts_with("Executor")).count()
    };
    let events_before = revision_events(&audit);
    drop(admin);
    drop(server);

    // The same template again: nothing new is recorded.
    let server = Server::start("control-template-3", overridden()).await;
    let admin = Admin::new(&server);
    let again = trail(&admin.audit(&dep).await);
    assert_eq!(revision_events(&again), events_before, "{again:?}");
    assert_eq!(served_by(&server, &dep).await.0, second_id);
    drop(admin);
    drop(server);

    // Without it: back to the first revision, no third one.
    let server = Server::start("control-template-4", plain()).await;
    let admin = Admin::new(&server);
    let d = admin.deployment(&dep).await;
    assert_eq!(d["revisions"].as_array().unwrap().len(), 2, "{d}");
    assert_eq!(d["serving_revision"], first.as_str());
    assert_eq!(served_by(&server, &dep).await, (first, own_sha));
    drop(admin);
    drop(server);
}
