//! The shared transport layout (`kafka.layout = "shared"`) end to end: one
//! job partition per executor slot and one reply partition per API slot, so
//! the two executors both write the API's one reply partition. Concurrent
//! streaming and non-streaming chats must all come back whole, from both
//! executors, with the topics made at the shared layout's partition counts.

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{Value, json};
use stoker_controlplane::transport::{Kafka, KafkaSettings};

use super::successes;
use crate::cluster::Cluster;
use crate::harness::{Server, Sse, chunk_text, http};

const SHARED: &str = "[kafka]\nlayout = \"shared\"\nexecutor_slots = 4\napi_slots = 2\n";

/// Prompts, each sent once streaming and once not, all at the same time.
const PROMPTS: usize = 4;

fn body(i: usize, stream: bool) -> Value {
    json!({
        "model": "m",
        "messages": [{"role": "user", "content": format!("Tell me fact number {i} about the sea.")}],
        "max_tokens": 24,
        "temperature": 0,
        "stream": stream,
    })
}

/// One chat's whole text and the executor that served it.
async fn chat(api: &Server, model: &str, i: usize, stream: bool) -> (String, String) {
    let mut b = body(i, stream);
    b["model"] = json!(model);
    let r = http()
        .post(api.url("/v1/chat/completions"))
        .json(&b)
        .send()
        .await
        .unwrap_or_else(|e| panic!("chat {i} (stream {stream}): {e}"));
    assert_eq!(r.status().as_u16(), 200, "chat {i} (stream {stream})");
    let executor = r
        .headers()
        .get("x-stoker-executor")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if !stream {
        let v: Value = r.json().await.expect("chat JSON");
        let text = v["choices"][0]["message"]["content"].as_str().unwrap_or("");
        return (text.to_string(), executor);
    }
    let mut sse = Sse::new(r);
    let mut text = String::new();
    let mut finished = false;
    while let Some(data) = tokio::time::timeout(Duration::from_secs(60), sse.next())
        .await
        .unwrap_or_else(|_| panic!("stream {i} stalled"))
    {
        if data == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(&data).expect("chunk JSON");
        assert!(chunk.get("error").is_none(), "stream {i}: {chunk}");
        text.push_str(&chunk_text(&chunk));
        finished |= chunk["choices"][0]["finish_reason"].is_string();
    }
    assert!(sse.done && finished, "stream {i} ended without finishing");
    (text, executor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_layout_serves_concurrent_chats_from_two_executors() {
    let cluster = Cluster::start_with("distshared", 2, SHARED, None).await;
    let model = cluster.api.model_id(None).await;

    // Jobs: one partition per executor slot; replies: one per API slot.
    let kafka = Kafka::connect(KafkaSettings::new(cluster.broker.addr())).expect("connect");
    for (topic, want) in [("stoker.interactive", 4), ("stoker.replies", 2)] {
        let k = kafka.clone();
        let have = tokio::task::spawn_blocking(move || k.partition_count(topic))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{topic}: {e}"));
        assert_eq!(have, want, "{topic}");
    }

    let before = [
        successes(&cluster.executors[0], "interactive").await,
        successes(&cluster.executors[1], "interactive").await,
    ];
    for round in 0..2 {
        let calls = (0..PROMPTS)
            .flat_map(|i| [(i, true), (i, false)])
            .map(|(i, stream)| chat(&cluster.api, &model, i, stream));
        let answers = join_all(calls).await;
        for i in 0..PROMPTS {
            let (streamed, ex_s) = &answers[2 * i];
            let (whole, ex_w) = &answers[2 * i + 1];
            assert!(!streamed.is_empty(), "round {round}, prompt {i}: no text");
            // Greedy: a stream that lost or doubled a delta differs.
            assert_eq!(
                streamed, whole,
                "round {round}, prompt {i}: streamed on {ex_s}, whole on {ex_w}"
            );
        }
    }
    let served = [
        successes(&cluster.executors[0], "interactive").await - before[0],
        successes(&cluster.executors[1], "interactive").await - before[1],
    ];
    assert_eq!(served[0] + served[1], (4 * PROMPTS) as f64, "{served:?}");
    assert!(
        served.iter().all(|&n| n >= 1.0),
        "both executors wrote the one reply partition: {served:?}"
    );
}
