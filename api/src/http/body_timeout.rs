//! A request body that fails when it stops arriving: the bound on slow and
//! stalled uploads (slowloris bodies). The clock starts when the handler
//! first reads and restarts with every frame, so a large upload at a steady
//! pace is never cut off, and a handler that never reads the body never
//! times out on it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::Sleep;

/// The error a body read gives when nothing arrived for the limit; the JSON
/// extractors and the upload route turn it into 408 `request_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("no part of the request body arrived for {} ms", .0.as_millis())]
pub struct BodyIdle(pub Duration);

impl BodyIdle {
    /// The `BodyIdle` somewhere in an error's source chain.
    pub fn find<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyIdle> {
        let mut cur = Some(e);
        while let Some(e) = cur {
            if let Some(idle) = e.downcast_ref::<BodyIdle>() {
                return Some(idle);
            }
            cur = e.source();
        }
        None
    }
}

pub struct IdleBody {
    inner: Body,
    limit: Duration,
    idle: Option<Pin<Box<Sleep>>>,
}

impl IdleBody {
    pub fn wrap(inner: Body, limit: Duration) -> Body {
        Body::new(IdleBody {
            inner,
            limit,
            idle: None,
        })
    }
}

impl HttpBody for IdleBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                let limit = this.limit;
                let idle = this
                    .idle
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                match idle.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyIdle(limit))))),
                    Poll::Pending => Poll::Pending,
                }
            }
            done => {
                this.idle = None;
                done
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    fn channel_body() -> (
        tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
        Body,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let stream =
            futures_util::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|x| (x, rx)) });
        (tx, Body::from_stream(stream))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_arriving_fails_typed_after_the_limit() {
        let (tx, body) = channel_body();
        let body = IdleBody::wrap(body, Duration::from_secs(5));
        tx.send(Ok(Bytes::from_static(b"{\"a\":"))).await.unwrap();
        let started = tokio::time::Instant::now();
        let e = axum::body::to_bytes(body, 1 << 20).await.unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        let idle = BodyIdle::find(&e).expect("a BodyIdle in the chain");
        assert_eq!(idle.0, Duration::from_secs(5));
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_body_longer_than_the_limit_is_read_whole() {
        let (tx, body) = channel_body();
        let body = IdleBody::wrap(body, Duration::from_secs(5));
        let sender = tokio::spawn(async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_secs(4)).await;
                tx.send(Ok(Bytes::from_static(b"0123456789")))
                    .await
                    .unwrap();
            }
        });
        let mut stream = body.into_data_stream();
        let mut got = 0;
        while let Some(chunk) = stream.next().await {
            got += chunk.unwrap().len();
        }
        sender.await.unwrap();
        assert_eq!(got, 100);
    }
}
