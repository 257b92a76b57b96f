//! The Batch API through its clients: the official OpenAI SDK's workflow
//! (tests/python/sdk_batch.py) and the `stoker batch` CLI (submit and wait,
//! status, list, download, and its exit codes on server and local errors).

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{PROMPTS, completion_line, jsonl, status_of};
use crate::harness::{Server, ServerOptions, stoker_bin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_sdk_batch() {
    // Small shards, so even these batches run as several.
    let server = Server::start(
        "sdk-batch",
        ServerOptions::default().config("[batch]\nshard_rows = 5\n"),
    )
    .await;
    let out = server.run_python("sdk_batch.py", &[]).await;
    print!("{out}");
    assert!(
        out.contains("OK sdk_batch"),
        "script did not finish:\n{out}"
    );
}

/// Runs `stoker batch ARGS` against the server; returns (exit code, stdout, stderr).
async fn cli(server: &Server, args: &[&str]) -> (i32, String, String) {
    let dir = server.dir.clone();
    let url = server.base.clone();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        static RUN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = RUN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let out_path = dir.join(format!("cli-{n}.stdout"));
        let err_path = dir.join(format!("cli-{n}.stderr"));
        let mut cmd = Command::new(stoker_bin());
        cmd.arg("batch")
            .args(&args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .env("STOKER_URL", &url)
            .env_remove("STOKER_API_KEY")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        let mut child = cmd.spawn().expect("spawn stoker batch");
        let started = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().expect("try_wait") {
                break s;
            }
            if started.elapsed() > Duration::from_secs(300) {
                let _ = child.kill();
                panic!("stoker batch {args:?} ran over 300 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let out = std::fs::read_to_string(&out_path).unwrap_or_default();
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        println!("$ stoker batch {}\n{out}{err}", args.join(" "));
        (status.code().unwrap_or(-1), out, err)
    })
    .await
    .expect("cli thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stoker_batch_cli_submits_waits_and_downloads() {
    let server = Server::start("batch-cli", ServerOptions::default()).await;
    let model = server.model_id(None).await;
    let input = server.dir.join("prompts.jsonl");
    let mut lines: Vec<Value> = (0..6)
        .map(|i| completion_line(&format!("cli-{i}"), &model, PROMPTS[i], 4))
        .collect();
    // A scoring row: the prompt's own log probabilities, nothing generated.
    let scoring = json!({"echo": true, "max_tokens": 0, "logprobs": 2});
    for (k, v) in scoring.as_object().unwrap() {
        lines[5]["body"][k] = v.clone();
    }
    std::fs::write(&input, jsonl(&lines)).unwrap();
    let input = input.to_str().unwrap();

    // No --endpoint: the first line's url (/v1/completions) is used.
    let (code, out, err) = cli(
        &server,
        &[
            "submit",
            input,
            "--wait",
            "--metadata",
            "suite=cli",
            "--poll-interval",
            "0.5",
        ],
    )
    .await;
    assert_eq!(code, 0, "submit --wait:\n{out}\n{err}");
    let id = out.lines().next().unwrap_or_default().trim().to_owned();
    assert!(id.starts_with("batch_"), "first stdout line: {out}");
    let summary = out.lines().last().unwrap_or_default();
    assert!(
        summary.starts_with(&format!("{id} completed: 6/6 rows, 6 completed, 0 failed")),
        "summary: {summary}"
    );
    assert!(err.contains("uploaded prompts.jsonl"), "stderr: {err}");
    assert!(err.contains("6/6  100%"), "no final progress line: {err}");

    let (code, out, _) = cli(&server, &["status", &id, "--json"]).await;
    assert_eq!(code, 0);
    let b: Value = serde_json::from_str(&out).expect("status --json");
    assert_eq!(
        (status_of(&b), &b["metadata"]["suite"], &b["endpoint"]),
        ("completed", &json!("cli"), &json!("/v1/completions"))
    );
    let (code, out, _) = cli(&server, &["status", &id]).await;
    assert_eq!(code, 0);
    assert!(out.starts_with("BATCH") && out.contains(&id) && out.contains("6/6"));
    let (code, out, _) = cli(&server, &["list", "--limit", "5"]).await;
    assert_eq!(code, 0);
    assert!(out.contains(&id), "list: {out}");

    let out_path = server.dir.join("out.jsonl");
    let err_path = server.dir.join("err.jsonl");
    let (code, _, _) = cli(
        &server,
        &[
            "download",
            &id,
            "--output",
            out_path.to_str().unwrap(),
            "--errors",
            err_path.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, 0);
    let written = std::fs::read_to_string(&out_path).unwrap();
    let parsed: Vec<Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let got: HashSet<String> = parsed
        .iter()
        .map(|v| v["custom_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(got.len(), 6, "output: {written}");
    // The scoring row: its text is the prompt, every token after the first
    // scored with its top 2, the first null as in OpenAI's legacy shape.
    let scored = parsed.iter().find(|v| v["custom_id"] == "cli-5").unwrap();
    let body = &scored["response"]["body"];
    let choice = &body["choices"][0];
    assert_eq!(choice["text"], PROMPTS[5], "{scored}");
    assert_eq!(choice["finish_reason"], "length", "{scored}");
    assert_eq!(body["usage"]["completion_tokens"], 0, "{scored}");
    let lp = &choice["logprobs"];
    let tokens = lp["tokens"].as_array().unwrap();
    assert_eq!(
        tokens.len() as u64,
        body["usage"]["prompt_tokens"].as_u64().unwrap()
    );
    let joined: String = tokens.iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(joined, PROMPTS[5]);
    let scores = lp["token_logprobs"].as_array().unwrap();
    assert!(
        scores[0].is_null() && lp["top_logprobs"][0].is_null(),
        "{lp}"
    );
    for (k, s) in scores.iter().enumerate().skip(1) {
        assert!(s.as_f64().is_some_and(|x| x <= 0.0), "token {k}: {lp}");
        // Two tokens that spell the same text share one key.
        let top = lp["top_logprobs"][k].as_object().map_or(0, |m| m.len());
        assert!((1..=2).contains(&top), "token {k}: {lp}");
    }
    assert_eq!(std::fs::read_to_string(&err_path).unwrap(), "");
    let (code, stdout, _) = cli(&server, &["download", &id]).await;
    assert_eq!((code, stdout.as_str()), (0, written.as_str()));

    // Failures: a server 4xx exits 2 with the server's code; bad local input exits 2.
    let (code, _, err) = cli(&server, &["status", "batch_doesnotexist"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("404"), "{err}");
    let missing = server.dir.join("missing.jsonl");
    let (code, _, err) = cli(&server, &["submit", missing.to_str().unwrap()]).await;
    assert_eq!(code, 2);
    assert!(err.contains("no such file"), "{err}");
    let (code, _, err) = cli(&server, &["submit", input, "--metadata", "novalue"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("KEY=VALUE"), "{err}");
    let bad = server.dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"custom_id\": \"x\"}\n").unwrap();
    let (code, _, err) = cli(&server, &["submit", bad.to_str().unwrap()]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("400 invalid_value"), "{err}");
}
