//! Starting a real `stoker serve` process for one test, and the small HTTP and Python
//! helpers the tests share.
//!
//! Each [`Server`] gets its own folder under the system temp dir (config file, data
//! dir, the Python scripts' output), listens on `127.0.0.1:0`, and is killed and its
//! folder removed on drop. Its stderr (the logs) is collected into a buffer by a
//! thread, so a test can read it and a failing test prints its tail.
//!
//! The model, the venv's Python and temp dirs come from `stoker-test-support`, so a
//! missing prerequisite fails with the script that fixes it.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
pub use stoker_test_support::{TempDir, model_path, python_bin, repo_root};

/// How long a server may take from spawn to `/health/ready` answering 200 (model
/// load and warm-up on a busy two-core machine).
const READY_TIMEOUT: Duration = Duration::from_secs(240);
/// How long a Python script may run.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(420);

/// `target/release/stoker`, found next to the test executable's `deps/` folder.
pub fn stoker_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test exe has a folder");
    let profile_dir = deps.parent().expect("deps/ has a parent");
    let bin = profile_dir.join(format!("stoker{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "stoker binary not found at {}\nbuild it first: cargo build --release -p stoker --bin stoker",
        bin.display()
    );
    bin
}

/// The file name of llama.cpp's Hermes 2 Pro tool-use template, the one the
/// tests serve SmolLM2 under (`--chat-template`).
pub const HERMES_TOOL_TEMPLATE: &str = "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja";

/// Where [`HERMES_TOOL_TEMPLATE`] lies; fails with the fix when it is missing.
pub fn hermes_tool_template() -> PathBuf {
    let path = repo_root()
        .join("models/llama.cpp/templates")
        .join(HERMES_TOOL_TEMPLATE);
    assert!(
        path.is_file(),
        "{} is missing: run scripts/fetch-llama-cpp-data.sh",
        path.display()
    );
    path
}

/// A fresh, empty folder under the system temp dir, removed when dropped.
pub fn fresh_dir(name: &str) -> TempDir {
    stoker_test_support::temp_dir(&format!("e2e-{name}"))
}

/// A string unlikely to occur anywhere by chance.
pub fn unique_token(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}{:x}{:x}", std::process::id(), nanos)
}

/// A reqwest client that never goes through a proxy (everything here is loopback).
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(180))
        .build()
        .expect("reqwest client")
}

#[derive(Debug, Default)]
pub struct ServerOptions {
    /// Extra TOML appended to the config file (sections such as `[engine]`, keys).
    pub config: String,
    /// Extra environment variables for the server process (e.g. `RUST_LOG`).
    pub env: Vec<(String, String)>,
    /// A data dir that outlives the server (restart tests); default: one inside
    /// the server's own temp folder.
    pub data_dir: Option<PathBuf>,
    /// The subcommand (`serve` when unset; `api`, `executor`).
    pub command: Option<String>,
    /// Extra arguments after the common ones.
    pub args: Vec<String>,
    /// The GGUF file to serve; default: the SmolLM2 model ([`model_path`]).
    pub model: Option<PathBuf>,
}

impl ServerOptions {
    pub fn config(mut self, toml: &str) -> Self {
        self.config.push_str(toml);
        self.config.push('\n');
        self
    }

    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_path_buf());
        self
    }

    pub fn command(mut self, command: &str) -> Self {
        self.command = Some(command.to_string());
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn model(mut self, path: &Path) -> Self {
        self.model = Some(path.to_path_buf());
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }
}

#[derive(Debug)]
pub struct Server {
    child: Child,
    exit: Option<ExitStatus>,
    /// The server's own folder (config, default data dir, scripts' output).
    pub dir: PathBuf,
    /// Removes [`Server::dir`] when the server drops (after [`Drop`] kills it).
    _dir_guard: TempDir,
    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub base: String,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts `stoker serve` and waits until `/health/ready` answers 200.
    pub async fn start(name: &str, opts: ServerOptions) -> Server {
        let bin = stoker_bin();
        let model = opts.model.clone().unwrap_or_else(model_path);
        let dir_guard = fresh_dir(name);
        let dir = dir_guard.path().to_path_buf();
        let data_dir = opts.data_dir.clone().unwrap_or_else(|| dir.join("data"));
        let config_path = dir.join("stoker.toml");
        std::fs::write(&config_path, &opts.config).expect("write config");

        let mut cmd = Command::new(&bin);
        cmd.arg(opts.command.as_deref().unwrap_or("serve"))
            .arg("--config")
            .arg(&config_path)
            .arg("--model")
            .arg(&model)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(&data_dir)
            .args(&opts.args)
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The test's own environment must not configure the server behind its back.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("STOKER_") {
                cmd.env_remove(&key);
            }
        }
        cmd.env("RUST_LOG", "info");
        for (key, value) in &opts.env {
            cmd.env(key, value);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));

        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stderr_thread = {
            let mut pipe = child.stderr.take().expect("piped stderr");
            let buf = Arc::clone(&stderr);
            let echo = std::env::var_os("STOKER_E2E_ECHO").is_some();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 8192];
                loop {
                    match pipe.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if echo {
                                eprint!("{}", String::from_utf8_lossy(&chunk[..n]));
                            }
                            buf.lock().unwrap().extend_from_slice(&chunk[..n]);
                        }
                    }
                }
            })
        };

        // stdout: the first line announces the address; the rest is drained.
        let (tx, rx) = mpsc::channel::<String>();
        {
            let pipe = child.stdout.take().expect("piped stdout");
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    let _ = tx.send(line);
                }
            });
        }

        let mut server = Server {
            child,
            exit: None,
            dir,
            _dir_guard: dir_guard,
            base: String::new(),
            stderr,
            stderr_thread: Some(stderr_thread),
        };

        let deadline = Instant::now() + READY_TIMEOUT;
        let prefix = "stoker listening on http://";
        let base = loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    if let Some(addr) = line.trim().strip_prefix(prefix) {
                        break format!("http://{}", addr.trim_end_matches('/'));
                    }
                    eprintln!("[stoker stdout] {line}");
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = server.wait_exit(Duration::from_secs(5));
                    panic!(
                        "stoker closed stdout without printing '{prefix}PORT' (exit: {status:?})\n{}",
                        server.stderr_tail(8000)
                    );
                }
            }
            if let Some(status) = server.try_exit() {
                panic!(
                    "stoker exited before listening: {status}\n{}",
                    server.stderr_tail(8000)
                );
            }
            assert!(
                Instant::now() < deadline,
                "stoker printed no '{prefix}PORT' line within {READY_TIMEOUT:?}\n{}",
                server.stderr_tail(8000)
            );
        };
        server.base = base;

        let client = http();
        loop {
            let status = client
                .get(server.url("/health/ready"))
                .timeout(Duration::from_secs(10))
                .send()
                .await
                .map(|r| r.status().as_u16());
            if matches!(status, Ok(200)) {
                break;
            }
            if let Some(exit) = server.try_exit() {
                panic!(
                    "stoker exited while starting: {exit}\n{}",
                    server.stderr_tail(8000)
                );
            }
            assert!(
                Instant::now() < deadline,
                "/health/ready did not answer 200 within {READY_TIMEOUT:?} (last: {status:?})\n{}",
                server.stderr_tail(8000)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The OpenAI SDK's `base_url`.
    pub fn v1(&self) -> String {
        self.url("/v1")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    pub fn stderr_tail(&self, max: usize) -> String {
        let all = self.stderr();
        let mut start = all.len().saturating_sub(max);
        while !all.is_char_boundary(start) {
            start += 1;
        }
        format!(
            "--- stoker stderr (last {max} bytes) ---\n{}",
            &all[start..]
        )
    }

    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().expect("try_wait");
        }
        self.exit
    }

    /// Waits up to `timeout` for the process to exit; then waits for the stderr
    /// reader, so [`Server::stderr`] holds everything the process wrote.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                if let Some(thread) = self.stderr_thread.take() {
                    let _ = thread.join();
                }
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Async flavour of [`Server::wait_exit`], for use inside the tests' runtime.
    pub async fn wait_exit_async(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.try_exit().is_some() {
                return self.wait_exit(Duration::from_secs(5));
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status()
            .expect("run kill -TERM");
        assert!(
            status.success(),
            "kill -TERM {} failed: {status}",
            self.pid()
        );
    }

    /// Ends the process with SIGKILL (what `Child::kill` sends on Unix): no
    /// drain, no flush, as a crash or a lost machine would end it. Returns once
    /// it is gone and its stderr is collected.
    pub async fn kill9(&mut self) -> ExitStatus {
        if self.try_exit().is_none() {
            self.child.kill().expect("SIGKILL the server");
        }
        self.wait_exit_async(Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("stoker (pid {}) survived SIGKILL", self.pid()))
    }

    /// The id of the served model, from `GET /v1/models`.
    pub async fn model_id(&self, key: Option<&str>) -> String {
        let mut req = http().get(self.url("/v1/models"));
        if let Some(key) = key {
            req = req.bearer_auth(key);
        }
        let resp = req.send().await.expect("GET /v1/models");
        assert_eq!(resp.status().as_u16(), 200, "GET /v1/models");
        let body: Value = resp.json().await.expect("models JSON");
        body["data"][0]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no model id in {body}"))
            .to_string()
    }

    /// `GET /metrics` as text.
    pub async fn metrics(&self) -> String {
        let resp = http()
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics");
        assert_eq!(resp.status().as_u16(), 200, "GET /metrics");
        resp.text().await.expect("metrics body")
    }

    /// Runs `tests/python/{script}` with the venv's Python, with `STOKER_BASE_URL`
    /// (the SDK's base_url), `STOKER_ROOT_URL` and `STOKER_MODEL_PATH` set plus `env`.
    /// Panics, printing the script's output, unless it exits 0. Returns its stdout.
    pub async fn run_python(&self, script: &str, env: &[(&str, &str)]) -> String {
        let mut vars: Vec<(String, String)> = vec![
            ("STOKER_BASE_URL".into(), self.v1()),
            ("STOKER_ROOT_URL".into(), self.base.clone()),
            (
                "STOKER_MODEL_PATH".into(),
                model_path().to_string_lossy().into_owned(),
            ),
        ];
        vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let dir = self.dir.clone();
        let script = script.to_string();
        let output = tokio::task::spawn_blocking(move || run_python_blocking(&dir, &script, &vars))
            .await
            .expect("python runner thread");
        match output {
            Ok(stdout) => stdout,
            Err(report) => panic!("{report}\n{}", self.stderr_tail(6000)),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.try_exit().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("{}", self.stderr_tail(6000));
        }
    }
}

/// Runs one script to completion; `Err` carries a report with its output.
fn run_python_blocking(
    dir: &Path,
    script: &str,
    vars: &[(String, String)],
) -> Result<String, String> {
    let python = python_bin();
    let path = repo_root().join("tests/python").join(script);
    assert!(path.is_file(), "missing script {}", path.display());
    let out_path = dir.join(format!("{script}.stdout"));
    let err_path = dir.join(format!("{script}.stderr"));
    let out = std::fs::File::create(&out_path).expect("create stdout file");
    let err = std::fs::File::create(&err_path).expect("create stderr file");

    let mut cmd = Command::new(&python);
    cmd.arg(&path)
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
    for key in [
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "OPENAI_PROJECT_ID",
    ] {
        cmd.env_remove(key);
    }
    for (key, value) in vars {
        cmd.env(key, value);
    }
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", python.display()));
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait python") {
            break Some(status);
        }
        if started.elapsed() > PYTHON_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    match status {
        Some(s) if s.success() => Ok(stdout),
        other => Err(format!(
            "python script tests/python/{script} failed ({}) after {:.1}s\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
            match other {
                Some(s) => s.to_string(),
                None => format!("killed after {PYTHON_TIMEOUT:?}"),
            },
            started.elapsed().as_secs_f64()
        )),
    }
}

/// Sums every sample of `name` whose labels contain all of `labels` (each written
/// as `key="value"`), in Prometheus text exposition format.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    let mut total = 0.0;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (label_part, value_part) = if let Some(inner) = rest.strip_prefix('{') {
            let Some(end) = inner.find('}') else { continue };
            (&inner[..end], &inner[end + 1..])
        } else if rest.starts_with(' ') {
            ("", rest)
        } else {
            continue; // a longer metric name that shares the prefix
        };
        if !labels.iter().all(|l| label_part.contains(l)) {
            continue;
        }
        if let Some(value) = value_part.split_whitespace().next() {
            total += value.parse::<f64>().unwrap_or(0.0);
        }
    }
    total
}

/// Reads a `text/event-stream` response one event's `data` at a time.
#[derive(Debug)]
pub struct Sse {
    resp: reqwest::Response,
    buf: Vec<u8>,
    pub done: bool,
}

impl Sse {
    pub fn new(resp: reqwest::Response) -> Sse {
        Sse {
            resp,
            buf: Vec::new(),
            done: false,
        }
    }

    /// The next event's data (`[DONE]` included), or `None` at the end of the body.
    pub async fn next(&mut self) -> Option<String> {
        loop {
            if let Some(pos) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let event = String::from_utf8_lossy(&self.buf[..pos]).replace('\r', "");
                self.buf.drain(..pos + 2);
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                if data.is_empty() {
                    continue; // a comment or keep-alive
                }
                let data = data.join("\n");
                if data == "[DONE]" {
                    self.done = true;
                }
                return Some(data);
            }
            match self.resp.chunk().await {
                Ok(Some(bytes)) => {
                    // Normalise CRLF framing so the blank-line search above works.
                    for &b in bytes.iter() {
                        if b == b'\r' {
                            continue;
                        }
                        self.buf.push(b);
                    }
                }
                Ok(None) => return None,
                Err(e) => panic!("reading event stream: {e}"),
            }
        }
    }
}

/// Text of one streamed chunk: chat `delta.content` or completions `text`.
pub fn chunk_text(chunk: &Value) -> String {
    let choice = &chunk["choices"][0];
    choice["delta"]["content"]
        .as_str()
        .or_else(|| choice["text"].as_str())
        .unwrap_or("")
        .to_string()
}
