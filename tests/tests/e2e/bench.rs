//! `stoker bench serve` against `stoker serve` on the real model: exact
//! prompt lengths, a sweep that finds a knee and records it as a capacity
//! profile, admission that then refuses past the envelope with a typed 503
//! and `Retry-After`, out-of-envelope traffic in the metrics, and bad flags.

use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{
    Server, ServerOptions, Sse, chunk_text, fresh_dir, http, metric_sum, model_path, stoker_bin,
};

/// Runs `stoker bench serve ARGS` to its end.
async fn bench(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(stoker_bin())
            .arg("bench")
            .arg("serve")
            .args(&args)
            .output()
            .expect("run stoker bench")
    })
    .await
    .unwrap()
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "bench failed ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bench --json printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweep_finds_a_knee_records_a_profile_and_admission_enforces_it() {
    // Four running slots and a short queue: past a few clients, requests wait
    // behind each other or are refused, and the TTFT SLO breaks.
    let server = Server::start(
        "bench-sweep",
        ServerOptions::default()
            .config("[engine]\nmax_num_seqs = 4\n[admission]\nmax_waiting_requests = 4\n"),
    )
    .await;
    let url = server.base.clone();
    let model = model_path().display().to_string();
    // The default deployment is named after the served model.
    let served = server.model_id(None).await;
    let dir = fresh_dir("bench-sweep-out");

    // Calibrate on this machine: one client, exact 32-token prompts, exactly
    // 64 output tokens.
    let base = [
        "--url",
        &url,
        "--tokenizer",
        &model,
        "--input",
        "32",
        "--output",
        "64",
        "--ignore-eos",
        "--json",
        "--quiet",
    ];
    let mut a = args(&base);
    a.extend(args(&["--concurrency", "1", "--requests", "6"]));
    let calib = json_of(&bench(a).await);
    assert_eq!(calib["exact_prompt_lengths"], true);
    let lvl = &calib["levels"][0];
    assert_eq!(lvl["completed"], 6, "{lvl}");
    for (k, n) in [("prompt_tokens", 32), ("output_tokens", 64)] {
        assert_eq!(lvl[k]["min"], n, "{k}: {lvl}");
        assert_eq!(lvl[k]["max"], n, "{k}: {lvl}");
    }
    assert!(lvl["server"]["queue_time_ms_mean"].is_number(), "{lvl}");
    let p95 = lvl["ttft_ms"]["p95"].as_f64().unwrap();
    let slo = format!("{:.0}", 4.0 * p95 + 40.0);

    // Sweep 1, 4, 32 clients: twelve requests at once against four slots
    // and a queue of four cannot keep 90 % of them within the SLO.
    let plot = dir.path().join("sweep.svg");
    let plot_s = plot.display().to_string();
    let mut a = args(&base);
    a.extend(args(&[
        "--concurrency",
        "1",
        "--requests",
        "12",
        "--sweep",
        "--sweep-levels",
        "1,4,32",
        "--slo-ttft-ms",
        &slo,
        "--slo-attainment",
        "0.9",
        "--record-profile",
        &served,
        "--workload-name",
        "e2e-short",
        "--plot",
        &plot_s,
    ]));
    let sweep = json_of(&bench(a).await);
    let knee = &sweep["knee"];
    let k = knee["level"].as_f64().expect("a knee was found");
    assert!(k < 32.0, "the knee is below the overloaded level: {sweep}");
    assert_eq!(sweep["knee_bounded"], true, "{sweep}");
    let last = sweep["levels"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["meets_slo"], false, "{last}");
    let svg = std::fs::read_to_string(&plot).expect("the plot was written");
    assert!(
        svg.contains("<svg") && svg.contains("knee"),
        "plot: {svg:.200}"
    );

    let profile = &sweep["profile"];
    assert_eq!(profile["deployment_id"], served.as_str());
    assert_eq!(profile["workload"], "e2e-short");
    let envelope_c = profile["envelope"]["concurrency"].as_u64().unwrap();
    assert_eq!(envelope_c as f64, k);
    assert_eq!(profile["envelope"]["prompt_tokens_p95"], 32);

    // The control plane holds it, and admission follows it.
    let client = http();
    let listed: Value = client
        .get(server.url(&format!("/admin/v1/capacity-profiles?deployment={served}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["workload"] == "e2e-short"),
        "{listed}"
    );
    let admission = || async {
        client
            .get(server.url("/admin/v1/admission"))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    let adm = admission().await;
    assert_eq!(adm["source"], "profile", "{adm}");
    assert_eq!(adm["max_outstanding"], envelope_c, "{adm}");
    assert_eq!(adm["profile"]["workload"], "e2e-short", "{adm}");
    // With no absolute ITL target configured, the step planner takes the
    // profile's measured TPOT p95 as its interactive target.
    let tpot = profile["envelope"]["tpot_p95_ms"].as_f64().unwrap();
    let mut planner = adm["planner"].clone();
    for _ in 0..50 {
        if planner["interactive_itl_mode"] == "absolute" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        planner = admission().await["planner"].clone();
    }
    assert_eq!(planner["interactive_itl_mode"], "absolute", "{planner}");
    let target = planner["interactive_itl_target_ms"].as_f64().unwrap();
    assert!((target - tpot).abs() < 1e-9, "{target} vs {tpot}");

    // Hold the envelope's worth of streams open, each within the envelope's
    // tokens per request (32 + 64); one more is refused.
    let long = json!({
        "model": served, "prompt": " the river the model the light",
        "max_tokens": 80, "ignore_eos": true, "temperature": 0, "stream": true,
    });
    let mut held = Vec::new();
    for _ in 0..envelope_c {
        let resp = client
            .post(server.url("/v1/completions"))
            .json(&long)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let mut sse = Sse::new(resp);
        loop {
            let data = sse.next().await.expect("stream content");
            let chunk: Value = serde_json::from_str(&data).unwrap();
            if !chunk_text(&chunk).is_empty() {
                break;
            }
        }
        held.push(sse);
    }
    let resp = client
        .post(server.url("/v1/completions"))
        .json(&json!({"model": served, "prompt": " hello", "max_tokens": 4}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    let retry = resp
        .headers()
        .get("retry-after")
        .expect("Retry-After on the refusal")
        .to_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert!(retry >= 1, "{retry}");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "server_overloaded", "{body}");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("envelope"), "{msg}");
    drop(held);

    // A prompt far past the profile's p95 (32) counts as out of envelope.
    let long_prompt = " river".repeat(300);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let resp = client
            .post(server.url("/v1/completions"))
            .json(&json!({"model": served, "prompt": long_prompt, "max_tokens": 1}))
            .send()
            .await
            .unwrap();
        if resp.status().as_u16() == 200 {
            break;
        }
        // The dropped streams free their slots as the server notices.
        assert!(std::time::Instant::now() < deadline, "never admitted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let m = server.metrics().await;
    let n = metric_sum(
        &m,
        "stoker_out_of_envelope_requests_total",
        &["reason=\"prompt_length\""],
    );
    assert!(n >= 1.0, "out-of-envelope count {n}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flags_and_files_are_clear_errors() {
    let dir = fresh_dir("bench-flags");
    let bad_toml = dir.path().join("w.toml");
    std::fs::write(&bad_toml, "arrival = \"closed:4\"\nprompt_len = 5\n").unwrap();
    let bad_toml = bad_toml.display().to_string();
    let url = "http://127.0.0.1:9";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "--url",
                url,
                "--concurrency",
                "2",
                "--rate",
                "3",
                "--requests",
                "1",
            ],
            "choose one arrival pattern",
        ),
        (
            vec!["--url", url, "--input", "uniform:9-3", "--requests", "1"],
            "MIN 9 is above MAX 3",
        ),
        (
            vec!["--url", url, "--concurrency", "2"],
            "--requests N or --duration",
        ),
        (
            vec!["--url", url, "--requests", "1", "--sweep"],
            "--sweep needs at least one SLO",
        ),
        (
            vec!["--url", url, "--workload", &bad_toml, "--requests", "1"],
            "unknown field `prompt_len`",
        ),
        (
            vec!["--url", url, "--requests", "1", "--plot", "x.png"],
            "only .svg",
        ),
        (
            vec![
                "--url",
                url,
                "--requests",
                "1",
                "--tokenizer",
                "/nonexistent.gguf",
            ],
            "--tokenizer",
        ),
        (
            vec!["--url", url, "--concurrency", "-4", "--requests", "1"],
            "error",
        ),
        (
            vec!["--url", url, "--requests", "1", "--bogus"],
            "unexpected argument",
        ),
    ];
    for (a, want) in cases {
        let out = bench(args(&a)).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{a:?}: {err}");
        assert!(err.contains(want), "{a:?}: {want:?} not in {err}");
        assert!(!err.contains("panicked"), "{a:?}: {err}");
    }
    // A target that is not there: exit 1, named, no panic.
    let out = bench(args(&[
        "--url",
        url,
        "--model",
        "m",
        "--requests",
        "2",
        "--quiet",
    ]))
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no request completed (connect 2)"), "{err}");
}
