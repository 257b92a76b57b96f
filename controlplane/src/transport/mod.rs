//! The distributed mode's transport: Kafka through `rdkafka` carries jobs,
//! replies, control and capacity between API instances and executors
//! (DESIGN section 8), and leases in Postgres decide which process reads
//! which partition. Message bodies are `stoker_schemas::transport`.

pub mod kafka;
pub mod lease;

pub use kafka::{Kafka, KafkaError, KafkaSettings, Receiver, Topics};
pub use lease::{Lease, LeaseError, LeaseKind};
