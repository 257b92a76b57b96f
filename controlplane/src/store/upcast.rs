//! Upcasting: old event versions stay in the table as written and are rewritten to
//! the current shape on read, so aggregates and projections only know the latest.

use std::collections::HashMap;

use serde_json::Value;

use super::Recorded;

/// Turns the payload of version `n` into the payload of version `n + 1`.
pub type UpcastFn = fn(Value) -> Value;

/// A registry of `(event_type, version) -> upcaster to version + 1`, applied in a
/// chain until no upcaster matches.
#[derive(Clone, Debug, Default)]
pub struct Upcasters {
    steps: HashMap<(String, i32), UpcastFn>,
}

impl Upcasters {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the step from `from_version` to `from_version + 1` of `event_type`.
    pub fn register(mut self, event_type: &str, from_version: i32, f: UpcastFn) -> Self {
        self.steps.insert((event_type.to_owned(), from_version), f);
        self
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Brings one event up to the latest registered version of its type.
    pub fn apply(&self, mut event: Recorded) -> Recorded {
        while let Some(step) = self.steps.get(&(event.event_type.clone(), event.version)) {
            event.payload = step(std::mem::take(&mut event.payload));
            event.version += 1;
        }
        event
    }
}
