//! One request-log row per generation request, refused or served (a caller
//! refused for a missing or wrong key or scope leaves none).
//!
//! The edge middleware puts a [`LogSlot`] into every generation request; the
//! handler fills in what it learns (deployment, revision, lane, timings, token
//! counts) as it goes. When the response leaves, the middleware writes the row,
//! unless the response is a stream: then the stream writes it when it ends, or
//! when it is dropped because the client went away. The writer batches rows off
//! the request path; prompts and outputs never reach it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::{DateTime, Utc};
use stoker_controlplane::requestlog::{RequestLog, RequestRecord};
use stoker_executor::Lane;
use stoker_executor::engine::{Timings, Usage};
use stoker_schemas::codes::ErrorCode;
use stoker_schemas::ids::{DeploymentId, RequestId, RolloutId};

use crate::edge::routing::Target;

#[derive(Debug, Default)]
struct Facts {
    tenant: String,
    /// `None` until the request is routed.
    deployment_id: Option<DeploymentId>,
    /// The served revision and executor, as the provenance headers name them.
    revision: Option<String>,
    executor: Option<String>,
    rollout_id: Option<RolloutId>,
    lane: Option<Lane>,
    prompt_tokens: u32,
    completion_tokens: u32,
    queue_ms: Option<f64>,
    prefill_ms: Option<f64>,
    ttft_ms: Option<f64>,
    decode_ms: Option<f64>,
    finish_reason: Option<String>,
    error_code: Option<ErrorCode>,
    /// A stream writes the row itself when it ends.
    deferred: bool,
    written: bool,
}

/// The request's row in the making; cheap to clone.
#[derive(Clone, Debug)]
pub struct LogSlot {
    pub request_id: RequestId,
    endpoint: &'static str,
    received_at: DateTime<Utc>,
    received: Instant,
    facts: Arc<Mutex<Facts>>,
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl LogSlot {
    pub fn new(request_id: RequestId, endpoint: &'static str) -> Self {
        LogSlot {
            request_id,
            endpoint,
            received_at: Utc::now(),
            received: Instant::now(),
            facts: Arc::default(),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Facts) -> R) -> R {
        let mut g = self.facts.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    pub fn tenant(&self, tenant: &str) {
        self.with(|f| f.tenant = tenant.to_owned());
    }

    pub fn routed(&self, t: &Target) {
        self.with(|f| {
            f.deployment_id = Some(t.deployment_id.clone());
            f.revision = Some(t.provenance.revision.clone());
            f.executor = Some(t.provenance.executor.clone());
            f.rollout_id = t.rollout_id.clone();
        });
    }

    pub fn admitted(&self, lane: Lane, prompt_tokens: usize) {
        self.with(|f| {
            f.lane = Some(lane);
            f.prompt_tokens = prompt_tokens as u32;
        });
    }

    pub fn started(&self, queue: std::time::Duration) {
        self.with(|f| f.queue_ms = Some(ms(queue)));
    }

    pub fn finished(&self, reason: &str, usage: &Usage, t: &Timings) {
        self.with(|f| {
            f.finish_reason = Some(reason.to_owned());
            f.prompt_tokens = usage.prompt_tokens as u32;
            f.completion_tokens = usage.completion_tokens as u32;
            f.queue_ms = Some(ms(t.queue));
            f.prefill_ms = Some(ms(t.prefill));
            f.ttft_ms = (usage.completion_tokens > 0).then(|| ms(t.ttft));
            f.decode_ms = Some(ms(t.decode));
        });
    }

    pub fn failed(&self, code: ErrorCode) {
        self.with(|f| f.error_code = Some(code));
    }

    /// Sets the finish reason unless the request already finished or failed.
    pub fn with_default_finish(&self, reason: &str) {
        self.with(|f| {
            if f.finish_reason.is_none() && f.error_code.is_none() {
                f.finish_reason = Some(reason.to_owned());
            }
        });
    }

    /// The response is a stream; it writes the row when it ends.
    pub fn defer(&self) {
        self.with(|f| f.deferred = true);
    }

    pub fn is_deferred(&self) -> bool {
        self.with(|f| f.deferred)
    }

    /// Writes the row once; later calls do nothing.
    pub fn write(&self, log: &RequestLog, status: u16) {
        let rec = self.with(|f| {
            if f.written {
                return None;
            }
            f.written = true;
            Some(RequestRecord {
                request_id: self.request_id.to_string(),
                tenant: f.tenant.clone(),
                deployment_id: f
                    .deployment_id
                    .as_ref()
                    .map(DeploymentId::to_string)
                    .unwrap_or_default(),
                revision_id: f.revision.clone(),
                executor_id: f.executor.clone(),
                lane: f
                    .lane
                    .map(crate::metrics::lane_name)
                    .unwrap_or("interactive")
                    .to_owned(),
                rollout_id: f.rollout_id.as_ref().map(RolloutId::to_string),
                endpoint: self.endpoint.to_owned(),
                status_code: status,
                finish_reason: f.finish_reason.clone(),
                error_code: f.error_code,
                prompt_tokens: f.prompt_tokens,
                completion_tokens: f.completion_tokens,
                queue_ms: f.queue_ms,
                prefill_ms: f.prefill_ms,
                ttft_ms: f.ttft_ms,
                decode_ms: f.decode_ms,
                e2e_ms: ms(self.received.elapsed()),
                received_at: self.received_at,
            })
        });
        if let Some(r) = rec {
            log.record(r);
        }
    }
}
