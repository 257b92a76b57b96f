//! A Hugging Face model directory served by `stoker serve --model DIR`, as
//! published (BF16 safetensors, tokenizer.json, tokenizer_config.json with
//! its chat template) and quantized to Q8_0 while loading: the official
//! OpenAI SDK's whole basic run (chat, streaming, completions, logprobs,
//! structured outputs, provenance headers naming the directory's manifest
//! digest) and a Batch API job; `stoker inspect DIR` reports the identity the
//! server serves; a directory without a config and an unknown quantization
//! are refused at start with the reason.
//!
//! The directory is SmolLM2-135M-Instruct exported from its GGUF file by
//! `scripts/make-hf-smollm2.sh`.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::harness::{Server, ServerOptions, repo_root, stoker_bin};

fn bf16_dir() -> PathBuf {
    let dir = repo_root().join("models/hf/SmolLM2-135M-Instruct-bf16");
    assert!(
        dir.join("config.json").is_file(),
        "missing {}: run scripts/make-hf-smollm2.sh",
        dir.display()
    );
    dir
}

fn inspect_json(dir: &std::path::Path) -> Value {
    let out = Command::new(stoker_bin())
        .args(["inspect", "--json"])
        .arg(dir)
        .output()
        .expect("run stoker inspect");
    assert!(
        out.status.success(),
        "stoker inspect {} failed: {}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("inspect --json prints JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_serves_the_openai_sdk_and_a_batch() {
    let dir = bf16_dir();
    let report = inspect_json(&dir);
    assert_eq!(report["servable"], true, "{report:#}");
    assert_eq!(report["file_type"], "BF16", "{report:#}");
    let files: Vec<&str> = report["files"]
        .as_array()
        .expect("a directory's report lists its files")
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(files.contains(&"model.safetensors") && files.contains(&"tokenizer.json"));

    let server = Server::start(
        "hf-dir",
        ServerOptions::default()
            .model(&dir)
            .arg("--quantize")
            .arg("q8_0"),
    )
    .await;
    let dir_s = dir.to_string_lossy().into_owned();
    let vars = [("STOKER_MODEL_PATH", dir_s.as_str())];
    let out = server.run_python("sdk_basic.py", &vars).await;
    print!("{out}");
    assert!(
        out.contains("OK sdk_basic"),
        "script did not finish:\n{out}"
    );

    // The revision the server records is the manifest digest inspect prints,
    // at the precision it was loaded with.
    let models: Value = crate::harness::http()
        .get(server.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let m = &models["data"][0];
    assert_eq!(m["sha256"], report["sha256"], "{models:#}");
    assert_eq!(m["id"], "SmolLM2-135M-Instruct-bf16", "{models:#}");

    let out = server.run_python("sdk_batch.py", &vars).await;
    print!("{out}");
    assert!(
        out.contains("OK sdk_batch"),
        "script did not finish:\n{out}"
    );
}

/// What an operator gets for a directory that is not a model, or a
/// quantization stoker does not write: the server does not start, and says why.
#[test]
fn bad_directories_and_quantizations_are_refused_at_start() {
    let empty = std::env::temp_dir().join(format!("stoker-e2e-empty-dir-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let run = |model: &std::path::Path, extra: &[&str]| {
        let out = Command::new(stoker_bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(empty.join("data"))
            .arg("--model")
            .arg(model)
            .args(extra)
            .output()
            .expect("run stoker serve");
        assert!(
            !out.status.success(),
            "stoker serve {} started",
            model.display()
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&empty, &[]);
    assert!(
        err.contains("not a model directory") && err.contains("has no config.json"),
        "{err}"
    );
    let err = run(&bf16_dir(), &["--quantize", "q3_k"]);
    assert!(
        err.contains("quantize `q3_k` is not one of q8_0, q4_k, q6_k"),
        "{err}"
    );
    std::fs::remove_dir_all(&empty).unwrap();
}

/// Distributed mode on a directory: the API instance reads only the
/// directory's configuration and tokenizer (`ModelMeta`), the executor loads
/// and quantizes the weights, and both name the same revision, so the API
/// routes to the executor and the answer's provenance is the manifest digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_serves_in_distributed_mode() {
    use crate::cluster::{Cluster, Serving};
    let dir = bf16_dir();
    let digest = inspect_json(&dir)["sha256"].as_str().unwrap().to_string();
    let serving = Serving {
        model: Some(dir.clone()),
        args: vec!["--quantize".into(), "q8_0".into()],
    };
    let cluster = Cluster::start_serving("hf_dist", 1, serving).await;
    let model = cluster.api.model_id(None).await;
    assert_eq!(model, "SmolLM2-135M-Instruct-bf16");
    let resp = crate::harness::http()
        .post(cluster.api.url("/v1/chat/completions"))
        .json(&serde_json::json!({
            "model": model,
            "messages": [{"role": "user", "content": "Name a color."}],
            "max_tokens": 8,
            "temperature": 0,
            "ignore_eos": true,
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let sha = resp.headers()["x-stoker-model-sha256"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(sha, digest);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["usage"]["completion_tokens"], 8, "{body}");
}
