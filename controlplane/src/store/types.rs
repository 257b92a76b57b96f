//! The vocabulary of the event store: ids, events going in, events coming out,
//! and the audit query. Newtypes keep a stream id from being passed as an actor.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::StoreError;

macro_rules! text_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub String);

        impl $name {
            pub fn new(s: impl Into<String>) -> Self {
                Self(s.into())
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }
    };
}

text_id!(
    /// The aggregate kind a stream belongs to, e.g. `deployment`, `rollout`.
    StreamType
);
text_id!(
    /// The id of one aggregate instance within its stream type.
    StreamId
);
text_id!(
    /// Who caused an event: an API key name, or `rollout-controller`.
    Actor
);

/// One stream: the events of one aggregate instance.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StreamRef {
    pub stream_type: StreamType,
    pub stream_id: StreamId,
}

impl StreamRef {
    pub fn new(stream_type: impl Into<String>, stream_id: impl Into<String>) -> Self {
        Self {
            stream_type: StreamType(stream_type.into()),
            stream_id: StreamId(stream_id.into()),
        }
    }
}

impl fmt::Display for StreamRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.stream_type, self.stream_id)
    }
}

/// The global order of an event across all streams; also the audit cursor.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Position(pub i64);

impl Position {
    /// Before the first event.
    pub const START: Position = Position(0);

    /// Parses an opaque cursor string as handed out in [`Page::next_cursor`].
    pub fn parse_cursor(s: &str) -> Result<Position, StoreError> {
        match s.parse::<i64>() {
            Ok(p) if p >= 0 => Ok(Position(p)),
            _ => Err(StoreError::BadCursor(s.to_owned())),
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What the writer believes the stream's version (its last `seq`, 0 when empty) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExpectedVersion {
    /// No check: append after whatever is there.
    Any,
    /// The stream must not exist yet.
    NoStream,
    /// The stream's last `seq` must be exactly this.
    Exact(u64),
}

impl ExpectedVersion {
    pub(crate) fn admits(self, actual: u64) -> bool {
        match self {
            ExpectedVersion::Any => true,
            ExpectedVersion::NoStream => actual == 0,
            ExpectedVersion::Exact(v) => v == actual,
        }
    }
}

impl fmt::Display for ExpectedVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpectedVersion::Any => f.write_str("any"),
            ExpectedVersion::NoStream => f.write_str("no stream"),
            ExpectedVersion::Exact(v) => write!(f, "{v}"),
        }
    }
}

/// An event about to be appended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewEvent {
    /// Past tense, e.g. `RolloutStarted`.
    pub event_type: String,
    /// Payload schema version; older versions are upcast on read.
    pub version: i32,
    pub payload: Value,
    pub actor: Actor,
    pub reason: Option<String>,
}

impl NewEvent {
    pub fn new(event_type: impl Into<String>, version: i32, payload: Value, actor: Actor) -> Self {
        Self {
            event_type: event_type.into(),
            version,
            payload,
            actor,
            reason: None,
        }
    }

    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// An event as stored, after upcasting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    pub position: Position,
    pub stream: StreamRef,
    pub seq: u64,
    pub event_type: String,
    pub version: i32,
    pub payload: Value,
    pub actor: Actor,
    pub reason: Option<String>,
    pub recorded_at: DateTime<Utc>,
}

/// The most events one audit page returns.
pub const AUDIT_MAX_LIMIT: u32 = 1000;

/// Filters of `GET /admin/v1/audit`; every field narrows, `None` means no filter.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditQuery {
    pub deployment: Option<String>,
    pub event_type: Option<String>,
    pub actor: Option<Actor>,
    /// Inclusive lower bound on `recorded_at`.
    pub from: Option<DateTime<Utc>>,
    /// Exclusive upper bound on `recorded_at`.
    pub to: Option<DateTime<Utc>>,
    /// Return events strictly after this position (the previous page's cursor).
    pub after: Option<Position>,
    /// Page size, clamped to 1..=[`AUDIT_MAX_LIMIT`]; 0 means the default of 100.
    pub limit: u32,
}

impl AuditQuery {
    pub(crate) fn effective_limit(&self) -> i64 {
        match self.limit {
            0 => 100,
            n => i64::from(n.min(AUDIT_MAX_LIMIT)),
        }
    }
}

/// One page of audit results in global position order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Page {
    pub events: Vec<Recorded>,
    /// Pass as `after` to get the next page; `None` when this page was the last.
    pub next_cursor: Option<Position>,
}

/// The deployment an event concerns, extracted at append time for the audit index:
/// the stream id of a `deployment` stream, else the payload's `deployment_id`.
pub(crate) fn deployment_of(stream: &StreamRef, payload: &Value) -> Option<String> {
    if stream.stream_type.as_str() == "deployment" {
        return Some(stream.stream_id.0.clone());
    }
    payload
        .get("deployment_id")
        .and_then(Value::as_str)
        .map(str::to_owned)
}
