//! A tenant with `retry = true` behaves like a polite client: a refusal that
//! carried `Retry-After` is sent again once, after that many seconds (at most
//! [`MAX_WAIT`]). Whether shedding with `Retry-After` turns into served
//! requests a little later, or only into more load, is what the overload
//! scenarios ask.
//!
//! The retry's outcome replaces the refusal's, and its latencies run from
//! the retry's own send: the wait is the one the server asked for, and
//! TTFT then compares with the server's estimate for the admitted request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::BoxFuture;

use crate::paced::MAX_WAIT;
use crate::target::{Outcome, Planned, Target};

/// Wraps a target: one retry per refused request that asked for one.
pub struct RetryOnce {
    inner: Arc<dyn Target>,
    retried: AtomicU64,
    accepted: AtomicU64,
}

impl RetryOnce {
    pub fn new(inner: Arc<dyn Target>) -> Self {
        RetryOnce {
            inner,
            retried: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
        }
    }

    /// Requests sent again, and of those, the ones the retry got accepted.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.retried.load(Ordering::Relaxed),
            self.accepted.load(Ordering::Relaxed),
        )
    }

    async fn run(&self, p: Planned) -> Outcome {
        let first = self.inner.send(p.clone()).await;
        let wait = first
            .failure
            .as_ref()
            .filter(|f| f.status.is_some_and(|s| s >= 400))
            .and_then(|f| f.retry_after);
        let Some(wait) = wait else {
            return first;
        };
        self.retried.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(wait.min(MAX_WAIT)).await;
        let mut second = self.inner.send(p).await;
        second.refused_first_in = Some(first.end - first.start);
        if second.ok() {
            self.accepted.fetch_add(1, Ordering::Relaxed);
        }
        second
    }
}

impl Target for RetryOnce {
    fn send(&self, p: Planned) -> BoxFuture<'_, Outcome> {
        Box::pin(self.run(p))
    }
}
