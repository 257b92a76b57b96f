//! Shared server state: configuration, the process's [`Role`], auth,
//! admission, the control plane, the served artifacts (set once loading
//! finishes) and the lifecycle [`Phase`] that readiness reports. It names no
//! role-specific type: the job front and the remote backend belong to the
//! roles that start them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::admission::{Admission, AdmissionLimits};
use crate::auth::Authenticator;
use crate::backend::{Artifact, Backend, Served};
use crate::config::Config;
use crate::control::Control;
use crate::error::ApiError;

/// Which process a server is: the `stoker` sub-command that started it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `stoker serve`: everything in one process.
    Embedded,
    /// `stoker executor`: the single-process server plus a job front that
    /// takes interactive jobs from Kafka.
    Executor,
    /// `stoker api`: the HTTP surface; generations run on the executors.
    Api,
}

impl Role {
    /// Runs an engine here (and so batch shards and warm-up).
    pub fn has_engine(self) -> bool {
        !matches!(self, Role::Api)
    }
}

/// Where the server is in its life. Only `Ready` serves inference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Loading = 0,
    WarmingUp = 1,
    Ready = 2,
    Draining = 3,
    Failed = 4,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Loading,
            1 => Phase::WarmingUp,
            2 => Phase::Ready,
            3 => Phase::Draining,
            _ => Phase::Failed,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Loading => "loading",
            Phase::WarmingUp => "warming_up",
            Phase::Ready => "ready",
            Phase::Draining => "draining",
            Phase::Failed => "failed",
        }
    }
}

pub struct Inner {
    pub config: Config,
    /// Which process this is: decides what runs here, not which optional
    /// parts happen to be set.
    pub role: Role,
    pub auth: Authenticator,
    pub admission: Arc<Admission>,
    /// Tenants' quotas, live usage and fair-share weights.
    pub tenancy: Arc<crate::tenancy::Tenancy>,
    pub model_id: String,
    phase: AtomicU8,
    served: OnceLock<Arc<Served>>,
    /// Every loaded artifact by sha256, the primary included.
    models: RwLock<HashMap<String, Arc<Served>>>,
    control: OnceLock<Control>,
    /// The executors this process routes to (the distributed API role).
    fleet: OnceLock<Arc<dyn crate::backend::Fleet>>,
    /// Starts the server's drain (set by `serve`).
    drain_hook: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Flips to true when in-flight requests must end now (shutdown timeout).
    hard_stop: watch::Sender<bool>,
}

#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("phase", &self.phase())
            .finish()
    }
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    pub fn new(config: Config, role: Role) -> Self {
        let auth = Authenticator::new(&config.api_keys);
        let admission = Admission::new(AdmissionLimits {
            max_num_seqs: config.engine.max_num_seqs,
            max_waiting_requests: config.admission.max_waiting_requests,
            max_waiting_tokens: config.admission.max_waiting_tokens,
            max_retry_after: std::time::Duration::from_secs(
                config.admission.max_retry_after_secs.max(1),
            ),
            out_of_envelope_factor: config.admission.out_of_envelope_factor,
            max_ttft: (config.admission.max_ttft_ms > 0)
                .then(|| std::time::Duration::from_millis(config.admission.max_ttft_ms)),
        });
        let (hard_stop, _) = watch::channel(false);
        AppState(Arc::new(Inner {
            role,
            model_id: config.model_id(),
            config,
            auth,
            admission,
            tenancy: crate::tenancy::Tenancy::new(),
            phase: AtomicU8::new(Phase::Loading as u8),
            served: OnceLock::new(),
            models: RwLock::new(HashMap::new()),
            control: OnceLock::new(),
            fleet: OnceLock::new(),
            drain_hook: OnceLock::new(),
            hard_stop,
        }))
    }

    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::SeqCst))
    }

    pub fn set_phase(&self, p: Phase) {
        // Draining is final: a late warm-up must not make a draining server ready.
        let _ = self
            .phase
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cur| {
                if cur == Phase::Draining as u8 && p != Phase::Draining {
                    None
                } else {
                    Some(p as u8)
                }
            });
    }

    /// Installs a loaded artifact; the first becomes the primary. Readiness
    /// still waits for warm-up.
    pub fn install<B: Artifact + Backend>(&self, backend: Arc<B>) -> Arc<Served> {
        let served = Arc::new(Served::new(
            backend,
            &self.model_id,
            self.config.executor_id.as_str(),
            &self.config.limits,
            self.served.get().map(|p| p.metrics.clone()),
            unix_now(),
        ));
        let _ = self.served.set(served.clone());
        self.models
            .write()
            .expect("models lock")
            .entry(served.provenance.sha256.clone())
            .or_insert(served)
            .clone()
    }

    /// Registers the executors this process routes to, for the admin
    /// listing; the first registration stands.
    pub fn set_fleet(&self, fleet: Arc<dyn crate::backend::Fleet>) {
        let _ = self.fleet.set(fleet);
    }

    /// The executors this process routes to, as last reported (empty unless
    /// a [`Fleet`](crate::backend::Fleet) was registered).
    pub fn live_executors(&self) -> Vec<crate::backend::LiveExecutor> {
        self.fleet.get().map(|f| f.executors()).unwrap_or_default()
    }

    /// The primary model, once loaded.
    pub fn served(&self) -> Option<&Served> {
        self.served.get().map(|s| s.as_ref())
    }

    /// The loaded artifact with this sha256, if any.
    pub fn model_by_sha(&self, sha256: &str) -> Option<Arc<Served>> {
        self.models
            .read()
            .expect("models lock")
            .get(&sha256.to_ascii_lowercase())
            .cloned()
    }

    /// Every loaded artifact.
    pub fn loaded_models(&self) -> Vec<Arc<Served>> {
        self.models
            .read()
            .expect("models lock")
            .values()
            .cloned()
            .collect()
    }

    /// Sets the control plane, once, at start.
    pub fn set_control(&self, c: Control) {
        let _ = self.control.set(c);
    }

    pub fn control(&self) -> Option<&Control> {
        self.control.get()
    }

    pub fn set_drain_hook(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.drain_hook.set(Box::new(f));
    }

    /// Starts draining this server, as SIGTERM does.
    pub fn request_drain(&self) {
        if let Some(f) = self.drain_hook.get() {
            f();
        }
    }

    /// The served model if the server takes inference now, else `not_ready`.
    pub fn ready(&self) -> Result<&Served, ApiError> {
        match (self.phase(), self.served()) {
            (Phase::Ready, Some(s)) => Ok(s),
            (p, _) => Err(ApiError::NotReady {
                message: format!("the server is not ready ({})", p.as_str()),
                retry_after: self.admission.retry_hint(),
            }),
        }
    }

    pub fn hard_stop(&self) -> watch::Receiver<bool> {
        self.hard_stop.subscribe()
    }

    pub fn trigger_hard_stop(&self) {
        self.hard_stop.send_replace(true);
    }
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
