//! One HTTP client for every client command (`stoker admin`, `stoker batch`):
//! where the server is, the bearer key, how a non-2xx answer becomes a typed
//! [`CliError`], and the one rule that turns an error into an exit code.
//!
//! Exit codes: 0 on success; 1 when the server cannot be reached, answers
//! something unreadable or 5xx; 2 for bad local input and for the server's 4xx
//! answers (the request itself is wrong: retrying it will not help).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::Value;

use crate::table::cell;

/// Where a client command finds the server, shared by `stoker admin` and
/// `stoker batch`.
#[derive(Args, Debug)]
pub struct ServerArgs {
    /// Base URL of the stoker server.
    #[arg(long, env = "STOKER_URL", default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// API key with the command's scope (`admin` or `batch`).
    #[arg(long, env = "STOKER_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Print the server's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Why a command failed, and so its exit code.
#[derive(Debug, PartialEq)]
pub enum CliError {
    /// Bad local input: a file, an argument. Exit 2.
    Input(String),
    /// The server could not be reached, answered something unreadable, or the
    /// request cannot be served yet. Exit 1.
    Failed(String),
    /// The server refused with its error body. Exit 2 for 4xx, 1 otherwise.
    Server {
        status: u16,
        code: String,
        message: String,
        retry_after: Option<String>,
        // Boxed: a JSON value is large beside the other fields.
        body: Box<Value>,
    },
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Input(_) => 2,
            CliError::Failed(_) => 1,
            CliError::Server { status, .. } if (400..500).contains(status) => 2,
            CliError::Server { .. } => 1,
        }
    }

    /// Worth retrying while following a batch: the server may be restarting.
    pub fn is_transient(&self) -> bool {
        match self {
            CliError::Failed(_) => true,
            CliError::Server { status, .. } => *status >= 500,
            CliError::Input(_) => false,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            CliError::Input(m) | CliError::Failed(m) => m.clone(),
            CliError::Server {
                status,
                code,
                message,
                retry_after,
                ..
            } => {
                let mut s = format!("the server answered {status} {code}: {message}");
                if let Some(r) = retry_after {
                    s.push_str(&format!(" (retry after {r} s)"));
                }
                s
            }
        }
    }
}

/// The HTTP side: one base URL, one optional key.
pub struct Api {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

impl Api {
    pub fn new(url: &str, key: Option<String>) -> Result<Api, CliError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| CliError::Failed(format!("building the HTTP client: {e}")))?;
        Ok(Api {
            http,
            base: url.trim_end_matches('/').to_owned(),
            key,
        })
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(k) => req.bearer_auth(k),
            None => req,
        }
    }

    /// Sends; a non-2xx answer becomes [`CliError::Server`].
    pub async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, CliError> {
        let resp = req
            .send()
            .await
            .map_err(|e| CliError::Failed(format!("cannot reach {}: {e}", self.base)))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = resp.text().await.unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let message = match body.pointer("/error/message").and_then(Value::as_str) {
            Some(m) => m.to_owned(),
            None => text.trim().chars().take(300).collect(),
        };
        Err(CliError::Server {
            status: status.as_u16(),
            code: cell(&body, "/error/code"),
            message,
            retry_after,
            body: Box::new(body),
        })
    }

    pub async fn json(&self, req: reqwest::RequestBuilder) -> Result<Value, CliError> {
        let resp = self.send(req).await?;
        let status = resp.status();
        resp.json().await.map_err(|e| {
            CliError::Failed(format!("the server answered {status} without JSON: {e}"))
        })
    }

    pub async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.json(self.request(reqwest::Method::GET, path)).await
    }
}

/// Prints a failed command's error (with `--json`, the server's body on
/// stdout too) and gives its exit code.
pub fn report(command: &str, e: &CliError, json_out: bool) -> ExitCode {
    if let (true, CliError::Server { body, .. }) = (json_out, e)
        && !body.is_null()
    {
        println!("{body}");
    }
    eprintln!("stoker {command}: {}", e.describe());
    ExitCode::from(e.exit_code())
}

/// Prints a JSON answer as `--json` does.
pub fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Percent-encodes a path segment.
pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(enc("a/b c"), "a%2Fb%20c");
        assert_eq!(enc("ro_12.x-y"), "ro_12.x-y");
    }

    #[test]
    fn server_errors_exit_2_for_4xx_and_1_otherwise() {
        let server = |status| CliError::Server {
            status,
            code: "x".into(),
            message: "m".into(),
            retry_after: Some("7".into()),
            body: Box::new(Value::Null),
        };
        assert_eq!(server(404).exit_code(), 2);
        assert_eq!(server(429).exit_code(), 2);
        assert_eq!(server(503).exit_code(), 1);
        assert!(server(503).is_transient() && !server(429).is_transient());
        assert_eq!(
            server(429).describe(),
            "the server answered 429 x: m (retry after 7 s)"
        );
        assert_eq!(CliError::Input("bad".into()).exit_code(), 2);
        assert_eq!(CliError::Failed("down".into()).exit_code(), 1);
    }
}
