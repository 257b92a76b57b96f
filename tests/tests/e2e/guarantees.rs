//! The promises of stoker under load, measured where the client sees them:
//! `stoker bench scenario` drives a real `stoker serve` over HTTP, with loose
//! bounds that today's code must meet and the code before it did not (the
//! figures of both are in BENCHMARKS.md):
//!
//! * fair share: a tenant flooding the server with 32 streams of 400-token
//!   prompts raises another tenant's TTFT p99 at most 4x over its own alone,
//!   and the other tenant is never refused for load it did not cause;
//! * the TTFT objective: a burst of 256 streaming chats on a fresh server is
//!   shed with typed 503s carrying `Retry-After`, and the requests admitted
//!   start within 1.5x `admission.max_ttft_ms`.
//!
//! The full scenarios (`benchmarks/scenarios/*.toml`) are benchmarks, not
//! tests; these are their short versions (`benchmarks/scenarios/ci/`).

use std::process::Output;

use serde_json::Value;

use crate::harness::{Server, ServerOptions, repo_root, stoker_bin};

const KEY_A: &str = "sk-tenant-a-flood-0001";
const KEY_B: &str = "sk-tenant-b-chat-0001";

fn keys() -> String {
    format!(
        r#"
[[api_keys]]
name = "a"
key = "{KEY_A}"
tenant = "a"
scopes = ["inference", "batch"]

[[api_keys]]
name = "b"
key = "{KEY_B}"
tenant = "b"
scopes = ["inference", "batch"]
"#
    )
}

/// Runs `stoker bench scenario benchmarks/scenarios/ci/NAME.toml` against
/// `server` from the repository root, and returns its JSON report.
async fn scenario(server: &Server, name: &str) -> Value {
    let file = repo_root().join(format!("benchmarks/scenarios/ci/{name}.toml"));
    let url = server.base.clone();
    let out: Output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(stoker_bin())
            .current_dir(repo_root())
            .args(["bench", "scenario"])
            .arg(&file)
            .args(["--url", &url, "--json"])
            .env("STOKER_KEY_A", KEY_A)
            .env("STOKER_KEY_B", KEY_B)
            .output()
            .expect("run stoker bench scenario")
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "scenario {name} printed no JSON report ({e}; exit {:?}):\n{stderr}\n{}",
            out.status,
            server.stderr_tail(3000)
        )
    });
    assert!(
        report["passed"] == true && out.status.success(),
        "scenario {name} failed its objectives (exit {:?}):\n{}\n{stderr}",
        out.status,
        serde_json::to_string_pretty(&report).unwrap()
    );
    report
}

/// The figures of `tenant` in `phase`.
fn figures<'a>(report: &'a Value, phase: &str, tenant: &str) -> &'a Value {
    report["phases"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == phase))
        .and_then(|p| p["tenants"].as_array())
        .and_then(|ts| ts.iter().find(|t| t["tenant"] == tenant))
        .unwrap_or_else(|| panic!("no figures of {tenant} in {phase}: {report}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_tenant_does_not_starve_another_over_http() {
    let server = Server::start("guarantees-flood", ServerOptions::default().config(&keys())).await;
    let report = scenario(&server, "flood").await;
    let alone = figures(&report, "b-alone", "B");
    let beside = figures(&report, "together", "B");
    let flood = figures(&report, "together", "A");
    let p99 = |f: &Value| f["ttft_ms"]["p99"].as_f64().expect("a TTFT p99");
    eprintln!(
        "B's TTFT p99 alone {:.0} ms, beside the flood {:.0} ms ({:.2}x); A completed {} \
         and was refused {}",
        p99(alone),
        p99(beside),
        p99(beside) / p99(alone),
        flood["completed"],
        flood["refused"]
    );
    assert!(beside["completed"].as_u64().unwrap() >= 4, "{beside}");
    assert!(
        flood["completed"].as_u64().unwrap() >= 8,
        "the flood itself must be served: {flood}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_a_fresh_server_is_shed_and_what_is_admitted_starts_in_time() {
    let server = Server::start(
        "guarantees-overload",
        ServerOptions::default().config(&keys()),
    )
    .await;
    let report = scenario(&server, "overload").await;
    let a = figures(&report, "burst", "A");
    eprintln!(
        "burst: {} sent, {} completed, refusals {}, TTFT p99 {} ms, observed / predicted {}",
        a["requests"], a["completed"], a["failures"], a["ttft_ms"]["p99"], a["ttft_over_predicted"]
    );
    let shed = a["failures"]["503 server_overloaded"].as_u64().unwrap_or(0);
    assert!(
        shed > 0,
        "256 clients at once must be more than 5 s of work here: {a}"
    );
    assert_eq!(
        a["failures"].as_object().unwrap().len(),
        1,
        "only typed overload refusals: {a}"
    );
    assert!(a["completed"].as_u64().unwrap() >= 16, "{a}");
}
