//! The distributed mode's transport: Kafka through `rdkafka` carries jobs,
//! replies, control and capacity between API instances and executors
//! (DESIGN section 8), and leases in Postgres decide which process reads
//! which partition; `topics` lays jobs and replies out over partitions, one
//! writer per partition (pairwise) or one partition per process (shared).
//! Message bodies are `stoker_schemas::transport`.
//!
//! The Kafka client itself (`kafka`, the only code here that links
//! `rdkafka`) is behind the `kafka` feature: the distributed mode and the
//! broker probe turn it on; the server library reads the layout and leases
//! without it.

#[cfg(feature = "kafka")]
pub mod kafka;
pub mod lease;
pub mod topics;

#[cfg(feature = "kafka")]
pub use kafka::{Kafka, KafkaError, KafkaSettings, Receiver};
pub use lease::{Lease, LeaseError, LeaseKind};
pub use topics::{SlotsError, Topics, TransportLayout};
