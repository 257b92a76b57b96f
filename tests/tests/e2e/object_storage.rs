//! Batch files and outputs in S3: `stoker serve` with `batch.storage_url =
//! "s3://..."` against a real S3-compatible server (moto's, from PyPI
//! `moto[server]` in the venv), reached through a relay the test can cut.
//! Uploads land as objects in the bucket; while the store is unreachable an
//! upload is refused typed (503 `not_ready` with `Retry-After`) and the batch
//! running beside it loses its segment uploads mid-flight; once the store is
//! back the batch completes with every line once, its output in the bucket.

use std::net::{SocketAddr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::batch::{
    chat_line, counts, create_batch, each_exactly_once, file_form, file_lines, get, jsonl, ok,
    upload, wait_terminal,
};
use crate::harness::{Server, ServerOptions, http, python_bin};
use crate::tcp_proxy::TcpProxy;

const BUCKET: &str = "stoker-e2e";
const PREFIX: &str = "objects";

/// moto's S3 server, killed when dropped.
struct Moto {
    child: Child,
    addr: SocketAddr,
}

impl Moto {
    async fn start() -> Moto {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let python = python_bin();
        let child = Command::new(&python)
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start moto's server with {}: {e}", python.display()));
        let mut moto = Moto {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = http().get(moto.url("/")).send().await
                && r.status().is_success()
            {
                break;
            }
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!(
                    "moto's server exited ({status}): run scripts/setup-venv.sh, which \
                     installs moto[server] into .venv"
                );
            }
            assert!(
                Instant::now() < deadline,
                "moto's server did not answer in 60 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        moto
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The keys under `prefix` in the bucket, read from S3 itself.
    async fn keys(&self, prefix: &str) -> Vec<String> {
        let resp = http()
            .get(self.url(&format!("/{BUCKET}?list-type=2&prefix={prefix}")))
            .send()
            .await
            .expect("list the bucket");
        assert!(
            resp.status().is_success(),
            "list the bucket: {}",
            resp.status()
        );
        let xml = resp.text().await.expect("listing");
        xml.split("<Key>")
            .skip(1)
            .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k.to_owned()))
            .collect()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_files_and_outputs_live_in_s3_and_survive_the_store_failing_mid_upload() {
    let moto = Moto::start().await;
    let made = http()
        .put(moto.url(&format!("/{BUCKET}")))
        .send()
        .await
        .expect("create the bucket");
    assert!(
        made.status().is_success(),
        "create the bucket: {}",
        made.status()
    );
    let relay = TcpProxy::start(moto.addr);
    let endpoint = format!("http://127.0.0.1:{}", relay.port());
    let server = Server::start(
        "s3",
        ServerOptions::default()
            .config(&format!(
                "[batch]\nstorage_url = \"s3://{BUCKET}/{PREFIX}\"\nshard_rows = 8\n\
                 lease_secs = 3\n"
            ))
            .env("AWS_ACCESS_KEY_ID", "stoker-e2e")
            .env("AWS_SECRET_ACCESS_KEY", "stoker-e2e-secret")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ENDPOINT", &endpoint)
            .env("AWS_ALLOW_HTTP", "true"),
    )
    .await;
    let model = server.model_id(None).await;

    let n = 80;
    let ids: Vec<String> = (0..n).map(|i| format!("s3-row-{i}")).collect();
    let lines: Vec<Value> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| chat_line(id, &model, &format!("Say the number {i}."), 16))
        .collect();
    let input = jsonl(&lines);
    let file = ok(
        &upload(
            &server,
            None,
            file_form("rows.jsonl", &input, Some("batch")),
        )
        .await,
        "upload to S3",
    );
    let stored = moto.keys(PREFIX).await;
    assert!(
        !stored.is_empty() && stored.iter().all(|k| k.starts_with(&format!("{PREFIX}/"))),
        "the upload is not an object under {PREFIX}/ in the bucket: {stored:?}"
    );
    let id = create_batch(&server, None, &file["id"], "/v1/chat/completions").await;

    // The store fails while segments are being written: wait for the first
    // rows to complete, then cut every connection to it, open ones included.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let b = ok(
            &get(&server, None, &format!("/v1/batches/{id}")).await,
            "GET batch",
        );
        if counts(&b).1 > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no row completed: {b}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    relay.cut();
    let cut_at = Instant::now();
    let refused = upload(
        &server,
        None,
        file_form("late.jsonl", &input, Some("batch")),
    )
    .await;
    println!(
        "upload while S3 is down: {} after {:?}",
        refused.status,
        cut_at.elapsed()
    );
    assert_eq!(refused.status, 503, "upload while S3 is down: {refused:?}");
    assert_eq!(refused.body["error"]["code"], "not_ready", "{refused:?}");
    assert!(refused.retry_after.is_some(), "no Retry-After: {refused:?}");
    // Reads of records go on (they live in the database).
    ok(
        &get(&server, None, &format!("/v1/batches/{id}")).await,
        "GET batch while S3 is down",
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    relay.restore();

    let done = wait_terminal(
        &server,
        None,
        &id,
        Instant::now() + Duration::from_secs(300),
    )
    .await;
    assert_eq!(done["status"], "completed", "{done}");
    let out = file_lines(&server, None, &done["output_file_id"]).await;
    let errors = file_lines(&server, None, &done["error_file_id"]).await;
    assert!(errors.is_empty(), "error lines: {errors:?}");
    assert_eq!(out.len(), n, "output lines");
    each_exactly_once(&ids, &out.iter().collect::<Vec<_>>(), "output");
    let output_id = done["output_file_id"].as_str().expect("output file id");
    let after = moto.keys(PREFIX).await;
    assert!(
        after.len() > stored.len(),
        "the output file is not in the bucket: before {stored:?}, after {after:?}"
    );
    println!("bucket after the batch ({output_id}): {after:?}");
    let log = server.stderr();
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");
}
