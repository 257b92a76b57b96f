//! Mass cancellation: 500 streaming clients admitted (16 running, the rest
//! waiting) hang up at once. Every sequence is cancelled, the KV pool is
//! back to idle within a second, admission holds nothing, and the server
//! serves the next request as before.

use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{MODEL_ID, client, config, kv_idle, rt, start, url};

const STREAMS: usize = 500;

#[test]
fn five_hundred_streams_cancelled_at_once_free_everything_within_a_second() {
    let mut c = config();
    c.engine.max_num_seqs = 16;
    c.engine.kv_cache_mib = 512;
    c.admission.max_waiting_requests = STREAMS;
    c.admission.max_ttft_ms = 0;
    rt().block_on(async {
        let s = start(c).await;
        let engine = s.state.served().unwrap().backend.clone();
        let idle_free = engine.stats().kv_blocks_free;
        let body = json!({"model": MODEL_ID, "prompt": "Once upon a time", "stream": true,
            "max_tokens": 200, "ignore_eos": true, "temperature": 0})
        .to_string();
        let req = format!(
            "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        let mut socks = Vec::with_capacity(STREAMS);
        for _ in 0..STREAMS {
            let mut sock = TcpStream::connect(s.addr).await.unwrap();
            sock.write_all(req.as_bytes()).await.unwrap();
            socks.push(sock);
        }
        // Every one admitted: running or waiting.
        let t = Instant::now();
        loop {
            let a = s.state.admission.snapshot();
            if a.running + a.waiting == STREAMS {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "not all {STREAMS} streams were admitted: {a:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let st = engine.stats();
        assert!(st.kv_blocks_used > 0 && st.running() > 0, "{st:?}");
        eprintln!(
            "{STREAMS} streams admitted: {} running, {} waiting",
            st.running(),
            st.waiting()
        );

        drop(socks);
        let took = kv_idle(&s, Duration::from_secs(1)).await;
        eprintln!("{STREAMS} hang-ups: KV idle in {took:?}");
        assert_eq!(
            engine.stats().kv_blocks_free,
            idle_free,
            "a KV block leaked"
        );
        let t = Instant::now();
        while s.state.admission.snapshot() != Default::default() {
            assert!(
                t.elapsed() < Duration::from_secs(1),
                "admission still holds {:?}",
                s.state.admission.snapshot()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }

        let r = client()
            .post(url(&s, "/v1/completions"))
            .json(&json!({"model": MODEL_ID, "prompt": "Hi", "max_tokens": 2}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    });
}
