//! A running generation as the server sees it, whatever runs it: the
//! engine's own handle in process, or the remote backend's stream of an
//! executor's replies. Failures arrive as [`BackendError`], a type the API
//! owns, so what an executor or the transport to it reports never has to
//! pose as an engine error. Dropping a [`Generation`] before it ended cancels
//! it, in either case.

use std::sync::{Arc, Mutex};

use stoker_executor::engine::EngineEvent;
use stoker_executor::{EngineError, RequestHandle};
use stoker_schemas::codes::ErrorCode;
use tokio::sync::mpsc;

use crate::error::{ApiError, RetryAfter};

/// Why a generation was refused or failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// The engine in this process refused or failed it.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The executor that ran it reported it, or the transport to that
    /// executor failed (distributed mode): already named by its catalogue
    /// code.
    #[error("{message}")]
    Remote { code: ErrorCode, message: String },
}

impl BackendError {
    pub fn remote(code: ErrorCode, message: impl Into<String>) -> Self {
        BackendError::Remote {
            code,
            message: message.into(),
        }
    }

    /// The API error a client gets: the engine's refusal mapped as the
    /// engine's, or the executor's by its catalogue code.
    pub fn into_api(self, retry_after: RetryAfter) -> ApiError {
        match self {
            BackendError::Engine(e) => ApiError::from_engine(e, retry_after),
            BackendError::Remote { code, message } => {
                ApiError::from_remote(code, message, retry_after)
            }
        }
    }
}

/// What a generation reports next: an engine event (never
/// `EngineEvent::Error`), or why it failed, which is the last report.
pub type Report = Result<EngineEvent, BackendError>;

/// The executor a remote generation runs on. The transport changes it when
/// it re-routes a job that was refused before it started, so it names the
/// process that generated the tokens once the generation has started.
pub type Runner = Arc<Mutex<String>>;

/// One running generation.
pub struct Generation(Source);

enum Source {
    Local(RequestHandle),
    Remote(RemoteStream),
}

impl std::fmt::Debug for Generation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.0 {
            Source::Local(_) => "local",
            Source::Remote(_) => "remote",
        };
        f.debug_struct("Generation").field("kind", &kind).finish()
    }
}

impl Generation {
    /// A generation the engine in this process runs.
    pub fn local(handle: RequestHandle) -> Self {
        Generation(Source::Local(handle))
    }

    /// A generation another process runs: its reports arrive on `reports`
    /// (fed by the transport), and `cancel` runs when the caller cancels, or
    /// drops the generation before it ended.
    pub fn remote(
        reports: mpsc::UnboundedReceiver<Report>,
        runner: Runner,
        cancel: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        Generation(Source::Remote(RemoteStream {
            reports,
            runner,
            cancel: Box::new(cancel),
            done: false,
        }))
    }

    /// The executor process that runs it, when that is not this process
    /// (whose own id the provenance already names).
    pub fn executor(&self) -> Option<String> {
        match &self.0 {
            Source::Local(_) => None,
            Source::Remote(r) => Some(r.runner.lock().unwrap_or_else(|p| p.into_inner()).clone()),
        }
    }

    /// The next report, or `None` once the generation has ended.
    pub async fn next(&mut self) -> Option<Report> {
        match &mut self.0 {
            Source::Local(h) => h.next().await.map(|ev| match ev {
                EngineEvent::Error(e) => Err(BackendError::Engine(e)),
                ev => Ok(ev),
            }),
            Source::Remote(r) => r.next().await,
        }
    }

    /// Cancels now; the generation then reports `Finished { Cancelled }`.
    pub fn cancel(&self) {
        match &self.0 {
            Source::Local(h) => h.cancel(),
            Source::Remote(r) => (r.cancel)(),
        }
    }
}

struct RemoteStream {
    reports: mpsc::UnboundedReceiver<Report>,
    runner: Runner,
    cancel: Box<dyn Fn() + Send + Sync>,
    done: bool,
}

impl RemoteStream {
    async fn next(&mut self) -> Option<Report> {
        if self.done {
            return None;
        }
        let r = self.reports.recv().await;
        let last = match &r {
            None | Some(Err(_)) => true,
            Some(Ok(ev)) => matches!(ev, EngineEvent::Finished { .. } | EngineEvent::Error(_)),
        };
        self.done |= last;
        match r {
            // The transport converts an executor's error into `Err`; an
            // engine error event would only come from a bug, and is kept typed.
            Some(Ok(EngineEvent::Error(e))) => Some(Err(BackendError::Engine(e))),
            r => r,
        }
    }
}

impl Drop for RemoteStream {
    fn drop(&mut self) {
        if !self.done {
            (self.cancel)();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn counted() -> (Arc<AtomicUsize>, impl Fn() + Send + Sync + 'static) {
        let n = Arc::new(AtomicUsize::new(0));
        let c = n.clone();
        (n, move || {
            c.fetch_add(1, Ordering::SeqCst);
        })
    }

    #[tokio::test]
    async fn a_remote_failure_is_the_last_report_and_nothing_is_cancelled() {
        let (tx, rx) = mpsc::unbounded_channel();
        let (cancels, cancel) = counted();
        let runner = Runner::new(Mutex::new("ex-a".into()));
        let mut g = Generation::remote(rx, runner.clone(), cancel);
        assert_eq!(g.executor().as_deref(), Some("ex-a"));
        // The transport re-routed it before it started.
        *runner.lock().unwrap() = "ex-b".into();
        assert_eq!(g.executor().as_deref(), Some("ex-b"));
        tx.send(Ok(EngineEvent::Delta {
            text: "a".into(),
            token_ids: vec![1],
            logprobs: Vec::new(),
        }))
        .unwrap();
        tx.send(Err(BackendError::remote(ErrorCode::ExecutorLost, "gone")))
            .unwrap();
        tx.send(Ok(EngineEvent::Delta {
            text: "late".into(),
            token_ids: vec![2],
            logprobs: Vec::new(),
        }))
        .unwrap();
        assert!(matches!(
            g.next().await,
            Some(Ok(EngineEvent::Delta { .. }))
        ));
        assert_eq!(
            g.next().await,
            Some(Err(BackendError::remote(ErrorCode::ExecutorLost, "gone")))
        );
        assert_eq!(g.next().await, None, "nothing after the failure");
        drop(g);
        assert_eq!(cancels.load(Ordering::SeqCst), 0, "it had ended");
    }

    #[tokio::test]
    async fn dropping_an_unfinished_remote_generation_cancels_it_once() {
        let (_tx, rx) = mpsc::unbounded_channel::<Report>();
        let (cancels, cancel) = counted();
        drop(Generation::remote(rx, Runner::default(), cancel));
        assert_eq!(cancels.load(Ordering::SeqCst), 1);
    }
}
