//! Disk full in the data directory: the server's SQLite database and batch
//! objects live on a size-limited tmpfs that the test fills to the last byte.
//! Writes are refused typed (507 `storage_full` with `Retry-After`, never a
//! 500), reads and generation go on, and once space is freed the same writes
//! succeed without a restart; the batch created around the outage completes
//! with every line once, and the database passes SQLite's integrity check.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::batch::{
    Answer, chat_line, create_batch, each_exactly_once, file_form, file_lines, get, jsonl, ok,
    post, upload, wait_terminal,
};
use crate::harness::{Server, ServerOptions, fresh_dir, http};

/// A tmpfs of `size` mounted on a folder, unmounted when dropped.
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(path).expect("create the mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mounting a {size} tmpfs at {} failed ({}): this test needs root (or \
             CAP_SYS_ADMIN) to make a small filesystem it can fill; run the suite as root \
             or in a container started with --cap-add SYS_ADMIN",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Tmpfs {
            path: path.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Writes zeros to `path` until the filesystem refuses a byte more.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).expect("create the filler");
    let chunk = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
    }
    // Byte by byte to the very end: a partial chunk may still fit.
    while let Ok(1) = f.write(&[0u8]) {
        written += 1;
    }
    let _ = f.sync_all();
    written
}

fn assert_storage_full(a: &Answer, what: &str) {
    assert_eq!(a.status, 507, "{what}: {a:?}");
    assert_eq!(a.body["error"]["code"], "storage_full", "{what}: {a:?}");
    assert!(a.body["error"]["message"].is_string(), "{what}: {a:?}");
    assert!(a.retry_after.is_some(), "{what}: no Retry-After: {a:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_typed_serves_reads_and_recovers_without_a_restart() {
    let dir = fresh_dir("disk-full");
    let mount = dir.path().join("data");
    let tmpfs = Tmpfs::mount(&mount, "24m");
    let mut server = Server::start(
        "disk-full",
        ServerOptions::default()
            .data_dir(&mount)
            .config("[batch]\nshard_rows = 10\nlease_secs = 3\n"),
    )
    .await;
    let model = server.model_id(None).await;

    let lines: Vec<Value> = (0..30)
        .map(|i| chat_line(&format!("row-{i}"), &model, &format!("Count to {i}."), 4))
        .collect();
    let ids: Vec<String> = (0..30).map(|i| format!("row-{i}")).collect();
    let input = jsonl(&lines);
    let before = ok(
        &upload(
            &server,
            None,
            file_form("before.jsonl", &input, Some("batch")),
        )
        .await,
        "upload before the disk fills",
    );
    let before_id = before["id"].as_str().expect("file id").to_owned();

    let filler = mount.join("filler");
    let filled = fill(&filler);
    println!("filled the tmpfs with {filled} bytes");

    // Writes: the upload's object cannot be written. Refused typed, and
    // nothing of it listed afterwards.
    let refused = upload(
        &server,
        None,
        file_form("during.jsonl", &input, Some("batch")),
    )
    .await;
    assert_storage_full(&refused, "upload on a full disk");
    // A batch over the stored file: its records may still fit in pages SQLite
    // already holds; if not, it is refused typed. Either way nothing is a 500.
    let create = json!({"input_file_id": before_id, "endpoint": "/v1/chat/completions",
                        "completion_window": "24h"});
    let during = post(&server, None, "/v1/batches", &create).await;
    assert!(
        during.status == 200 || during.status == 507,
        "batch create on a full disk: {during:?}"
    );
    if during.status == 507 {
        assert_storage_full(&during, "batch create on a full disk");
    }

    // Reads and generation go on.
    let files = ok(&get(&server, None, "/v1/files").await, "list files");
    let listed: Vec<&str> = files["data"]
        .as_array()
        .expect("file list")
        .iter()
        .filter_map(|f| f["filename"].as_str())
        .collect();
    assert_eq!(listed, vec!["before.jsonl"], "files listed on a full disk");
    let content = http()
        .get(server.url(&format!("/v1/files/{before_id}/content")))
        .send()
        .await
        .expect("file content");
    assert_eq!(
        content.status().as_u16(),
        200,
        "file content on a full disk"
    );
    assert_eq!(content.bytes().await.expect("content").as_ref(), &input[..]);
    let chat = post(
        &server,
        None,
        "/v1/chat/completions",
        &json!({"model": model, "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 4}),
    )
    .await;
    ok(&chat, "chat on a full disk");
    let ready = http()
        .get(server.url("/health/live"))
        .send()
        .await
        .expect("liveness");
    assert_eq!(ready.status().as_u16(), 200, "liveness on a full disk");

    // Space comes back: the same writes succeed, with no restart.
    std::fs::remove_file(&filler).expect("remove the filler");
    let deadline = Instant::now() + Duration::from_secs(30);
    let after = loop {
        let a = upload(
            &server,
            None,
            file_form("after.jsonl", &input, Some("batch")),
        )
        .await;
        if a.status == 200 {
            break a.body;
        }
        assert_storage_full(&a, "upload while space comes back");
        assert!(Instant::now() < deadline, "upload still refused: {a:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut batches = vec![create_batch(&server, None, &after["id"], "/v1/chat/completions").await];
    if during.status == 200 {
        batches.push(during.body["id"].as_str().expect("batch id").to_owned());
    }
    for id in &batches {
        let done =
            wait_terminal(&server, None, id, Instant::now() + Duration::from_secs(240)).await;
        assert_eq!(done["status"], "completed", "{id}: {done}");
        let out = file_lines(&server, None, &done["output_file_id"]).await;
        let errors = file_lines(&server, None, &done["error_file_id"]).await;
        assert!(errors.is_empty(), "{id}: error lines {errors:?}");
        each_exactly_once(&ids, &out.iter().collect::<Vec<_>>(), id);
        assert_eq!(out.len(), ids.len(), "{id}: output lines");
    }
    let log = server.stderr();
    assert!(!log.contains("panicked"), "the server panicked:\n{log}");

    // A clean stop, then SQLite's own check of the file that filled up.
    server.sigterm();
    let status = server.wait_exit_async(Duration::from_secs(60)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "exit after SIGTERM: {status:?}"
    );
    let db = mount.join("stoker.db");
    let check = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
             print(c.execute('PRAGMA integrity_check').fetchone()[0])",
        )
        .arg(&db)
        .output()
        .expect("run python3 for the integrity check");
    assert_eq!(
        String::from_utf8_lossy(&check.stdout).trim(),
        "ok",
        "integrity_check of {}: {}",
        db.display(),
        String::from_utf8_lossy(&check.stderr)
    );
    drop(tmpfs);
}
