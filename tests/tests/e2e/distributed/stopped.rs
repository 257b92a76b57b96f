//! An executor that hangs rather than dies (SIGSTOP): its socket stays
//! open and its broker session alive for a while, so nothing but its silence
//! tells. Its stream ends with a typed `executor_lost` once it misses its
//! reports, new requests go to the other executor, and once it resumes
//! (SIGCONT) it is routed to again.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{long_stream, running, successes, survivor_serves_new_requests};
use crate::cluster::Cluster;
use crate::harness::http;

fn signal(pid: u32, sig: &str) {
    let st = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill {sig} {pid}: {st}");
}

/// Requests the executor finished by reaching `max_tokens`.
async fn finished_at_length(s: &crate::harness::Server) -> f64 {
    crate::harness::metric_sum(
        &s.metrics().await,
        "stoker_request_success_total",
        &["lane=\"interactive\"", "finished_reason=\"length\""],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_executor_ends_its_stream_typed_and_is_routed_around_until_it_resumes() {
    let cluster = Cluster::start("diststop", 2).await;
    let model = cluster.api.model_id(None).await;

    let (mut sse, _) = long_stream(&cluster.api, &model).await;
    let mut victim = None;
    for (i, ex) in cluster.executors.iter().enumerate() {
        if running(ex).await >= 1.0 {
            victim = Some(i);
        }
    }
    let victim = victim.expect("one executor runs the long stream");
    let survivor = 1 - victim;
    let victim_finished = finished_at_length(&cluster.executors[victim]).await;
    let pid = cluster.executors[victim].pid();
    signal(pid, "-STOP");
    let stopped = Instant::now();

    let error = loop {
        let data = tokio::time::timeout(Duration::from_secs(60), sse.next())
            .await
            .expect("the stream neither continued nor ended after SIGSTOP")
            .expect("the stream ended without an error event");
        assert_ne!(data, "[DONE]", "a stopped executor's stream cannot finish");
        let v: Value = serde_json::from_str(&data).expect("event JSON");
        if v.get("error").is_some() {
            break v;
        }
    };
    let ended = stopped.elapsed();
    assert_eq!(error["error"]["code"], "executor_lost", "{error}");
    println!("stopped executor: its stream ended executor_lost after {ended:?}");

    // Routed around while it is stopped.
    survivor_serves_new_requests(&cluster, &model, survivor, "while stopped").await;

    // Resumed, it reports again and is routed to again.
    signal(pid, "-CONT");
    let t = Instant::now();
    cluster.wait_live(2).await;
    println!("resumed executor live again after {:?}", t.elapsed());
    // What it was running when it stopped ends (cancelled or finished)
    // before its successes are counted.
    let t = Instant::now();
    while running(&cluster.executors[victim]).await > 0.0 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the resumed executor still runs its old stream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "resumed executor dropped its old stream after {:?}",
        t.elapsed()
    );
    // The API declared that stream lost and told the executor to cancel it:
    // it must not run its 400 tokens to the end for a client that is gone.
    assert_eq!(
        finished_at_length(&cluster.executors[victim]).await,
        victim_finished,
        "the resumed executor finished the stream the API had declared lost"
    );
    let served_before = successes(&cluster.executors[victim], "interactive").await;
    let sends = (0..8).map(|i| {
        let model = model.clone();
        let url = cluster.api.url("/v1/completions");
        async move {
            http()
                .post(url)
                .json(
                    &json!({"model": model, "prompt": format!("Name {i} colours:"),
                              "max_tokens": 24, "ignore_eos": true}),
                )
                .send()
                .await
                .expect("request after SIGCONT")
                .status()
                .as_u16()
        }
    });
    let statuses = futures_util::future::join_all(sends).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let served = successes(&cluster.executors[victim], "interactive").await - served_before;
    assert!(
        served >= 1.0,
        "the resumed executor took none of 8 concurrent requests; its log:\n{}\nthe API's log:\n{}\nthe API's view: {:?}",
        cluster.executors[victim].stderr_tail(4000),
        cluster.api.stderr_tail(6000),
        cluster.executors_view().await
    );
}
