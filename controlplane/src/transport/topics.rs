//! Which partition of which topic carries what: the distributed mode's
//! topic names, its slot counts, and the layout that maps an (executor, API)
//! pair onto job and reply partitions. Every process of a cluster must use
//! the same layout and slot counts, so the rules live in one place and the
//! config check, topic creation and both ends of the transport share them.

use serde::{Deserialize, Serialize};

/// How jobs and replies are spread over partitions (`kafka.layout`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportLayout {
    /// One partition per (executor, API) pair in each direction, so every
    /// partition has exactly one writer: `executor_slots x api_slots`
    /// partitions per topic. Correct even on a broker that does not
    /// serialize concurrent producers; the partition count grows with the
    /// product of the slot counts.
    #[default]
    Pairwise,
    /// One job partition per executor slot and one reply partition per API
    /// slot: `executor_slots` and `api_slots` partitions. Every API writes
    /// to an executor's job partition and every executor to an API's reply
    /// partition, so a partition has many writers: the producer is
    /// idempotent, and each request's reply sequence numbers catch a lost
    /// or reordered reply. Needs a broker that appends concurrent produces
    /// to one partition safely (real Kafka).
    Shared,
}

impl TransportLayout {
    /// The setting's value as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            TransportLayout::Pairwise => "pairwise",
            TransportLayout::Shared => "shared",
        }
    }
}

/// The most executor slots either layout accepts.
pub const MAX_EXECUTOR_SLOTS: i32 = 4096;
/// The most API slots either layout accepts.
pub const MAX_API_SLOTS: i32 = 1024;
/// The pairwise layout's cap on `executor_slots x api_slots`: the partitions
/// each of its job and reply topics has (256 x 256).
pub const MAX_PAIRWISE_PARTITIONS: i64 = 65_536;

/// Slot counts a layout cannot carry, naming the setting and the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SlotsError {
    #[error("kafka.{setting} = {value}: it must be at least 1")]
    TooFew { setting: &'static str, value: i32 },
    #[error("kafka.{setting} = {value}: at most {max} are supported; lower it")]
    TooMany {
        setting: &'static str,
        value: i32,
        max: i32,
    },
    #[error(
        "kafka.executor_slots x kafka.api_slots = {executor_slots} x {api_slots} = {product} \
         partitions per topic in the pairwise layout, above its limit of {max}: lower one of \
         them, or set kafka.layout = \"shared\" (executor_slots job and api_slots reply \
         partitions; needs a broker that takes concurrent producers on one partition)"
    )]
    PairwiseTooLarge {
        executor_slots: i32,
        api_slots: i32,
        product: i64,
        max: i64,
    },
}

/// Topic names, the slot counts their partitions are laid out from, and the
/// layout.
///
/// Cancels go to `stoker.control` partition `a` (API slot `a` its only
/// writer) and capacity reports to `stoker.capacity` partition `e` (executor
/// slot `e`) in both layouts. Jobs and replies follow [`TransportLayout`]:
///
/// - `Pairwise` (the default): executor `e` and API `a` talk over their own
///   pair of partitions, jobs on `stoker.interactive` partition
///   `e * api_slots + a` and replies on `stoker.replies` partition
///   `a * executor_slots + e`. One writer per partition keeps each
///   conversation's messages in order without relying on the broker to
///   serialize concurrent producers (the test broker, tansu 0.6 with memory
///   storage, loses batches when two connections produce to one partition at
///   once).
/// - `Shared`: jobs for executor `e` from every API on `stoker.interactive`
///   partition `e`, replies for API `a` from every executor on
///   `stoker.replies` partition `a`. A process still reads only messages
///   meant for it; a partition has many writers.
#[derive(Clone, Debug)]
pub struct Topics {
    pub interactive: String,
    pub replies: String,
    pub control: String,
    pub capacity: String,
    /// Executors that can run at once (one slot each).
    pub executor_slots: i32,
    /// API instances that can run at once (one slot each).
    pub api_slots: i32,
    /// How jobs and replies map onto partitions.
    pub layout: TransportLayout,
}

impl Default for Topics {
    fn default() -> Self {
        Topics {
            interactive: "stoker.interactive".into(),
            replies: "stoker.replies".into(),
            control: "stoker.control".into(),
            capacity: "stoker.capacity".into(),
            executor_slots: 16,
            api_slots: 16,
            layout: TransportLayout::default(),
        }
    }
}

impl Topics {
    /// Whether `layout` can carry these slot counts (the config's check).
    pub fn check_slots(
        layout: TransportLayout,
        executor_slots: i32,
        api_slots: i32,
    ) -> Result<(), SlotsError> {
        for (setting, value, max) in [
            ("executor_slots", executor_slots, MAX_EXECUTOR_SLOTS),
            ("api_slots", api_slots, MAX_API_SLOTS),
        ] {
            if value < 1 {
                return Err(SlotsError::TooFew { setting, value });
            }
            if value > max {
                return Err(SlotsError::TooMany {
                    setting,
                    value,
                    max,
                });
            }
        }
        let product = i64::from(executor_slots) * i64::from(api_slots);
        if layout == TransportLayout::Pairwise && product > MAX_PAIRWISE_PARTITIONS {
            return Err(SlotsError::PairwiseTooLarge {
                executor_slots,
                api_slots,
                product,
                max: MAX_PAIRWISE_PARTITIONS,
            });
        }
        Ok(())
    }

    /// The `stoker.interactive` partition API slot `api` sends executor slot
    /// `executor`'s jobs to (shared: the same for every API).
    pub fn job_partition(&self, executor: i32, api: i32) -> i32 {
        match self.layout {
            TransportLayout::Pairwise => executor * self.api_slots + api,
            TransportLayout::Shared => executor,
        }
    }

    /// Every job partition executor slot `executor` reads: one per API slot
    /// (pairwise), or its one partition (shared). Either way they carry only
    /// this executor's jobs.
    pub fn job_partitions(&self, executor: i32) -> Vec<i32> {
        match self.layout {
            TransportLayout::Pairwise => (0..self.api_slots)
                .map(|a| self.job_partition(executor, a))
                .collect(),
            TransportLayout::Shared => vec![self.job_partition(executor, 0)],
        }
    }

    /// The `stoker.replies` partition executor slot `executor` answers API
    /// slot `api` on (shared: the same for every executor).
    pub fn reply_partition(&self, api: i32, executor: i32) -> i32 {
        match self.layout {
            TransportLayout::Pairwise => api * self.executor_slots + executor,
            TransportLayout::Shared => api,
        }
    }

    /// Every reply partition API slot `api` reads: one per executor slot
    /// (pairwise), or its one partition (shared). Either way they carry only
    /// this API's replies.
    pub fn reply_partitions(&self, api: i32) -> Vec<i32> {
        match self.layout {
            TransportLayout::Pairwise => (0..self.executor_slots)
                .map(|e| self.reply_partition(api, e))
                .collect(),
            TransportLayout::Shared => vec![self.reply_partition(api, 0)],
        }
    }

    /// Whether executor slot `executor` may answer on reply partition
    /// `partition`: it is `reply_partition(a, executor)` for some API slot
    /// `a`. A job naming any other partition was sent by a process with
    /// another layout or other slot counts.
    pub fn answers_on(&self, executor: i32, partition: i32) -> bool {
        let [_, (_, count), _, _] = self.layout();
        if !(0..count).contains(&partition) {
            return false;
        }
        match self.layout {
            TransportLayout::Pairwise => partition % self.executor_slots.max(1) == executor,
            TransportLayout::Shared => partition < self.api_slots,
        }
    }

    /// The `stoker.control` partition API slot `api` writes.
    pub fn control_partition(&self, api: i32) -> i32 {
        api
    }

    /// The `stoker.capacity` partition executor slot `executor` writes.
    pub fn capacity_partition(&self, executor: i32) -> i32 {
        executor
    }

    /// Each topic with the partition count this layout needs: jobs, replies,
    /// control, capacity.
    pub fn layout(&self) -> [(&str, i32); 4] {
        let (e, a) = (self.executor_slots.max(1), self.api_slots.max(1));
        let (jobs, replies) = match self.layout {
            TransportLayout::Pairwise => (e * a, a * e),
            TransportLayout::Shared => (e, a),
        };
        [
            (self.interactive.as_str(), jobs),
            (self.replies.as_str(), replies),
            (self.control.as_str(), a),
            (self.capacity.as_str(), e),
        ]
    }

    /// The settings `topic`'s partition count follows, for an operator
    /// reading why a topic is too small.
    pub fn partition_rule(&self, topic: &str) -> String {
        let layout = self.layout.as_str();
        let rule = if topic == self.control {
            "kafka.api_slots"
        } else if topic == self.capacity {
            "kafka.executor_slots"
        } else if self.layout == TransportLayout::Pairwise {
            "kafka.executor_slots x kafka.api_slots"
        } else if topic == self.interactive {
            "kafka.executor_slots"
        } else {
            "kafka.api_slots"
        };
        format!("{rule} (kafka.layout = \"{layout}\")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn topics(layout: TransportLayout, e: i32, a: i32) -> Topics {
        Topics {
            executor_slots: e,
            api_slots: a,
            layout,
            ..Topics::default()
        }
    }

    const SHAPES: [(i32, i32); 5] = [(1, 1), (3, 5), (16, 16), (7, 1), (1, 9)];

    /// Each (executor, API) pair has its own job and reply partition, inside
    /// the topic, and each process's read set is exactly its pairs.
    #[test]
    fn pairwise_gives_every_pair_its_own_partitions() {
        for (e, a) in SHAPES {
            let t = topics(TransportLayout::Pairwise, e, a);
            let [(_, jobs), (_, replies), (_, control), (_, capacity)] = t.layout();
            assert_eq!((jobs, replies, control, capacity), (e * a, e * a, a, e));
            let mut seen_jobs = HashSet::new();
            let mut seen_replies = HashSet::new();
            for ex in 0..e {
                for api in 0..a {
                    let j = t.job_partition(ex, api);
                    let r = t.reply_partition(api, ex);
                    assert!((0..jobs).contains(&j) && (0..replies).contains(&r));
                    assert!(seen_jobs.insert(j), "job partition {j} shared");
                    assert!(seen_replies.insert(r), "reply partition {r} shared");
                    assert!(t.job_partitions(ex).contains(&j));
                    assert!(t.reply_partitions(api).contains(&r));
                    assert!(t.answers_on(ex, r));
                    assert!((0..control).contains(&t.control_partition(api)));
                    assert!((0..capacity).contains(&t.capacity_partition(ex)));
                }
                assert_eq!(t.job_partitions(ex).len() as i32, a);
            }
            assert_eq!(seen_jobs.len() as i32, jobs);
            assert_eq!(seen_replies.len() as i32, replies);
            // Another executor's reply partitions are not this one's to write.
            for ex in 0..e {
                let mine = (0..replies).filter(|&r| t.answers_on(ex, r)).count() as i32;
                assert_eq!(mine, a, "executor {ex} answers on one partition per API");
            }
            assert!(!t.answers_on(0, replies) && !t.answers_on(0, -1));
        }
    }

    /// Executor `e` alone reads job partition `e`, API `a` alone reads reply
    /// partition `a`; every pair maps inside the topics.
    #[test]
    fn shared_gives_every_process_one_partition() {
        for (e, a) in SHAPES {
            let t = topics(TransportLayout::Shared, e, a);
            let [(_, jobs), (_, replies), (_, control), (_, capacity)] = t.layout();
            assert_eq!((jobs, replies, control, capacity), (e, a, a, e));
            let mut job_reader = std::collections::HashMap::new();
            let mut reply_reader = std::collections::HashMap::new();
            for ex in 0..e {
                assert_eq!(t.job_partitions(ex), vec![ex]);
                for api in 0..a {
                    let j = t.job_partition(ex, api);
                    let r = t.reply_partition(api, ex);
                    assert!((0..jobs).contains(&j) && (0..replies).contains(&r));
                    assert_eq!(*job_reader.entry(j).or_insert(ex), ex, "job partition {j}");
                    assert_eq!(*reply_reader.entry(r).or_insert(api), api, "reply {r}");
                    assert!(t.job_partitions(ex).contains(&j));
                    assert!(t.reply_partitions(api).contains(&r));
                    assert!(t.answers_on(ex, r));
                }
            }
            assert_eq!(
                job_reader.len() as i32,
                e,
                "distinct executors, distinct partitions"
            );
            assert_eq!(
                reply_reader.len() as i32,
                a,
                "distinct APIs, distinct partitions"
            );
            for api in 0..a {
                assert_eq!(t.reply_partitions(api), vec![api]);
            }
            assert!(!t.answers_on(0, a) && !t.answers_on(0, -1));
        }
    }

    #[test]
    fn slot_limits_follow_the_layout() {
        use TransportLayout::{Pairwise, Shared};
        assert!(Topics::check_slots(Pairwise, 256, 256).is_ok());
        assert!(Topics::check_slots(Pairwise, 4096, 16).is_ok());
        assert!(Topics::check_slots(Shared, 4096, 1024).is_ok());
        let e = Topics::check_slots(Pairwise, 4096, 1024).unwrap_err();
        assert!(matches!(
            e,
            SlotsError::PairwiseTooLarge {
                product: 4_194_304,
                ..
            }
        ));
        let m = e.to_string();
        assert!(m.contains("kafka.executor_slots") && m.contains("kafka.layout = \"shared\""));
        let e = Topics::check_slots(Shared, 4097, 1).unwrap_err();
        assert!(e.to_string().contains("kafka.executor_slots = 4097"), "{e}");
        let e = Topics::check_slots(Shared, 1, 1025).unwrap_err();
        assert!(e.to_string().contains("kafka.api_slots = 1025"), "{e}");
        for (ex, api) in [(0, 1), (1, 0), (-1, 4)] {
            let e = Topics::check_slots(Shared, ex, api).unwrap_err();
            assert!(matches!(e, SlotsError::TooFew { .. }), "{e}");
        }
    }

    #[test]
    fn too_few_partitions_names_the_rule_of_the_layout() {
        let t = topics(TransportLayout::Shared, 4, 2);
        assert!(
            t.partition_rule(&t.interactive)
                .starts_with("kafka.executor_slots (")
        );
        assert!(
            t.partition_rule(&t.replies)
                .starts_with("kafka.api_slots (")
        );
        let t = topics(TransportLayout::Pairwise, 4, 2);
        assert!(t.partition_rule(&t.replies).contains("x kafka.api_slots"));
        assert!(t.partition_rule(&t.capacity).contains("\"pairwise\""));
    }
}
