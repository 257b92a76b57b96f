//! The jobs this executor holds, counted by the reply partition they answer
//! on, for the capacity report's `by_reply_partition`: each API instance
//! reads its own count there and replaces it with what it has in flight now,
//! so a report's age does not make it count its own requests twice or not
//! at all. A job is counted from its submission to the engine until its
//! last reply, by a guard that gives the count back when it drops.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use stoker_schemas::transport::PartitionLoad;

/// Counts by reply partition; cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Held {
    counts: Arc<Mutex<HashMap<i32, u32>>>,
}

/// One job counted; dropping it ends the count.
pub struct Hold {
    counts: Arc<Mutex<HashMap<i32, u32>>>,
    partition: i32,
}

impl Held {
    /// Counts a job answering on `partition` until the guard drops.
    pub fn hold(&self, partition: i32) -> Hold {
        *self.counts.lock().unwrap().entry(partition).or_insert(0) += 1;
        Hold {
            counts: self.counts.clone(),
            partition,
        }
    }

    /// The partitions with jobs held, in partition order.
    pub fn snapshot(&self) -> Vec<PartitionLoad> {
        let mut v: Vec<PartitionLoad> = self
            .counts
            .lock()
            .unwrap()
            .iter()
            .map(|(&partition, &requests)| PartitionLoad {
                partition,
                requests,
            })
            .collect();
        v.sort_by_key(|p| p.partition);
        v
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = counts.get_mut(&self.partition) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.partition);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_counted_while_its_guard_lives_and_empty_partitions_vanish() {
        let held = Held::default();
        assert!(held.snapshot().is_empty());
        let a = held.hold(3);
        let b = held.hold(3);
        let c = held.hold(1);
        let load = |partition, requests| PartitionLoad {
            partition,
            requests,
        };
        assert_eq!(held.snapshot(), vec![load(1, 1), load(3, 2)]);
        drop(b);
        drop(c);
        assert_eq!(held.snapshot(), vec![load(3, 1)]);
        drop(a);
        assert!(held.snapshot().is_empty());
    }
}
