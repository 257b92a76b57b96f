//! Shared server state: configuration, auth, admission, metrics, the served
//! model (set once loading finishes) and the lifecycle phase that readiness
//! reports.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderValue};
use stoker_executor::RequestLimits;
use tokio::sync::watch;

use crate::admission::{Admission, AdmissionLimits};
use crate::auth::Authenticator;
use crate::backend::Backend;
use crate::config::Config;
use crate::control::Control;
use crate::error::ApiError;
use crate::metrics::Metrics;

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

/// Which exact artifact answers: sent on every response.
#[derive(Clone, Debug)]
pub struct Provenance {
    pub model_id: String,
    pub revision: String,
    pub sha256: String,
    pub executor: String,
    pub fingerprint: String,
}

impl Provenance {
    pub fn new(model_id: String, sha256: String, executor: String) -> Self {
        let revision = default_revision_id(&sha256);
        Self::of_revision(model_id, revision, sha256, executor)
    }

    /// The provenance of a named revision of a deployment.
    pub fn of_revision(
        model_id: String,
        revision: String,
        sha256: String,
        executor: String,
    ) -> Self {
        Provenance {
            model_id,
            fingerprint: format!("fp_{revision}"),
            revision,
            sha256,
            executor,
        }
    }

    pub fn apply(&self, h: &mut HeaderMap) {
        let mut put = |k: &'static str, v: &str| {
            if let Ok(v) = HeaderValue::from_str(v) {
                h.insert(k, v);
            }
        };
        put("x-stoker-revision", &self.revision);
        put("x-stoker-model-sha256", &self.sha256);
        put("x-stoker-executor", &self.executor);
    }
}

/// The id a revision gets when nobody names it: the first 12 hex digits of its
/// artifact's sha256.
pub fn default_revision_id(sha256: &str) -> String {
    sha256.chars().take(12).collect()
}

/// A loaded model artifact and what requests are validated against. Several
/// revisions may share one (same file, other id); the primary is the one
/// `stoker serve` loaded at start.
pub struct Served {
    pub engine: Arc<dyn Backend>,
    pub provenance: Provenance,
    pub limits: RequestLimits,
    pub metrics: Arc<Metrics>,
    pub created: u64,
}

pub struct Inner {
    pub config: Config,
    pub auth: Authenticator,
    pub admission: Arc<Admission>,
    pub model_id: String,
    phase: AtomicU8,
    served: OnceLock<Arc<Served>>,
    /// Every loaded artifact by sha256, the primary included.
    models: RwLock<HashMap<String, Arc<Served>>>,
    control: OnceLock<Control>,
    /// Starts the server's drain (set by `serve`).
    drain_hook: OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Flips to true when in-flight requests must end now (shutdown timeout).
    hard_stop: watch::Sender<bool>,
    /// The executors behind Kafka (`stoker api` only).
    pub remote: OnceLock<crate::distributed::remote::RemoteBackend>,
    /// This process's job server (`stoker executor` only).
    pub job_server: OnceLock<Arc<crate::distributed::job_server::JobServer>>,
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
    pub fn new(config: Config) -> Self {
        let auth = Authenticator::new(&config.api_keys);
        let admission = Admission::new(AdmissionLimits {
            max_num_seqs: config.engine.max_num_seqs,
            max_waiting_requests: config.admission.max_waiting_requests,
            max_waiting_tokens: config.admission.max_waiting_tokens,
            max_retry_after: std::time::Duration::from_secs(
                config.admission.max_retry_after_secs.max(1),
            ),
            out_of_envelope_factor: config.admission.out_of_envelope_factor,
        });
        let (hard_stop, _) = watch::channel(false);
        AppState(Arc::new(Inner {
            model_id: config.model_id(),
            config,
            auth,
            admission,
            phase: AtomicU8::new(Phase::Loading as u8),
            served: OnceLock::new(),
            models: RwLock::new(HashMap::new()),
            control: OnceLock::new(),
            drain_hook: OnceLock::new(),
            hard_stop,
            remote: OnceLock::new(),
            job_server: OnceLock::new(),
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

    /// Installs a loaded engine; the first becomes the primary. Readiness still
    /// waits for warm-up.
    pub fn install(&self, engine: Arc<dyn Backend>) -> Arc<Served> {
        let info = engine.info().clone();
        let mut limits = engine.model_limits();
        // A request must fit the KV cache as a whole: the served context is
        // the smaller of the model's window and what the cache holds.
        let kv_tokens = info.num_kv_blocks * stoker_executor::BLOCK_SIZE;
        if kv_tokens < limits.context_window {
            tracing::warn!(
                model_context = limits.context_window,
                kv_tokens,
                "the KV cache is smaller than the model's context window; serving the smaller"
            );
            limits.context_window = kv_tokens;
            limits.max_input_tokens = limits.max_input_tokens.min(kv_tokens);
            limits.max_output_tokens = limits.max_output_tokens.min(kv_tokens);
        }
        let cfg = &self.config.limits;
        if cfg.max_input_tokens > 0 {
            limits.max_input_tokens = cfg.max_input_tokens.min(limits.max_input_tokens);
        }
        if cfg.max_output_tokens > 0 {
            limits.max_output_tokens = cfg.max_output_tokens.min(limits.max_output_tokens);
        }
        let provenance = Provenance::new(
            self.model_id.clone(),
            info.identity.sha256.clone(),
            self.config.executor_id.clone(),
        );
        // One registry: a second artifact's requests count under the primary's labels.
        let metrics = match self.served.get() {
            Some(p) => p.metrics.clone(),
            None => Arc::new(Metrics::new(&self.model_id, &provenance.revision)),
        };
        let sha = provenance.sha256.clone();
        let served = Arc::new(Served {
            engine,
            provenance,
            limits,
            metrics,
            created: unix_now(),
        });
        let _ = self.served.set(served.clone());
        self.models
            .write()
            .expect("models lock")
            .entry(sha)
            .or_insert(served)
            .clone()
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
