//! Given/when/then tests of the aggregates: pure functions, no database.
//! Each case starts from a history of events, issues one command, and expects
//! either exactly the events it causes or the refusal it meets. The cases live
//! in `aggregates/`, one file per aggregate (the rollout rules in their own).

/// A predicate matching one refusal by pattern, for `then_refused`.
macro_rules! refused {
    ($pattern:pat) => {
        |e: &stoker_controlplane::domain::DomainError| matches!(e, $pattern)
    };
}

#[path = "aggregates/batch.rs"]
mod batch;
#[path = "aggregates/capacity.rs"]
mod capacity;
#[path = "aggregates/deployment.rs"]
mod deployment;
#[path = "aggregates/errors.rs"]
mod errors;
#[path = "aggregates/executor.rs"]
mod executor;
#[path = "aggregates/given.rs"]
mod given;
#[path = "aggregates/revision.rs"]
mod revision;
#[path = "aggregates/rollout.rs"]
mod rollout;
#[path = "aggregates/tenant.rs"]
mod tenant;
