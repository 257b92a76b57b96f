//! What a benchmark drives: one request in, one [`Outcome`] out, with the
//! time of every streamed chunk.
//!
//! [`HttpTarget`] speaks the OpenAI streaming protocol to any compatible
//! server (stoker, vLLM, llama.cpp's `llama-server`). The trait exists so the
//! generator's scheduling and statistics can be tested against a fake with
//! known delays on tokio's virtual clock, where "within 1 ms" is exact.
//! All times are `tokio::time::Instant` for that reason.
//!
//! Two response headers are read besides the body. `Retry-After` on a refusal
//! is kept as a duration (integer or fractional seconds; an HTTP-date, which
//! this client does not parse, reads as 1 s) so a client can honour it.
//! `x-stoker-ttft-estimate-ms` on an admitted response is stoker's admission
//! estimate of the time to first token, in milliseconds (a float): the
//! scenario harness sets it beside the TTFT the client observed. Servers that
//! do not send it leave [`Outcome::predicted_ttft_ms`] empty.
//!
//! Requests stream by default; a non-streaming target reads one JSON body,
//! and its only "chunk" is the end of the response (TTFT equals E2E).

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::spec::Endpoint;

/// One request as planned.
#[derive(Clone, Debug)]
pub struct Planned {
    pub index: u64,
    pub prompt: String,
    /// Exact prompt tokens when the generator counted them.
    pub prompt_tokens: Option<u32>,
    pub max_tokens: u32,
    /// Sent in the batch lane (`service_tier: flex`).
    pub batch: bool,
}

/// Why a request did not complete.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// The OpenAI error `code` (`server_overloaded`, ...), or `http_<status>`,
    /// `timeout`, `connect`, `send`, `stream` when the server sent none.
    pub code: String,
    pub status: Option<u16>,
    /// The refusal's `Retry-After`, when it carried one.
    pub retry_after: Option<Duration>,
}

/// The header stoker sets on admitted responses: its admission estimate of
/// the time to first token, in milliseconds.
pub const TTFT_ESTIMATE_HEADER: &str = "x-stoker-ttft-estimate-ms";

/// Longest `Retry-After` kept (a day); a client caps its own wait further.
const MAX_RETRY_AFTER_SECS: f64 = 86_400.0;

/// `Retry-After` as a duration: integer or fractional seconds; an HTTP-date
/// (or anything else that is not a number of seconds) reads as 1 s.
pub fn parse_retry_after(v: &str) -> Duration {
    match v.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Duration::from_secs_f64(x.min(MAX_RETRY_AFTER_SECS)),
        _ => Duration::from_secs(1),
    }
}

/// `x-stoker-ttft-estimate-ms` as milliseconds, when it is a number at least 0.
pub fn parse_ttft_estimate(v: &str) -> Option<f64> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
}

/// What one request did, as the client saw it.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub index: u64,
    pub batch: bool,
    pub start: Instant,
    pub end: Instant,
    /// Arrival of each chunk that carried text.
    pub chunks: Vec<Instant>,
    pub prompt_tokens: Option<u32>,
    pub output_tokens: Option<u32>,
    pub max_tokens: u32,
    /// The revision that answered (`x-stoker-revision`), when the server names it.
    pub revision: Option<String>,
    /// The server's admission estimate of TTFT in ms (`x-stoker-ttft-estimate-ms`).
    pub predicted_ttft_ms: Option<f64>,
    pub failure: Option<Failure>,
    /// When this is a retry: how long the server took to refuse the first
    /// send (whose outcome this one replaces).
    pub refused_first_in: Option<Duration>,
}

impl Outcome {
    pub fn new(p: &Planned) -> Self {
        let now = Instant::now();
        Outcome {
            index: p.index,
            batch: p.batch,
            start: now,
            end: now,
            chunks: Vec::new(),
            prompt_tokens: p.prompt_tokens,
            output_tokens: None,
            max_tokens: p.max_tokens,
            revision: None,
            predicted_ttft_ms: None,
            failure: None,
            refused_first_in: None,
        }
    }

    pub fn ok(&self) -> bool {
        self.failure.is_none()
    }

    pub fn ttft(&self) -> Option<Duration> {
        self.chunks.first().map(|t| *t - self.start)
    }

    pub fn e2e(&self) -> Duration {
        self.end - self.start
    }

    /// Output tokens: the server's count, else one per text chunk.
    pub fn tokens_out(&self) -> u32 {
        self.output_tokens.unwrap_or(self.chunks.len() as u32)
    }

    /// Time per output token after the first.
    pub fn tpot(&self) -> Option<Duration> {
        let first = *self.chunks.first()?;
        let n = self.tokens_out();
        (n > 1).then(|| (self.end - first) / (n - 1))
    }

    fn fail(
        &mut self,
        code: impl Into<String>,
        status: Option<u16>,
        retry_after: Option<Duration>,
    ) {
        self.end = Instant::now();
        self.failure = Some(Failure {
            code: code.into(),
            status,
            retry_after,
        });
    }
}

/// Something a benchmark can send requests to.
pub trait Target: Send + Sync + 'static {
    fn send(&self, p: Planned) -> BoxFuture<'_, Outcome>;
}

/// An OpenAI-compatible HTTP server.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    client: reqwest::Client,
    url: String,
    api_key: Option<String>,
    endpoint: Endpoint,
    model: String,
    ignore_eos: bool,
    timeout: Duration,
    stream: bool,
}

impl HttpTarget {
    pub fn new(
        client: reqwest::Client,
        url: &str,
        api_key: Option<String>,
        endpoint: Endpoint,
        model: String,
        ignore_eos: bool,
        timeout: Duration,
    ) -> Self {
        HttpTarget {
            client,
            url: url.trim_end_matches('/').to_owned(),
            api_key,
            endpoint,
            model,
            ignore_eos,
            timeout,
            stream: true,
        }
    }

    /// Streaming (the default) or one JSON body per request.
    pub fn streaming(mut self, on: bool) -> Self {
        self.stream = on;
        self
    }

    /// The request body for `p`: greedy; when streaming, usage in the last chunk.
    pub fn body(&self, p: &Planned) -> Value {
        let mut b = match self.endpoint {
            Endpoint::Completions => json!({"model": self.model, "prompt": p.prompt}),
            Endpoint::Chat => json!({
                "model": self.model,
                "messages": [{"role": "user", "content": p.prompt}],
            }),
        };
        let o = b.as_object_mut().expect("object");
        o.insert("max_tokens".into(), p.max_tokens.into());
        o.insert("stream".into(), self.stream.into());
        if self.stream {
            o.insert("stream_options".into(), json!({"include_usage": true}));
        }
        o.insert("temperature".into(), 0.into());
        if self.ignore_eos {
            o.insert("ignore_eos".into(), true.into());
        }
        if p.batch {
            o.insert("service_tier".into(), "flex".into());
        }
        b
    }

    async fn run(&self, p: Planned) -> Outcome {
        let mut out = Outcome::new(&p);
        let mut req = self
            .client
            .post(format!("{}{}", self.url, self.endpoint.path()))
            .json(&self.body(&p));
        if let Some(k) = &self.api_key {
            req = req.bearer_auth(k);
        }
        let deadline = out.start + self.timeout;
        let resp = match tokio::time::timeout_at(deadline, req.send()).await {
            Err(_) => {
                out.fail("timeout", None, None);
                return out;
            }
            Ok(Err(e)) => {
                out.fail(if e.is_connect() { "connect" } else { "send" }, None, None);
                return out;
            }
            Ok(Ok(r)) => r,
        };
        out.revision = resp
            .headers()
            .get("x-stoker-revision")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        out.predicted_ttft_ms = resp
            .headers()
            .get(TTFT_ESTIMATE_HEADER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_ttft_estimate);
        let status = resp.status().as_u16();
        if status != 200 {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .map(|v| parse_retry_after(v.to_str().unwrap_or("")));
            let body = tokio::time::timeout_at(deadline, resp.bytes()).await;
            let code = body
                .ok()
                .and_then(Result::ok)
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|v| error_code(&v))
                .unwrap_or_else(|| format!("http_{status}"));
            out.fail(code, Some(status), retry_after);
            return out;
        }
        if !self.stream {
            return whole_body(out, resp, deadline, status).await;
        }
        let mut stream = resp.bytes_stream();
        let mut sse = SseParser::default();
        loop {
            let next = match tokio::time::timeout_at(deadline, stream.next()).await {
                Err(_) => {
                    out.fail("timeout", Some(status), None);
                    return out;
                }
                Ok(n) => n,
            };
            let bytes = match next {
                None => break,
                Some(Err(_)) => {
                    out.fail("stream", Some(status), None);
                    return out;
                }
                Some(Ok(b)) => b,
            };
            let now = Instant::now();
            for event in sse.push(&bytes) {
                match event {
                    SseEvent::Done => {}
                    SseEvent::Data(v) => {
                        if let Some(code) = v.get("error").and_then(|_| error_code(&v)) {
                            out.fail(code, Some(status), None);
                            return out;
                        }
                        if chunk_text(&v).is_some_and(|t| !t.is_empty()) {
                            out.chunks.push(now);
                        }
                        take_usage(&mut out, &v);
                    }
                }
            }
        }
        out.end = Instant::now();
        if out.chunks.is_empty() && out.output_tokens.unwrap_or(0) > 0 {
            // Tokens were counted but no text streamed (all whitespace-free
            // special tokens, say): the end is the only arrival we saw.
            out.chunks.push(out.end);
        }
        out
    }
}

impl Target for HttpTarget {
    fn send(&self, p: Planned) -> BoxFuture<'_, Outcome> {
        Box::pin(self.run(p))
    }
}

/// A non-streaming answer: one JSON body whose end is the only arrival.
async fn whole_body(
    mut out: Outcome,
    resp: reqwest::Response,
    deadline: Instant,
    status: u16,
) -> Outcome {
    let v = match tokio::time::timeout_at(deadline, resp.bytes()).await {
        Err(_) => {
            out.fail("timeout", Some(status), None);
            return out;
        }
        Ok(Err(_)) => {
            out.fail("stream", Some(status), None);
            return out;
        }
        Ok(Ok(b)) => serde_json::from_slice::<Value>(&b).unwrap_or(Value::Null),
    };
    if v.get("error").is_some() {
        let code = error_code(&v).unwrap_or_else(|| "error".into());
        out.fail(code, Some(status), None);
        return out;
    }
    take_usage(&mut out, &v);
    out.end = Instant::now();
    let text = v
        .pointer("/choices/0/text")
        .or_else(|| v.pointer("/choices/0/message/content"))
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty());
    if text || out.output_tokens.unwrap_or(0) > 0 {
        out.chunks.push(out.end);
    }
    out
}

/// Token counts from a body's or the last chunk's `usage`.
fn take_usage(out: &mut Outcome, v: &Value) {
    if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).map(|x| x as u32);
        out.prompt_tokens = n("prompt_tokens").or(out.prompt_tokens);
        out.output_tokens = n("completion_tokens");
    }
}

/// The OpenAI error body's `code` (or `type` when code is null).
fn error_code(v: &Value) -> Option<String> {
    let e = v.get("error")?;
    e.get("code")
        .and_then(Value::as_str)
        .or_else(|| e.get("type").and_then(Value::as_str))
        .map(str::to_owned)
        .or_else(|| Some("error".into()))
}

/// The text a completion or chat chunk carries.
fn chunk_text(v: &Value) -> Option<&str> {
    let c = v.get("choices")?.get(0)?;
    c.get("text")
        .and_then(Value::as_str)
        .or_else(|| c.get("delta")?.get("content")?.as_str())
}

#[derive(Debug, PartialEq)]
pub enum SseEvent {
    Data(Value),
    Done,
}

/// Server-sent events from arbitrary byte chunks: `data:` lines of JSON,
/// frames split anywhere, `\r\n` or `\n` line ends. Lines that are not
/// JSON are skipped: a comment or keep-alive must not end a measurement.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
}

/// A line longer than this without a newline is dropped (a hostile server).
const MAX_LINE: usize = 16 << 20;

impl SseParser {
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(nl) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let line = &self.buf[start..start + nl];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if let Some(data) = line.strip_prefix(b"data:") {
                let data = data.strip_prefix(b" ").unwrap_or(data);
                if data == b"[DONE]" {
                    out.push(SseEvent::Done);
                } else if let Ok(v) = serde_json::from_slice::<Value>(data) {
                    out.push(SseEvent::Data(v));
                }
            }
            start += nl + 1;
        }
        self.buf.drain(..start);
        if self.buf.len() > MAX_LINE {
            self.buf.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_frames_split_anywhere() {
        let text = "data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n: keep-alive\n\ndata: [DONE]\n\n";
        for cut in 0..text.len() {
            let mut p = SseParser::default();
            let mut ev = p.push(&text.as_bytes()[..cut]);
            ev.extend(p.push(&text.as_bytes()[cut..]));
            assert_eq!(ev.len(), 2, "cut at {cut}");
            assert_eq!(ev[1], SseEvent::Done);
        }
    }

    #[test]
    fn sse_ignores_garbage_and_bounds_its_buffer() {
        let mut p = SseParser::default();
        assert!(p.push(b"data: {not json\n\nevent: x\n\n").is_empty());
        assert!(p.push(&vec![b'x'; MAX_LINE + 1]).is_empty());
        assert!(p.buf.is_empty());
        let ev = p.push(b"data: {\"error\":{\"code\":\"executor_lost\"}}\n\n");
        let SseEvent::Data(v) = &ev[0] else { panic!() };
        assert_eq!(error_code(v).as_deref(), Some("executor_lost"));
    }

    #[test]
    fn retry_after_and_the_ttft_estimate_parse() {
        assert_eq!(parse_retry_after("3"), Duration::from_secs(3));
        assert_eq!(parse_retry_after(" 0.25 "), Duration::from_millis(250));
        assert_eq!(parse_retry_after("1e9"), Duration::from_secs(86_400));
        for odd in ["Wed, 21 Oct 2015 07:28:00 GMT", "-1", "NaN", ""] {
            assert_eq!(parse_retry_after(odd), Duration::from_secs(1), "{odd}");
        }
        assert_eq!(parse_ttft_estimate("12.5"), Some(12.5));
        assert_eq!(parse_ttft_estimate("0"), Some(0.0));
        assert_eq!(parse_ttft_estimate("-3"), None);
        assert_eq!(parse_ttft_estimate("soon"), None);
    }

    #[test]
    fn chunk_text_of_both_routes() {
        let c = json!({"choices":[{"text":"hi"}]});
        assert_eq!(chunk_text(&c), Some("hi"));
        let d = json!({"choices":[{"delta":{"content":"yo"}}]});
        assert_eq!(chunk_text(&d), Some("yo"));
        assert_eq!(chunk_text(&json!({"choices":[]})), None);
    }
}
