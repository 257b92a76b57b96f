//! Where each server sub-command is put together: the HTTP server of every
//! [`Role`] (`stoker serve` in one process, `stoker api` in front of
//! executors, `stoker executor` behind Kafka): bind, load the model in the
//! background (ready stays false until a warm-up generation succeeds, where
//! the role runs an engine), serve, and drain. What the two distributed roles
//! add (the remote backend, the job front, their Kafka slots) comes in as
//! [`RoleParts`] from `stoker-distributed`, so this crate knows nothing of
//! Kafka; `bootstrap.rs` is what a server records about itself in the
//! control plane.
//!
//! Drain keeps accepting connections so load balancers see a 503 from
//! `/health/ready` and clients get a typed `not_ready` instead of a refused
//! connection. In-flight requests run on until they finish or until the
//! shutdown timeout; then the remaining ones end with a typed error event and
//! the listener closes.

pub mod bootstrap;
mod parts;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use stoker_executor::{Engine, Model};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::control;
use crate::http::batch_rows::EngineRows;
use crate::http::routes;
use crate::state::{AppState, Phase, Role};
pub use parts::{InProcess, RoleParts};

/// A running server.
pub struct Server {
    pub addr: SocketAddr,
    pub state: AppState,
    drain: Arc<watch::Sender<bool>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

/// Binds the listener and starts serving at once; the model loads in the
/// background while `/health/ready` answers 503.
pub async fn start(config: Config) -> anyhow::Result<Server> {
    start_mode(config, Role::Embedded, Arc::new(InProcess)).await
}

/// [`start`] for any role, with what that role adds to the server.
pub async fn start_mode(
    config: Config,
    role: Role,
    parts: Arc<dyn RoleParts>,
) -> anyhow::Result<Server> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data dir {}", config.data_dir.display()))?;
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    let shutdown_timeout = Duration::from_secs(config.shutdown_timeout_secs);
    let control = control::open(&config).await?;
    control::spawn_background(&control, &config);
    let state = AppState::new(config, role);
    state.set_control(control);
    // Issued keys and quotas are in force before the first request.
    crate::edge::tenant_sync::now(&state).await;
    crate::edge::tenant_sync::spawn(&state);
    let (drain, drain_rx) = watch::channel(false);
    let drain = Arc::new(drain);
    {
        let d = drain.clone();
        state.set_drain_hook(move || {
            d.send_replace(true);
        });
    }
    let task = tokio::spawn(run(
        listener,
        state.clone(),
        parts,
        drain_rx,
        shutdown_timeout,
    ));
    Ok(Server {
        addr,
        state,
        drain,
        task,
    })
}

impl Server {
    /// Starts draining, as SIGTERM does.
    pub fn begin_shutdown(&self) {
        self.drain.send_replace(true);
    }

    /// A handle that starts draining when called, usable after `wait` took the server.
    pub fn shutdown_trigger(&self) -> impl Fn() + Send + Sync + 'static {
        let d = self.drain.clone();
        move || {
            d.send_replace(true);
        }
    }

    /// Waits until the server has stopped.
    pub async fn wait(self) -> anyhow::Result<()> {
        self.task.await.context("server task panicked")?
    }

    /// Waits until ready, or fails if loading failed or time ran out.
    pub async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        let until = Instant::now() + timeout;
        loop {
            match self.state.phase() {
                Phase::Ready => return Ok(()),
                Phase::Failed => anyhow::bail!("model loading failed"),
                _ if Instant::now() > until => anyhow::bail!("not ready after {timeout:?}"),
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
}

async fn run(
    listener: TcpListener,
    state: AppState,
    parts: Arc<dyn RoleParts>,
    mut drain: watch::Receiver<bool>,
    shutdown_timeout: Duration,
) -> anyhow::Result<()> {
    let role = state.role;
    let loader = {
        let state = state.clone();
        let parts = parts.clone();
        async move {
            if role.has_engine() {
                let st = state.clone();
                tokio::task::spawn_blocking(move || load(&st))
                    .await
                    .context("model loader panicked")??;
            }
            // Without an engine, this installs what the role generates with.
            parts.load(&state).await?;
            if state.served().is_none() {
                anyhow::bail!("the {role:?} role loaded nothing to generate with");
            }
            // The control plane learns what this process serves before it is ready.
            if let Some(c) = state.control() {
                bootstrap::bootstrap_with_retry(&state, c, role.has_engine()).await?;
            }
            parts.start(&state).await?;
            // Admission follows the revision's capacity profile from the
            // first request on, and picks up new recordings as they land.
            crate::edge::artifacts::apply_capacity_profile(&state).await;
            crate::edge::artifacts::spawn_profile_watch(&state);
            state.set_phase(Phase::Ready);
            if let (Some(c), true) = (state.control(), role.has_engine()) {
                // With the embedded store this is the only process, so leases
                // left by a killed predecessor can be dropped at once.
                let embedded = c.cp.store().backend_name() == "sqlite";
                let rows = Arc::new(EngineRows::new(state.clone()));
                c.batches.spawn_worker(rows, embedded);
            }
            tracing::info!("ready");
            anyhow::Ok(())
        }
    };
    let (close_tx, close_rx) = watch::channel(false);
    let close_tx = Arc::new(close_tx);
    // Draining runs beside the accept loop, which keeps serving 503s.
    {
        let state = state.clone();
        let close_tx = close_tx.clone();
        tokio::spawn(async move {
            if drain.wait_for(|v| *v).await.is_ok() {
                tracing::info!(timeout_s = shutdown_timeout.as_secs(), "draining");
                drain_in_flight(&state, &*parts, shutdown_timeout).await;
                // Nothing is in flight now: slots can go to the next process
                // at once instead of after their leases' TTL.
                parts.drained().await;
                close_tx.send_replace(true);
            }
        });
    }
    let app = routes::router(state.clone());
    let mut close_for_serve = close_rx.clone();
    let limits = crate::http::serve::ConnLimits {
        header_read: state.config.limits.header_read_timeout(),
        write_stall: state.config.limits.write_stall_timeout(),
        send_buffer: (state.config.limits.send_buffer_bytes > 0)
            .then_some(state.config.limits.send_buffer_bytes),
    };
    let server = crate::http::serve::serve(listener, app, limits, async move {
        let _ = close_for_serve.wait_for(|v| *v).await;
    });
    let mut server = std::pin::pin!(server);
    let mut loader = std::pin::pin!(loader);
    let mut closed = close_rx;
    let mut load_result: Option<anyhow::Result<()>> = None;
    loop {
        tokio::select! {
            // A failed load closes the server; whichever branch sees the
            // close first, the process must end with the load's error.
            r = &mut server => {
                let r = r.context("serving HTTP");
                return match load_result {
                    Some(Err(e)) => Err(e),
                    _ => r,
                };
            }
            r = &mut loader, if load_result.is_none() => {
                if let Err(e) = &r {
                    tracing::error!(error = %format!("{e:#}"), "model loading failed");
                    state.set_phase(Phase::Failed);
                    close_tx.send_replace(true);
                }
                load_result = Some(r);
            }
            _ = async { drop(closed.wait_for(|v| *v).await) } => {
                // Connections still open after the hard stop get a short grace.
                let r = match tokio::time::timeout(Duration::from_secs(5), &mut server).await {
                    Ok(r) => r.context("serving HTTP"),
                    Err(_) => {
                        tracing::warn!("connections still open after drain; closing");
                        Ok(())
                    }
                };
                return match load_result {
                    Some(Err(e)) => Err(e),
                    _ => r,
                };
            }
        }
    }
}

async fn drain_in_flight(state: &AppState, parts: &dyn RoleParts, timeout: Duration) {
    state.set_phase(Phase::Draining);
    // Others stop routing here, and work already on its way arrives, before
    // what is in flight is judged.
    parts.draining().await;
    // Batch shards stop taking rows, finish those in flight, checkpoint and
    // release, beside the interactive drain.
    let batches = async {
        if let Some(c) = state.control() {
            c.batches.drain(timeout).await;
        }
    };
    tokio::join!(batches, drain_interactive(state, timeout));
    if let Some(c) = state.control() {
        bootstrap::record_drained(state, c).await;
    }
    tracing::info!("drained");
}

async fn drain_interactive(state: &AppState, timeout: Duration) {
    let until = Instant::now() + timeout;
    let in_flight = || {
        let s = state.admission.snapshot();
        s.waiting + s.running
    };
    while in_flight() > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let left = in_flight();
    if left > 0 {
        tracing::warn!(
            requests = left,
            "shutdown timeout reached; ending in-flight requests"
        );
        state.trigger_hard_stop();
        let until = Instant::now() + Duration::from_secs(5);
        while in_flight() > 0 && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// Loads the model, starts the engine and runs a warm-up generation.
fn load(state: &AppState) -> anyhow::Result<()> {
    let cfg = &state.config;
    let t0 = Instant::now();
    let mut model = Model::load(&cfg.model, cfg.load_options()?)
        .with_context(|| format!("loading model {}", cfg.model.display()))?;
    if let Some((source, origin)) = cfg.chat_template_override()? {
        model
            .override_chat_template(&source, &origin)
            .context("the chat template override")?;
    }
    let file_mb = model.identity.file_size as f64 / 1e6;
    // The matrices as held in memory (an untied embedding is not read per step
    // but is resident too).
    let w = &model.weights;
    let held = w.byte_size() + w.output.as_ref().map_or(0, |_| w.embed.byte_size());
    let weights_mb = held as f64 / 1e6;
    let engine = Engine::start(model, cfg.engine_config()).context("starting the engine")?;
    let engine = Arc::new(engine);
    state.install(engine.clone());
    let served = state.served().expect("just installed");
    tracing::info!(
        model = %served.provenance.model_id,
        revision = %served.provenance.revision,
        sha256 = %served.provenance.sha256,
        load_ms = t0.elapsed().as_millis() as u64,
        file_mb = %format!("{file_mb:.1}"),
        weights_mb = %format!("{weights_mb:.1}"),
        resident_mb = %resident_bytes().map_or("?".into(), |b| format!("{:.1}", b as f64 / 1e6)),
        "model loaded; warming up"
    );
    state.set_phase(Phase::WarmingUp);
    let t1 = Instant::now();
    engine.warm_up().context("warm-up generation")?;
    tracing::info!(warm_up_ms = t1.elapsed().as_millis() as u64, "warmed up");
    Ok(())
}

/// The process's resident memory (Linux `/proc/self/statm`), for the load log:
/// what loading the weights and allocating the KV pool cost in RAM.
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
