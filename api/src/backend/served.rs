//! One loaded artifact as requests see it ([`Served`]): its metadata, the
//! backend that generates with it, the limits requests are validated against
//! (the model's, narrowed by the cache and the config), its metrics, and the
//! [`Provenance`] every response carries.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue};
use stoker_executor::RequestLimits;

use super::{Artifact, Backend};
use crate::config::LimitsConfig;
use crate::metrics::Metrics;

/// Which exact artifact answers, and what shaped its input: sent on every
/// response (headers) and on every batch output line (`stoker_provenance`).
#[derive(Clone, Debug)]
pub struct Provenance {
    pub model_id: String,
    pub revision: String,
    pub sha256: String,
    pub executor: String,
    pub fingerprint: String,
    /// Of the tokenizer the prompt was encoded with.
    pub tokenizer_sha256: String,
    /// Of the chat template that rendered the conversation.
    pub template_sha256: String,
}

impl Provenance {
    pub fn new(
        model_id: String,
        identity: &stoker_executor::model::ModelIdentity,
        executor: String,
    ) -> Self {
        let revision = default_revision_id(&identity.sha256);
        Provenance {
            fingerprint: format!("fp_{revision}"),
            model_id,
            revision,
            sha256: identity.sha256.clone(),
            executor,
            tokenizer_sha256: identity.tokenizer_sha256.clone(),
            template_sha256: identity.chat_template_sha256.clone(),
        }
    }

    /// The provenance of a named revision of a deployment, served by
    /// `artifact`'s loaded model.
    pub fn of_revision(artifact: &Provenance, model_id: String, revision: String) -> Self {
        Provenance {
            model_id,
            fingerprint: format!("fp_{revision}"),
            revision,
            ..artifact.clone()
        }
    }

    pub fn apply(&self, h: &mut HeaderMap) {
        let mut put = |k: &'static str, v: &str| {
            if !v.is_empty()
                && let Ok(v) = HeaderValue::from_str(v)
            {
                h.insert(k, v);
            }
        };
        put("x-stoker-revision", &self.revision);
        put("x-stoker-model-sha256", &self.sha256);
        put("x-stoker-executor", &self.executor);
        put("x-stoker-tokenizer-sha256", &self.tokenizer_sha256);
        put("x-stoker-template-sha256", &self.template_sha256);
    }

    /// The same facts for a batch output line's body.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "revision": self.revision,
            "model_sha256": self.sha256,
            "executor": self.executor,
            "tokenizer_sha256": self.tokenizer_sha256,
            "template_sha256": self.template_sha256,
        })
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
    pub artifact: Arc<dyn Artifact>,
    pub backend: Arc<dyn Backend>,
    pub provenance: Provenance,
    pub limits: RequestLimits,
    pub metrics: Arc<Metrics>,
    pub created: u64,
}

impl Served {
    /// What requests see of `backend`: the model's limits narrowed to what
    /// the KV cache holds (a request must fit it as a whole) and to the
    /// configured ceilings, and the provenance of its default revision.
    pub fn new<B: Artifact + Backend>(
        backend: Arc<B>,
        model_id: &str,
        executor_id: &str,
        cfg: &LimitsConfig,
        metrics: Option<Arc<Metrics>>,
        created: u64,
    ) -> Served {
        let info = backend.info();
        let mut limits = backend.model_limits();
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
        if cfg.max_input_tokens > 0 {
            limits.max_input_tokens = cfg.max_input_tokens.min(limits.max_input_tokens);
        }
        if cfg.max_output_tokens > 0 {
            limits.max_output_tokens = cfg.max_output_tokens.min(limits.max_output_tokens);
        }
        let provenance = Provenance::new(
            model_id.to_string(),
            &info.identity,
            executor_id.to_string(),
        );
        // One registry: a second artifact's requests count under the primary's labels.
        let metrics =
            metrics.unwrap_or_else(|| Arc::new(Metrics::new(model_id, &provenance.revision)));
        Served {
            artifact: backend.clone(),
            backend,
            provenance,
            limits,
            metrics,
            created,
        }
    }
}
