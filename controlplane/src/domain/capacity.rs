//! The capacity-profile aggregate: the measured operating envelope of one
//! revision under one named workload, which admission and autoscaling size from.
//!
//! A profile is recorded again whenever it is re-measured; each recording is an
//! event, the latest one is the profile, and the earlier ones stay as history
//! so a regression between two measurements can be seen in the audit trail.

use stoker_schemas::events::{CapacityEnvelope, CapacityProfileEvent, CapacityProfileRecorded};
use stoker_schemas::ids::{DeploymentId, RevisionId};

use super::{Aggregate, DomainError, Meta, check_id};

#[derive(Clone, Debug, PartialEq)]
pub enum CapacityProfileCommand {
    Record {
        deployment_id: DeploymentId,
        revision_id: RevisionId,
        workload: String,
        envelope: CapacityEnvelope,
        /// The revision is registered with a verified artifact (looked up by the caller).
        revision_registered: bool,
    },
}

/// The state of one capacity-profile stream; `Default` is one never recorded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CapacityProfile {
    latest: Option<CapacityEnvelope>,
    recordings: u32,
}

impl CapacityProfile {
    /// The envelope most recently recorded.
    pub fn envelope(&self) -> Option<&CapacityEnvelope> {
        self.latest.as_ref()
    }

    /// How many times the profile has been recorded.
    pub fn recordings(&self) -> u32 {
        self.recordings
    }
}

impl Aggregate for CapacityProfile {
    type Command = CapacityProfileCommand;
    type Event = CapacityProfileEvent;

    fn handle(
        &self,
        cmd: CapacityProfileCommand,
        _meta: &Meta,
    ) -> Result<Vec<CapacityProfileEvent>, DomainError> {
        let CapacityProfileCommand::Record {
            deployment_id,
            revision_id,
            workload,
            envelope,
            revision_registered,
        } = cmd;
        check_id("workload", &workload)?;
        if !revision_registered {
            return Err(DomainError::RevisionNotVerified {
                deployment_id,
                revision_id,
            });
        }
        check_envelope(&envelope)?;
        Ok(vec![
            CapacityProfileRecorded {
                deployment_id,
                revision_id,
                workload,
                envelope,
            }
            .into(),
        ])
    }

    fn apply(&mut self, ev: &CapacityProfileEvent) {
        let CapacityProfileEvent::CapacityProfileRecorded(e) = ev;
        self.latest = Some(e.envelope.clone());
        self.recordings += 1;
    }
}

/// Every figure must be a finite, positive measurement: a zero or NaN would
/// later divide or compare into nonsense, and NaN cannot even be stored in JSON.
fn check_envelope(e: &CapacityEnvelope) -> Result<(), DomainError> {
    if e.concurrency == 0 {
        return Err(DomainError::InvalidEnvelope(
            "concurrency must be at least 1".to_owned(),
        ));
    }
    if e.active_tokens == 0 {
        return Err(DomainError::InvalidEnvelope(
            "active_tokens must be at least 1".to_owned(),
        ));
    }
    let figures = [
        ("ttft_p95_ms", Some(e.ttft_p95_ms)),
        ("tpot_p95_ms", Some(e.tpot_p95_ms)),
        ("throughput_tok_s", Some(e.throughput_tok_s)),
        ("prefill_tok_s", e.prefill_tok_s),
        ("decode_tok_s", e.decode_tok_s),
    ];
    for (name, value) in figures {
        if let Some(v) = value
            && !(v.is_finite() && v > 0.0)
        {
            return Err(DomainError::InvalidEnvelope(format!(
                "{name} is {v}; it must be a finite number above 0"
            )));
        }
    }
    Ok(())
}
