//! The accept loop: hyper's HTTP/1 connections with the timeouts a server
//! facing the internet needs, which `axum::serve` leaves out.
//!
//! - **Headers.** `axum::serve` gives hyper no timer, so hyper's header-read
//!   timeout never applies and a client that sends half a request line holds
//!   its connection (and task) until it leaves. Here hyper has a timer and
//!   the `limits.header_read_timeout_ms` bound, which also closes a
//!   keep-alive connection idle that long.
//! - **Writes.** A client that stops reading (an SSE stream it no longer
//!   drains) fills its socket's buffers, after which hyper waits on the write
//!   forever, holding the response body and with it the request's admission
//!   share and its sequence in the engine. [`StallGuard`] fails a write that
//!   has made no progress for `limits.write_stall_timeout_ms`: hyper closes
//!   the connection, the body is dropped, and the generation is cancelled as
//!   for a client that disconnected. A write stalls only once the socket's
//!   send buffer is full (the kernel grows it to a few MiB);
//!   `limits.send_buffer_bytes` bounds it where that is too much to hold.
//! - **Bodies** are bounded by [`IdleBody`] in the router (a body that stops
//!   arriving is 408), since only the handler knows when it reads one.
//!
//! Shutdown is graceful: the listener closes, and the loop returns once
//! every open connection has finished its response.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::time::Sleep;

pub use super::body_timeout::IdleBody;

/// The per-connection bounds; `None` turns one off.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub header_read: Option<Duration>,
    pub write_stall: Option<Duration>,
    /// `SO_SNDBUF` of each connection; `None` leaves the kernel's.
    pub send_buffer: Option<usize>,
}

/// Serves `app` on `listener` until `shutdown` resolves, then waits for the
/// open connections to finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors or a connection reset before it was
                    // accepted: keep serving the connections there are.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        if let Some(bytes) = limits.send_buffer
            && let Err(e) = socket2::SockRef::from(&stream).set_send_buffer_size(bytes)
        {
            tracing::warn!(error = %e, bytes, "could not set the send buffer");
        }
        let io = TokioIo::new(StallGuard::new(stream, limits.write_stall));
        let conn = builder.serve_connection(io, TowerToHyperService::new(app.clone()));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// An I/O stream whose writes fail once one has been pending for `limit`.
pub struct StallGuard<T> {
    inner: T,
    limit: Option<Duration>,
    /// Running while a write is pending; reset by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> StallGuard<T> {
    pub fn new(inner: T, limit: Option<Duration>) -> Self {
        StallGuard {
            inner,
            limit,
            stalled: None,
        }
    }

    /// After the inner write returned `Pending`: `Pending` too, or a
    /// `TimedOut` error once the stall has lasted `limit`.
    fn stall<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let Some(limit) = self.limit else {
            return Poll::Pending;
        };
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(sleep.as_mut().poll(cx));
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "the client read nothing for {} ms (limits.write_stall_timeout_ms)",
                limit.as_millis()
            ),
        )))
    }

    fn progressed<R>(
        &mut self,
        p: Poll<io::Result<R>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        match p {
            Poll::Pending => self.stall(cx),
            done => {
                self.stalled = None;
                done
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallGuard<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallGuard<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let p = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progressed(p, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let p = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progressed(p, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let p = Pin::new(&mut self.inner).poll_flush(cx);
        self.progressed(p, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let p = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progressed(p, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test(start_paused = true)]
    async fn a_write_that_makes_no_progress_fails_after_the_limit() {
        // A 64-byte pipe nobody reads: the second write stalls.
        let (a, _b) = tokio::io::duplex(64);
        let mut g = StallGuard::new(a, Some(Duration::from_secs(2)));
        g.write_all(&[0; 64]).await.unwrap();
        let started = tokio::time::Instant::now();
        let e = g.write_all(&[0; 64]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("write_stall_timeout_ms"), "{e}");
        assert_eq!(started.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_reader_that_keeps_reading_is_not_cut_off() {
        let (a, mut b) = tokio::io::duplex(16);
        let mut g = StallGuard::new(a, Some(Duration::from_secs(2)));
        let reader = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut got = 0;
            let mut buf = [0; 16];
            while got < 160 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                got += b.read(&mut buf).await.unwrap();
            }
        });
        // 160 bytes through a 16-byte pipe read every second: ten stalls of
        // a second each, none as long as the limit.
        g.write_all(&[0; 160]).await.unwrap();
        reader.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn no_limit_waits_for_ever() {
        let (a, _b) = tokio::io::duplex(8);
        let mut g = StallGuard::new(a, None);
        g.write_all(&[0; 8]).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(3600), g.write_all(&[0; 8])).await;
        assert!(r.is_err(), "still pending after an hour");
    }
}
