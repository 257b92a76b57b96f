//! The request ids of the jobs an executor took most recently. A consumer
//! re-assigned after a broker error may be handed a job it already ran (a
//! broker that kept its log, an offset read again); running it twice would
//! send a second stream of replies into one the API already ended, so a
//! repeat is dropped. The memory is bounded: the oldest ids go first.

use std::collections::{HashSet, VecDeque};

/// How many ids are remembered; far more than the jobs a reconnect can
/// replay (a few seconds of traffic at the engine's rate).
pub const REMEMBERED: usize = 16_384;

#[derive(Debug)]
pub struct Seen {
    order: VecDeque<String>,
    ids: HashSet<String>,
    capacity: usize,
}

impl Seen {
    pub fn new(capacity: usize) -> Self {
        Seen {
            order: VecDeque::with_capacity(capacity.min(1024)),
            ids: HashSet::with_capacity(capacity.min(1024)),
            capacity: capacity.max(1),
        }
    }

    /// Records `id`; false when it was already there (a repeat).
    pub fn first_time(&mut self, id: &str) -> bool {
        if self.ids.contains(id) {
            return false;
        }
        if self.order.len() == self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.ids.remove(&old);
        }
        self.order.push_back(id.to_string());
        self.ids.insert(id.to_string());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_is_caught_and_the_oldest_ids_are_forgotten_first() {
        let mut s = Seen::new(3);
        for id in ["a", "b", "c"] {
            assert!(s.first_time(id));
        }
        assert!(!s.first_time("a"), "a repeat");
        assert!(s.first_time("d"), "a new id evicts the oldest");
        assert!(s.first_time("a"), "a was forgotten");
        assert!(!s.first_time("c") && !s.first_time("d"));
        assert_eq!((s.order.len(), s.ids.len()), (3, 3), "bounded");
    }
}
