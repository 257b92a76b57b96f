//! The capacity profile admission applies: the measured envelope of the
//! revision this process serves, chosen from the control plane's read models.
//!
//! `stoker bench serve --record-profile` measures where latency breaks and
//! records the safe envelope as a `CapacityProfileRecorded` event. Admission
//! then bounds outstanding requests and active tokens by it, and uses its
//! prefill and output rates for deadline and Retry-After estimates until live
//! rates are measured. Traffic far outside the measured workload (prompts or
//! outputs several times its p95) is counted as out of envelope: the profile
//! no longer describes it and should be measured again.

use chrono::{DateTime, Utc};
use serde::Serialize;
use stoker_controlplane::projection::{CapacityProfileView, Views};
use stoker_schemas::ids::{DeploymentId, RevisionId};

/// A profile's figures as admission uses them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EnvelopeLimits {
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
    pub workload: String,
    pub recorded_at: DateTime<Utc>,
    pub recorded_by: String,
    /// Outstanding requests (running + waiting) the envelope holds.
    pub concurrency: usize,
    /// Prompt + max_tokens of all outstanding requests.
    pub active_tokens: usize,
    /// Prompt tokens per second the engine prefilled at the knee.
    pub prefill_tok_s: Option<f64>,
    /// Output tokens per second across all sequences at the knee.
    pub throughput_tok_s: f64,
    /// Time per output token, p95, the revision sustained at the knee; the
    /// step planner's interactive target when the operator set none.
    pub tpot_p95_ms: f64,
    pub prompt_tokens_p95: Option<u64>,
    pub output_tokens_p95: Option<u64>,
}

impl From<&CapacityProfileView> for EnvelopeLimits {
    fn from(p: &CapacityProfileView) -> Self {
        let e = &p.envelope;
        EnvelopeLimits {
            deployment_id: p.deployment_id.clone(),
            revision_id: p.revision_id.clone(),
            workload: p.workload.clone(),
            recorded_at: p.recorded_at,
            recorded_by: p.recorded_by.clone(),
            concurrency: e.concurrency.max(1) as usize,
            active_tokens: usize::try_from(e.active_tokens)
                .unwrap_or(usize::MAX)
                .max(1),
            prefill_tok_s: e.prefill_tok_s,
            throughput_tok_s: e.throughput_tok_s,
            tpot_p95_ms: e.tpot_p95_ms,
            prompt_tokens_p95: e.prompt_tokens_p95,
            output_tokens_p95: e.output_tokens_p95,
        }
    }
}

#[cfg(test)]
impl EnvelopeLimits {
    /// A profile with plausible figures, for tests to adjust.
    pub(crate) fn for_test() -> Self {
        EnvelopeLimits {
            deployment_id: "d".parse().unwrap(),
            revision_id: "r".parse().unwrap(),
            workload: "chat".into(),
            recorded_at: Utc::now(),
            recorded_by: "bench".into(),
            concurrency: 4,
            active_tokens: 1000,
            prefill_tok_s: None,
            throughput_tok_s: 10.0,
            tpot_p95_ms: 30.0,
            prompt_tokens_p95: None,
            output_tokens_p95: None,
        }
    }
}

/// Why a request is outside the measured workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutOfEnvelope {
    PromptLength,
    OutputLength,
}

impl OutOfEnvelope {
    pub fn as_str(self) -> &'static str {
        match self {
            OutOfEnvelope::PromptLength => "prompt_length",
            OutOfEnvelope::OutputLength => "output_length",
        }
    }
}

impl EnvelopeLimits {
    /// Whether a request lies past `factor` times the workload's p95 lengths.
    pub fn classify(
        &self,
        prompt_tokens: usize,
        max_tokens: usize,
        factor: f64,
    ) -> Option<OutOfEnvelope> {
        let past = |n: usize, p95: Option<u64>| p95.is_some_and(|p| n as f64 > p as f64 * factor);
        if past(prompt_tokens, self.prompt_tokens_p95) {
            Some(OutOfEnvelope::PromptLength)
        } else if past(max_tokens, self.output_tokens_p95) {
            Some(OutOfEnvelope::OutputLength)
        } else {
            None
        }
    }
}

/// The profile for the artifact with this sha256: among the revisions (of any
/// deployment) whose artifact it is, the most recently recorded profile.
/// `None` when nothing was measured for it: admission keeps its static limits.
pub fn select(views: &Views, sha256: &str) -> Option<EnvelopeLimits> {
    views
        .capacity_profiles
        .values()
        .filter(|p| {
            views
                .revisions
                .get(&format!("{}/{}", p.deployment_id, p.revision_id))
                .is_some_and(|r| r.model_sha256.eq_ignore_ascii_case(sha256))
        })
        .max_by_key(|p| p.recorded_at)
        .map(EnvelopeLimits::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(p95_in: Option<u64>, p95_out: Option<u64>) -> EnvelopeLimits {
        EnvelopeLimits {
            prompt_tokens_p95: p95_in,
            output_tokens_p95: p95_out,
            ..EnvelopeLimits::for_test()
        }
    }

    #[test]
    fn classify_by_factor_of_the_p95() {
        let l = limits(Some(100), Some(20));
        assert_eq!(l.classify(400, 20, 4.0), None);
        assert_eq!(l.classify(401, 20, 4.0), Some(OutOfEnvelope::PromptLength));
        assert_eq!(l.classify(10, 81, 4.0), Some(OutOfEnvelope::OutputLength));
        // A profile without length figures classifies nothing.
        assert_eq!(limits(None, None).classify(1 << 20, 1 << 20, 4.0), None);
    }
}
