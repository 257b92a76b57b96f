//! Cancelling a running batch: rows are running on the engine when
//! `POST /v1/batches/{id}/cancel` arrives. The running rows are cancelled (the
//! KV cache is idle within a second or two of the request), the batch ends
//! `cancelled`, and every line is written exactly once, to the output file if
//! it ran or to the error file as `batch_cancelled` if it did not.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{
    counts, create_batch, each_exactly_once, file_form, file_lines, jsonl, ok, post, upload,
    wait_terminal,
};
use crate::harness::{Server, ServerOptions, metric_sum};

const ROWS: usize = 300;

async fn engine_busy(server: &Server) -> (f64, f64) {
    let m = server.metrics().await;
    (
        metric_sum(&m, "stoker_num_requests_running", &[]),
        metric_sum(&m, "stoker_kv_cache_usage_perc", &[]),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_running_batch_stops_its_rows_and_writes_each_line_once() {
    let server = Server::start(
        "batch-cancel",
        ServerOptions::default().config("[engine]\nmax_num_seqs = 8\n"),
    )
    .await;
    let model = server.model_id(None).await;
    let ids: Vec<String> = (0..ROWS).map(|i| format!("row-{i:03}")).collect();
    let lines: Vec<Value> = ids
        .iter()
        .map(|id| {
            json!({"custom_id": id, "method": "POST", "url": "/v1/completions",
                "body": {"model": model, "prompt": "Once upon a time", "max_tokens": 48,
                         "ignore_eos": true, "temperature": 0}})
        })
        .collect();
    let file = ok(
        &upload(
            &server,
            None,
            file_form("rows.jsonl", &jsonl(&lines), Some("batch")),
        )
        .await,
        "upload",
    );
    let id = create_batch(&server, None, &file["id"], "/v1/completions").await;

    // Some rows done and others running.
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let b = ok(
            &super::get(&server, None, &format!("/v1/batches/{id}")).await,
            "GET batch",
        );
        let (running, _) = engine_busy(&server).await;
        if counts(&b).1 >= 8 && running > 0.0 {
            break;
        }
        assert!(Instant::now() < until, "the batch never got going: {b}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let cancelled_at = Instant::now();
    let c = ok(
        &post(
            &server,
            None,
            &format!("/v1/batches/{id}/cancel"),
            &json!({}),
        )
        .await,
        "cancel",
    );
    assert!(
        ["cancelling", "cancelled"].contains(&c["status"].as_str().unwrap_or("?")),
        "{c}"
    );
    loop {
        let (running, kv) = engine_busy(&server).await;
        if running == 0.0 && kv == 0.0 {
            break;
        }
        // The worker is woken by the cancel; a row mid-step finishes its step.
        assert!(
            cancelled_at.elapsed() < Duration::from_secs(2),
            "rows still running {:?} after the cancel: {running} running, KV {kv}",
            cancelled_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let idle_after = cancelled_at.elapsed();

    let b = wait_terminal(&server, None, &id, Instant::now() + Duration::from_secs(60)).await;
    assert_eq!(b["status"], "cancelled", "{b}");
    let (total, completed, failed) = counts(&b);
    assert_eq!(total as usize, ROWS, "{b}");
    let out = file_lines(&server, None, &b["output_file_id"]).await;
    let err = file_lines(&server, None, &b["error_file_id"]).await;
    let all: Vec<&Value> = out.iter().chain(err.iter()).collect();
    each_exactly_once(&ids, &all, "cancelled batch");
    assert_eq!(out.len() as u64, completed, "{b}");
    assert!(completed >= 8 && completed < ROWS as u64, "{b}");
    let never_ran = err
        .iter()
        .filter(|l| l["error"]["code"] == "batch_cancelled")
        .count();
    assert!(never_ran > 0, "no line says batch_cancelled: {err:?}");
    eprintln!(
        "cancel of a running batch: engine idle {idle_after:?} after the request; \
         {completed} completed, {failed} failed, {never_ran} batch_cancelled"
    );
}
