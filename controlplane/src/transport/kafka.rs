//! A thin layer over `rdkafka`: topic creation, one producer per process,
//! and consumers that read assigned partitions (no consumer group: the API
//! routes by headroom, so each executor reads its own job partitions and each
//! API its own reply partitions, DESIGN section 8). Which partitions those
//! are, in the pairwise or the shared layout, is `topics`'s.
//!
//! Consumers start at the partition's high watermark read at assignment, not
//! at `Offset::End`, so a message produced after `assign_*` returns is never
//! skipped by a late offset lookup.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{Message, Offset, TopicPartitionList};

pub use super::topics::{Topics, TransportLayout};

/// The fetch wait of consumers off the first token's path.
pub const BACKGROUND_FETCH_WAIT_MS: u32 = 50;

#[derive(Clone, Debug)]
pub struct KafkaSettings {
    /// `host:port[,host:port]`.
    pub brokers: String,
    pub topics: Topics,
    /// How long a produce may wait for the broker before it fails (and the
    /// caller answers `not_ready`).
    pub produce_timeout: Duration,
    /// How long a consumer waits for data before the broker answers an empty
    /// fetch; bounds the latency a message adds.
    pub fetch_wait_ms: u32,
    /// librdkafka properties set on every client, after ours (so they win).
    pub client_properties: Vec<(String, String)>,
}

impl KafkaSettings {
    pub fn new(brokers: impl Into<String>) -> Self {
        KafkaSettings {
            brokers: brokers.into(),
            topics: Topics::default(),
            produce_timeout: Duration::from_secs(5),
            fetch_wait_ms: 5,
            client_properties: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error("kafka client: {0}")]
    Client(#[from] rdkafka::error::KafkaError),
    #[error("creating topic {topic}: {code}")]
    CreateTopic { topic: String, code: String },
    #[error("topic {0} has no partitions in the broker's metadata")]
    NoPartitions(String),
    #[error("a blocking broker call did not finish: {0}")]
    Blocking(String),
    #[error("the broker is unavailable; waiting for it to come back")]
    Unavailable,
    #[error(
        "topic {topic} has {have} partitions; {rule} needs {need}: use the slot counts and \
         layout it was made with, or delete the topic"
    )]
    TooFewPartitions {
        topic: String,
        have: i32,
        need: i32,
        /// The settings the count follows ([`Topics::partition_rule`]).
        rule: String,
    },
    #[error("partition {partition} is outside topic {topic}'s {count} partitions")]
    NoSuchPartition {
        topic: String,
        partition: i32,
        count: i32,
    },
}

/// The process's connection to the broker: one producer for everything it
/// sends, and the settings consumers are made from.
#[derive(Clone)]
pub struct Kafka {
    settings: KafkaSettings,
    producer: FutureProducer,
    /// Set when a consumer or produce failed: the broker may have restarted
    /// without its log (topics gone), so [`Kafka::heal`] re-creates them.
    trouble: Arc<AtomicBool>,
}

impl std::fmt::Debug for Kafka {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kafka")
            .field("brokers", &self.settings.brokers)
            .finish()
    }
}

impl Kafka {
    /// Connects the producer; nothing is sent until the first message.
    ///
    /// In the shared layout the producer is idempotent: several processes
    /// write one partition, and a retried produce must not land twice or
    /// out of order within this producer's messages. The pairwise layout's
    /// partitions each have one writer and keep the plain producer. An
    /// operator's `enable.idempotence` in `client_properties` wins.
    pub fn connect(settings: KafkaSettings) -> Result<Self, KafkaError> {
        let idempotent = settings.topics.layout == TransportLayout::Shared;
        let producer: FutureProducer = client_config(&settings)
            .set("enable.idempotence", idempotent.to_string())
            // Replies are token deltas: send each at once.
            .set("linger.ms", "0")
            .set(
                "message.timeout.ms",
                settings.produce_timeout.as_millis().max(1).to_string(),
            )
            .set("socket.keepalive.enable", "true")
            .set("reconnect.backoff.max.ms", "1000")
            .set("topic.metadata.refresh.interval.ms", "2000")
            .with_properties(&settings)
            .create()?;
        Ok(Kafka {
            settings,
            producer,
            trouble: Arc::new(AtomicBool::new(false)),
        })
    }

    pub fn settings(&self) -> &KafkaSettings {
        &self.settings
    }

    pub fn topics(&self) -> &Topics {
        &self.settings.topics
    }

    /// Creates the topics that do not exist yet, with the configured
    /// partition counts. Existing topics are left as they are.
    pub async fn ensure_topics(&self) -> Result<(), KafkaError> {
        let admin: AdminClient<DefaultClientContext> = client_config(&self.settings)
            .with_properties(&self.settings)
            .create()?;
        let t = &self.settings.topics;
        let wanted = t.layout();
        let new: Vec<NewTopic<'_>> = wanted
            .iter()
            .map(|(name, parts)| {
                let nt = NewTopic::new(name, (*parts).max(1), TopicReplication::Fixed(1));
                if *name == t.capacity {
                    // Only the latest report per executor matters.
                    nt.set("cleanup.policy", "compact")
                } else {
                    nt
                }
            })
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        for r in admin.create_topics(new.iter(), &opts).await? {
            match r {
                Ok(_) => {}
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => {
                    return Err(KafkaError::CreateTopic {
                        topic,
                        code: code.to_string(),
                    });
                }
            }
        }
        // A topic made earlier under other slot counts cannot carry this
        // layout: say so at start rather than misroute later.
        let wanted: Vec<(String, i32)> = wanted.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        let k = self.clone();
        tokio::task::spawn_blocking(move || {
            for (topic, need) in wanted {
                let have = k.partition_count(&topic)?;
                if have < need {
                    let rule = k.topics().partition_rule(&topic);
                    return Err(KafkaError::TooFewPartitions {
                        topic,
                        have,
                        need,
                        rule,
                    });
                }
            }
            Ok(())
        })
        .await
        .map_err(|e| KafkaError::Blocking(e.to_string()))?
    }

    /// Sends one message to a partition (or, with `None`, by key) and waits
    /// until the broker has it or the produce timeout passed.
    pub async fn send(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: &str,
        payload: &[u8],
    ) -> Result<(), KafkaError> {
        // While the broker is (or was just) gone, fail fast rather than
        // queue messages for a broker that may come back without its topics.
        if !self.healthy() {
            return Err(KafkaError::Unavailable);
        }
        let mut rec = FutureRecord::to(topic).key(key).payload(payload);
        if let Some(p) = partition {
            rec = rec.partition(p);
        }
        self.producer
            .send(rec, Timeout::After(self.settings.produce_timeout))
            .await
            .map(|_| ())
            .map_err(|(e, _)| {
                self.trouble.store(true, Ordering::Relaxed);
                KafkaError::Client(e)
            })
    }

    /// After trouble, makes sure the topics exist again (a broker that lost
    /// its log comes back without them). Cheap when nothing went wrong.
    pub async fn heal(&self) {
        if !self.trouble.load(Ordering::Relaxed) {
            return;
        }
        match self.ensure_topics().await {
            Ok(()) => {
                self.trouble.store(false, Ordering::Relaxed);
                tracing::info!("broker reachable; topics in place");
            }
            // A topic that cannot carry the layout will not heal by waiting:
            // say so where an operator looks.
            Err(e @ (KafkaError::TooFewPartitions { .. } | KafkaError::CreateTopic { .. })) => {
                tracing::warn!(error = %e, "broker reachable but its topics are unusable")
            }
            Err(e) => tracing::debug!(error = %e, "broker still unavailable"),
        }
    }

    /// Re-checks the topics every `every` after trouble, for as long as the
    /// process runs.
    pub fn spawn_healer(&self, every: Duration) {
        let k = self.clone();
        tokio::spawn(async move {
            let mut t = tokio::time::interval(every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                t.tick().await;
                k.heal().await;
            }
        });
    }

    /// Waits until queued messages are delivered (at shutdown).
    pub fn flush(&self, timeout: Duration) {
        let _ = self.producer.flush(Timeout::After(timeout));
    }

    fn consumer(&self, group: &str, fetch_wait_ms: u32) -> Result<StreamConsumer, KafkaError> {
        Ok(client_config(&self.settings)
            // Assigned partitions only; the group id is never joined.
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", fetch_wait_ms.to_string())
            .set("fetch.min.bytes", "1")
            .set("socket.keepalive.enable", "true")
            .set("reconnect.backoff.max.ms", "1000")
            // A broker that came back without its log has lower offsets than
            // the ones we hold: read its new log from the start, so nothing
            // produced since it came back is skipped (stale or foreign
            // messages are refused by request and executor id).
            .set("auto.offset.reset", "earliest")
            .set("topic.metadata.refresh.interval.ms", "2000")
            .with_properties(&self.settings)
            .create()?)
    }

    /// How many partitions `topic` has, from the broker's metadata.
    pub fn partition_count(&self, topic: &str) -> Result<i32, KafkaError> {
        let c = self.consumer("stoker-metadata", self.settings.fetch_wait_ms)?;
        let md = c.fetch_metadata(Some(topic), Duration::from_secs(10))?;
        let n = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .map(|t| t.partitions().len() as i32)
            .unwrap_or(0);
        if n == 0 {
            return Err(KafkaError::NoPartitions(topic.to_string()));
        }
        Ok(n)
    }

    /// A consumer of the given partitions of `topic`, each from its current
    /// end: it sees every message produced after this returns. It fetches
    /// with `fetch_wait_ms`: for jobs and replies, on the first token's path.
    pub fn assign_from_end(
        &self,
        topic: &str,
        partitions: &[i32],
        group: &str,
    ) -> Result<Receiver, KafkaError> {
        let mut r = Receiver {
            consumer: None,
            kafka: self.clone(),
            topic: topic.to_string(),
            partitions: Some(partitions.to_vec()),
            group: group.to_string(),
            fetch_wait_ms: self.settings.fetch_wait_ms,
        };
        r.consumer = Some(r.assign()?);
        Ok(r)
    }

    /// A consumer of every partition of `topic` from its current end, at a
    /// background pace ([`BACKGROUND_FETCH_WAIT_MS`]): capacity reports and
    /// cancels, where that is nothing against their cadence, and a broker
    /// that cannot end a fetch early (tansu) answers fewer empty ones.
    pub fn assign_all_from_end(&self, topic: &str, group: &str) -> Result<Receiver, KafkaError> {
        let mut r = Receiver {
            consumer: None,
            kafka: self.clone(),
            topic: topic.to_string(),
            partitions: None,
            group: group.to_string(),
            fetch_wait_ms: BACKGROUND_FETCH_WAIT_MS.max(self.settings.fetch_wait_ms),
        };
        r.consumer = Some(r.assign()?);
        Ok(r)
    }

    /// Whether no trouble was seen since the topics were last confirmed.
    pub fn healthy(&self) -> bool {
        !self.trouble.load(Ordering::Relaxed)
    }
}

/// A client configuration naming the brokers; callers add their settings,
/// then [`WithProperties::with_properties`] the operator's.
///
/// No client of ours lets the broker create a topic: a producer asks for
/// auto-creation by default, and a broker that came back without its log
/// (or runs with `auto.create.topics.enable`) would then make the topic at
/// its default partition count (tansu: 4) the moment the producer refreshed
/// its metadata, before [`Kafka::heal`] could make it with the layout's.
/// Such a topic can never carry the layout, and the process would stay
/// `not_ready` until an operator deleted it.
fn client_config(settings: &KafkaSettings) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &settings.brokers);
    c.set("allow.auto.create.topics", "false");
    c
}

/// Applies the operator's librdkafka properties last, so they win.
trait WithProperties {
    fn with_properties(&mut self, settings: &KafkaSettings) -> &mut Self;
}

impl WithProperties for ClientConfig {
    fn with_properties(&mut self, settings: &KafkaSettings) -> &mut Self {
        for (k, v) in &settings.client_properties {
            self.set(k, v);
        }
        self
    }
}

/// The reading end of assigned partitions.
///
/// On a broker error the consumer is dropped, and a new one is assigned
/// once [`Kafka::heal`] has confirmed the topics again. A consumer that kept
/// fetching from a broker that came back without its topics would get
/// leader-discovery replies that crash librdkafka 2.12 (a null topic name in
/// its metadata cache update); a fresh assignment after the topics exist
/// never asks for a missing one.
pub struct Receiver {
    consumer: Option<StreamConsumer>,
    kafka: Kafka,
    topic: String,
    /// `None`: every partition.
    partitions: Option<Vec<i32>>,
    group: String,
    fetch_wait_ms: u32,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("topic", &self.topic)
            .field("partitions", &self.partitions)
            .finish()
    }
}

impl Receiver {
    /// A consumer of this receiver's partitions from their current ends
    /// (blocking: reads offsets from the broker).
    fn assign(&self) -> Result<StreamConsumer, KafkaError> {
        let k = &self.kafka;
        let c = k.consumer(&self.group, self.fetch_wait_ms)?;
        let count = k.partition_count(&self.topic)?;
        let partitions = self
            .partitions
            .clone()
            .unwrap_or_else(|| (0..count).collect());
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            if p < 0 || p >= count {
                return Err(KafkaError::NoSuchPartition {
                    topic: self.topic.clone(),
                    partition: p,
                    count,
                });
            }
            let (_, high) = c.fetch_watermarks(&self.topic, p, Duration::from_secs(10))?;
            tpl.add_partition_offset(&self.topic, p, Offset::Offset(high))?;
        }
        c.assign(&tpl)?;
        Ok(c)
    }

    /// The next message's payload (empty for a message without one). An
    /// error means the broker is unreachable; callers log, pause and call
    /// again, and this reconnects once the broker and its topics are back.
    pub async fn recv(&mut self) -> Result<Vec<u8>, KafkaError> {
        if self.consumer.is_none() {
            while !self.kafka.healthy() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let me = Receiver {
                consumer: None,
                kafka: self.kafka.clone(),
                topic: self.topic.clone(),
                partitions: self.partitions.clone(),
                group: self.group.clone(),
                fetch_wait_ms: self.fetch_wait_ms,
            };
            let c = tokio::task::spawn_blocking(move || me.assign())
                .await
                .map_err(|e| KafkaError::Blocking(e.to_string()))?;
            match c {
                Ok(c) => {
                    tracing::info!(topic = %self.topic, "consumer re-assigned");
                    self.consumer = Some(c);
                }
                Err(e) => {
                    self.kafka.trouble.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
        let consumer = self.consumer.as_ref().expect("assigned above");
        match consumer.recv().await {
            Ok(m) => Ok(m.payload().map(<[u8]>::to_vec).unwrap_or_default()),
            Err(e) => {
                self.kafka.trouble.store(true, Ordering::Relaxed);
                // Stop fetching now; closing a consumer may block briefly.
                if let Some(c) = self.consumer.take() {
                    tokio::task::spawn_blocking(move || drop(c));
                }
                Err(e.into())
            }
        }
    }
}
