//! What the Batch API accepts: a good file is stored and served back byte for
//! byte (a 64-character `custom_id` is the limit, not past it), batches that fit
//! the backlog are created, and the batch list pages newest first with `after`.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{
    FILES_KEY, INFERENCE_KEY, LIMITS_CONFIG, chat_line, count_batches, count_files, file_form, get,
    jsonl, ok, post, upload,
};
use crate::harness::{Server, ServerOptions, http};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_file_is_stored_as_sent_and_batches_page() {
    let server = Server::start(
        "batch-files",
        ServerOptions::default().config(LIMITS_CONFIG),
    )
    .await;
    let key = Some(FILES_KEY);
    let model = server.model_id(Some(INFERENCE_KEY)).await;
    let good = |id: &str| chat_line(id, &model, "Say hi.", 4);
    assert_eq!(count_files(&server).await, 0);

    // A good file: stored as sent. The 64-character custom_id is the limit.
    let id64 = "y".repeat(64);
    let good_data = jsonl(&[good("c1"), good(&id64), good("c3")]);
    let file = ok(
        &upload(
            &server,
            key,
            file_form("good.jsonl", &good_data, Some("batch")),
        )
        .await,
        "upload a good file",
    );
    let file_id = file["id"].as_str().unwrap().to_owned();
    assert!(file_id.starts_with("file-"), "{file}");
    assert_eq!(
        (
            &file["object"],
            &file["bytes"],
            &file["filename"],
            &file["purpose"],
            &file["status"]
        ),
        (
            &json!("file"),
            &json!(good_data.len()),
            &json!("good.jsonl"),
            &json!("batch"),
            &json!("processed")
        ),
        "{file}"
    );
    assert_eq!(count_files(&server).await, 1, "files after one good upload");
    let again = ok(
        &get(&server, key, &format!("/v1/files/{file_id}")).await,
        "GET file",
    );
    assert_eq!(again, file);
    let content = http()
        .get(server.url(&format!("/v1/files/{file_id}/content")))
        .bearer_auth(FILES_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(content.status().as_u16(), 200);
    assert_eq!(
        content.bytes().await.unwrap().as_ref(),
        good_data.as_slice()
    );

    // Two small batches fit; the list pages newest first with `after`.
    let body = json!({"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                      "completion_window": "24h"});
    let batches_before = count_batches(&server).await;
    let first = ok(
        &post(&server, key, "/v1/batches", &body).await,
        "a batch that fits",
    );
    let second = ok(
        &post(&server, key, "/v1/batches", &body).await,
        "a second batch that fits",
    );
    for b in [&first, &second] {
        assert!(b["id"].as_str().unwrap().starts_with("batch_"), "{b}");
        assert_eq!(
            (
                &b["object"],
                &b["input_file_id"],
                &b["request_counts"]["total"]
            ),
            (&json!("batch"), &json!(file_id), &json!(3)),
            "{b}"
        );
    }
    assert_eq!(count_batches(&server).await, batches_before + 2);
    let page1 = ok(&get(&server, key, "/v1/batches?limit=1").await, "page 1");
    assert_eq!(page1["data"].as_array().unwrap().len(), 1, "{page1}");
    assert_eq!(page1["has_more"], true, "{page1}");
    assert_eq!(page1["first_id"], page1["data"][0]["id"], "{page1}");
    assert_eq!(page1["last_id"], page1["data"][0]["id"], "{page1}");
    let after = page1["last_id"].as_str().unwrap();
    let page2 = ok(
        &get(&server, key, &format!("/v1/batches?limit=1&after={after}")).await,
        "page 2",
    );
    assert_eq!(page2["data"].as_array().unwrap().len(), 1, "{page2}");
    let paged: HashSet<&Value> = [&page1["data"][0]["id"], &page2["data"][0]["id"]].into();
    let created: HashSet<&Value> = [&first["id"], &second["id"]].into();
    assert_eq!(paged, created, "pages {page1} {page2}");
}
