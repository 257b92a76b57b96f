//! Slow and broken clients against the real accept loop: a client that sends
//! half its headers, one whose body stops arriving (JSON and multipart), one
//! that stops reading its stream, and one that half-closes its socket. Each
//! is cut off by its bound (set short here), its request is cancelled and
//! its KV freed, and a well-behaved client is served meanwhile.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use stoker_api::roles::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{MODEL_ID, chat, client, config, kv_idle, rt, start, url};

const BOUND: Duration = Duration::from_millis(500);

/// Everything the server sends until it closes the connection, and how long
/// that took; fails past `within`.
async fn read_to_close(sock: &mut TcpStream, within: Duration) -> (String, Duration) {
    let t = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = within.saturating_sub(t.elapsed());
        match tokio::time::timeout(left, sock.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "the server kept the connection open past {within:?}; it sent {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), t.elapsed())
}

async fn well_behaved_client_is_served(s: &Server) {
    let t = Instant::now();
    let r = client()
        .post(url(s, "/v1/chat/completions"))
        .json(&chat("Say hi.", 2))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(t.elapsed() < Duration::from_secs(30));
}

/// The JSON error body at the end of a raw HTTP response.
fn error_code(response: &str) -> Value {
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str::<Value>(body).unwrap_or_default()["error"]["code"].clone()
}

#[test]
fn slow_and_broken_clients_are_cut_off_by_their_bounds() {
    let mut c = config();
    c.limits.header_read_timeout_ms = BOUND.as_millis() as u64;
    c.limits.body_idle_timeout_ms = BOUND.as_millis() as u64;
    c.limits.write_stall_timeout_ms = BOUND.as_millis() as u64;
    // The kernel's own send buffer would take this whole stream.
    c.limits.send_buffer_bytes = 32 * 1024;
    c.engine.max_num_seqs = 4;
    rt().block_on(async {
        let s = start(c).await;
        let engine = s.state.served().unwrap().backend.clone();

        // Half a request head, then nothing.
        let mut loris = TcpStream::connect(s.addr).await.unwrap();
        loris
            .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-")
            .await
            .unwrap();
        well_behaved_client_is_served(&s).await;
        let (sent, took) = read_to_close(&mut loris, Duration::from_secs(30)).await;
        assert!(
            sent.is_empty() || sent.starts_with("HTTP/1.1 408"),
            "{sent}"
        );
        eprintln!("half-sent headers: closed after {took:?}");

        // A JSON body that stops after 10 of its 100 bytes.
        let mut sock = TcpStream::connect(s.addr).await.unwrap();
        sock.write_all(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
              content-length: 100\r\n\r\n{\"model\":",
        )
        .await
        .unwrap();
        let (sent, took) = read_to_close(&mut sock, Duration::from_secs(30)).await;
        assert!(sent.starts_with("HTTP/1.1 408"), "{sent}");
        assert_eq!(error_code(&sent), "request_timeout", "{sent}");
        assert!(took >= BOUND - Duration::from_millis(50), "{took:?}");
        eprintln!("stalled JSON body: 408 after {took:?}");

        // A multipart upload that stops inside its file part.
        let mut sock = TcpStream::connect(s.addr).await.unwrap();
        sock.write_all(
            b"POST /v1/files HTTP/1.1\r\nhost: x\r\n\
              content-type: multipart/form-data; boundary=XX\r\ncontent-length: 1000\r\n\r\n\
              --XX\r\ncontent-disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
              --XX\r\ncontent-disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n\r\n{\"cus",
        )
        .await
        .unwrap();
        let (sent, _) = read_to_close(&mut sock, Duration::from_secs(30)).await;
        assert!(sent.starts_with("HTTP/1.1 408"), "{sent}");
        assert_eq!(error_code(&sent), "request_timeout", "{sent}");

        // A stream whose reader stops: a small receive window, large chunks
        // (20 alternatives a token), and nothing read. Without the bound the
        // request would hold its slot until all 1,000 tokens were made.
        let generated = engine.stats().generation_tokens_total;
        let sock = tokio::net::TcpSocket::new_v4().unwrap();
        sock.set_recv_buffer_size(4096).unwrap();
        let mut sock = sock.connect(s.addr).await.unwrap();
        let body = json!({"model": MODEL_ID, "stream": true, "max_tokens": 1000,
            "ignore_eos": true, "logprobs": true, "top_logprobs": 20, "temperature": 0,
            "messages": [{"role": "user", "content": "Tell me a long story."}]})
        .to_string();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n",
            body.len()
        );
        sock.write_all(head.as_bytes()).await.unwrap();
        sock.write_all(body.as_bytes()).await.unwrap();
        let t = Instant::now();
        while engine.stats().kv_blocks_used == 0 {
            assert!(t.elapsed() < Duration::from_secs(30), "the stream never started");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let took = kv_idle(&s, Duration::from_secs(60)).await;
        let made = engine.stats().generation_tokens_total - generated;
        eprintln!("stalled reader: cut off after {made} tokens, KV idle in {took:?}");
        assert!(made < 1000, "the stalled stream ran to max_tokens ({made} tokens)");
        assert_eq!(s.state.admission.snapshot(), Default::default());
        drop(sock);

        // A client that sends its request and half-closes: hyper reads the
        // end of input as a hang-up, so the request is cancelled.
        let mut sock = TcpStream::connect(s.addr).await.unwrap();
        let body = chat("Write a very long story about a lighthouse.", 1000).to_string();
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        sock.write_all(req.as_bytes()).await.unwrap();
        sock.shutdown().await.unwrap();
        let _ = read_to_close(&mut sock, Duration::from_secs(30)).await;
        kv_idle(&s, Duration::from_secs(5)).await;
        assert_eq!(s.state.admission.snapshot(), Default::default());

        well_behaved_client_is_served(&s).await;
    });
}
