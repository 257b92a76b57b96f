//! A closed-loop client that waits out `Retry-After` as the OpenAI SDKs do.
//! Both the load driver (`stoker bench serve`'s closed loop) and the
//! scenarios' retrying clients (`scenario::retry`) use it, so it sits below
//! both.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::target::{Outcome, Planned, Target};

/// The longest `Retry-After` a client waits.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// A closed-loop client as the OpenAI SDKs behave: after a refusal that
/// carried `Retry-After`, it waits that long (at most [`MAX_WAIT`], and
/// never past the end of its phase) before sending its next request. Without
/// the pause, 32 clients that are refused in a millisecond send hundreds of
/// requests a second, and the scenario measures how fast the server refuses
/// rather than how it serves.
pub struct Paced {
    inner: Arc<dyn Target>,
    until: tokio::time::Instant,
}

impl Paced {
    pub fn new(inner: Arc<dyn Target>, until: tokio::time::Instant) -> Self {
        Paced { inner, until }
    }

    async fn run(&self, p: Planned) -> Outcome {
        let out = self.inner.send(p).await;
        if let Some(wait) = out
            .failure
            .as_ref()
            .filter(|f| f.status.is_some_and(|s| s >= 400))
            .and_then(|f| f.retry_after)
        {
            let at = (tokio::time::Instant::now() + wait.min(MAX_WAIT)).min(self.until);
            tokio::time::sleep_until(at).await;
        }
        out
    }
}

impl Target for Paced {
    fn send(&self, p: Planned) -> BoxFuture<'_, Outcome> {
        Box::pin(self.run(p))
    }
}
