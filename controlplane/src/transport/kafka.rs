//! A thin layer over `rdkafka`: topic creation, one producer per process,
//! and consumers that read assigned partitions (no consumer group: the API
//! routes by headroom, so each executor owns its partition, DESIGN section 8).
//!
//! Consumers start at the partition's high watermark read at assignment, not
//! at `Offset::End`, so a message produced after `assign_*` returns is never
//! skipped by a late offset lookup.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use rdkafka::{Message, Offset, TopicPartitionList};

/// Topic names and partition counts.
#[derive(Clone, Debug)]
pub struct Topics {
    pub interactive: String,
    pub replies: String,
    pub control: String,
    pub capacity: String,
    /// Executors that can be served at once (one partition each).
    pub interactive_partitions: i32,
    /// API instances that can run at once (one partition each).
    pub reply_partitions: i32,
}

impl Default for Topics {
    fn default() -> Self {
        Topics {
            interactive: "stoker.interactive".into(),
            replies: "stoker.replies".into(),
            control: "stoker.control".into(),
            capacity: "stoker.capacity".into(),
            interactive_partitions: 16,
            reply_partitions: 16,
        }
    }
}

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
}

impl KafkaSettings {
    pub fn new(brokers: impl Into<String>) -> Self {
        KafkaSettings {
            brokers: brokers.into(),
            topics: Topics::default(),
            produce_timeout: Duration::from_secs(5),
            fetch_wait_ms: 5,
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
    pub fn connect(settings: KafkaSettings) -> Result<Self, KafkaError> {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", &settings.brokers)
            // Replies are token deltas: send each at once.
            .set("linger.ms", "0")
            .set(
                "message.timeout.ms",
                settings.produce_timeout.as_millis().max(1).to_string(),
            )
            .set("socket.keepalive.enable", "true")
            .set("reconnect.backoff.max.ms", "1000")
            .create()?;
        Ok(Kafka { settings, producer })
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
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.settings.brokers)
            .create()?;
        let t = &self.settings.topics;
        let wanted = [
            (t.interactive.as_str(), t.interactive_partitions),
            (t.replies.as_str(), t.reply_partitions),
            (t.control.as_str(), 1),
            (t.capacity.as_str(), 1),
        ];
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
        Ok(())
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
        let mut rec = FutureRecord::to(topic).key(key).payload(payload);
        if let Some(p) = partition {
            rec = rec.partition(p);
        }
        self.producer
            .send(rec, Timeout::After(self.settings.produce_timeout))
            .await
            .map(|_| ())
            .map_err(|(e, _)| KafkaError::Client(e))
    }

    /// Waits until queued messages are delivered (at shutdown).
    pub fn flush(&self, timeout: Duration) {
        let _ = self.producer.flush(Timeout::After(timeout));
    }

    fn consumer(&self, group: &str) -> Result<StreamConsumer, KafkaError> {
        Ok(ClientConfig::new()
            .set("bootstrap.servers", &self.settings.brokers)
            // Assigned partitions only; the group id is never joined.
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", self.settings.fetch_wait_ms.to_string())
            .set("fetch.min.bytes", "1")
            .set("socket.keepalive.enable", "true")
            .set("reconnect.backoff.max.ms", "1000")
            .create()?)
    }

    /// How many partitions `topic` has, from the broker's metadata.
    pub fn partition_count(&self, topic: &str) -> Result<i32, KafkaError> {
        let c = self.consumer("stoker-metadata")?;
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
    /// end: it sees every message produced after this returns.
    pub fn assign_from_end(
        &self,
        topic: &str,
        partitions: &[i32],
        group: &str,
    ) -> Result<Receiver, KafkaError> {
        let c = self.consumer(group)?;
        let count = self.partition_count(topic)?;
        let mut tpl = TopicPartitionList::new();
        for &p in partitions {
            if p < 0 || p >= count {
                return Err(KafkaError::NoSuchPartition {
                    topic: topic.to_string(),
                    partition: p,
                    count,
                });
            }
            let (_, high) = c.fetch_watermarks(topic, p, Duration::from_secs(10))?;
            tpl.add_partition_offset(topic, p, Offset::Offset(high))?;
        }
        c.assign(&tpl)?;
        Ok(Receiver(c))
    }

    /// A consumer of every partition of `topic` from its current end.
    pub fn assign_all_from_end(&self, topic: &str, group: &str) -> Result<Receiver, KafkaError> {
        let n = self.partition_count(topic)?;
        let all: Vec<i32> = (0..n).collect();
        self.assign_from_end(topic, &all, group)
    }
}

/// The reading end of assigned partitions.
pub struct Receiver(StreamConsumer);

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Receiver")
    }
}

impl Receiver {
    /// The next message's payload (empty for a message without one). Errors
    /// are the broker's; the client reconnects by itself, so callers log,
    /// pause and call again.
    pub async fn recv(&self) -> Result<Vec<u8>, KafkaError> {
        let m = self.0.recv().await?;
        Ok(m.payload().map(<[u8]>::to_vec).unwrap_or_default())
    }
}
