//! The distributed mode's Kafka glue shared by both sides (the API's remote
//! backend and the executor's job front): transport settings from the
//! config, and the loop that decodes a partition's messages for as long as
//! the process runs. The topics, partition layout and leases themselves are
//! the control plane's (`stoker_controlplane::transport`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stoker_controlplane::transport::{KafkaSettings, Lease, LeaseError, Receiver};
use stoker_schemas::transport::Versioned;

use stoker_api::config::Config;

/// The transport settings a process's config names.
pub fn kafka_settings(config: &Config) -> KafkaSettings {
    let k = &config.kafka;
    let mut s = KafkaSettings::new(k.brokers.clone());
    s.topics.executor_slots = k.executor_slots;
    s.topics.api_slots = k.api_slots;
    s.topics.layout = k.layout;
    s.produce_timeout = Duration::from_millis(k.produce_timeout_ms.max(1));
    s.fetch_wait_ms = k.fetch_wait_ms;
    s.client_properties = k
        .client_properties
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    s
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Whether a repeated warning is due: the first time, then at most every
/// ten seconds (a broker outage fails every poll).
pub fn warn_due(last: &mut Option<std::time::Instant>) -> bool {
    let now = std::time::Instant::now();
    match last {
        Some(t) if now.duration_since(*t) < Duration::from_secs(10) => false,
        _ => {
            *last = Some(now);
            true
        }
    }
}

/// Decodes every message `rx` receives as a `M` and hands it to `on_message`
/// for as long as the process runs. A body that does not decode is dropped
/// with a warning; broker errors are retried, and logged at most every ten
/// seconds.
pub fn spawn_consumer<M, F>(
    rt: &tokio::runtime::Handle,
    mut rx: Receiver,
    what: &'static str,
    mut on_message: F,
) where
    M: Versioned + Send + 'static,
    F: FnMut(M) + Send + 'static,
{
    rt.spawn(async move {
        let mut warned = None;
        loop {
            match rx.recv().await {
                Ok(m) => match M::decode(&m) {
                    Ok(msg) => on_message(msg),
                    Err(e) => tracing::warn!(error = %e, consumer = what, "dropping a message"),
                },
                Err(e) => {
                    if warn_due(&mut warned) {
                        tracing::warn!(error = %e, consumer = what, "consumer error (repeats are not logged for 10 s)");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
}

/// Renews `lease` every third of its TTL; when another process took it
/// over, calls `on_lost` (the process stops taking work: it drains) and stops.
/// The returned hold gives the slot up at a clean stop.
pub fn spawn_renewal(lease: Lease, on_lost: impl FnOnce() + Send + 'static) -> LeaseHold {
    let every = (lease.ttl / 3).max(Duration::from_millis(100));
    let renewed = lease.clone();
    let renewal = tokio::spawn(async move {
        let lease = renewed;
        let mut t = tokio::time::interval(every);
        loop {
            t.tick().await;
            if let Err(e) = lease.renew().await {
                tracing::error!(error = %e, kind = lease.kind.as_str(), slot = lease.slot, "slot lease");
                if matches!(e, LeaseError::Lost { .. }) {
                    on_lost();
                    return;
                }
            }
        }
    });
    LeaseHold { lease, renewal }
}

/// A slot lease this process renews. Released at a clean stop, the slot is
/// free for the next process at once rather than after the lease's TTL
/// (a killed process's slot still waits out the TTL).
#[derive(Debug)]
pub struct LeaseHold {
    lease: Lease,
    renewal: tokio::task::JoinHandle<()>,
}

impl LeaseHold {
    /// Stops renewing and deletes the lease (only if this process still
    /// holds it). The caller must write nothing more to the slot's
    /// partitions: their next holder is their only writer.
    pub async fn release(self) {
        self.renewal.abort();
        let (kind, slot) = (self.lease.kind.as_str(), self.lease.slot);
        match self.lease.release().await {
            Ok(()) => tracing::info!(kind, slot, "slot lease released"),
            Err(e) => {
                tracing::warn!(error = %e, kind, slot, "could not release the slot lease; it expires after its TTL")
            }
        }
    }
}
