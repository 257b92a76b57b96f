//! Grammar masks computed ahead, on a thread of their own.
//!
//! A sequence's next mask depends only on the tokens it has sampled, so it
//! can be computed as soon as its last token is consumed: the mask thread
//! starts on it while the engine thread is still sampling the step's other
//! rows (when the compute pool is idle) and carries on beside the next
//! forward pass. The engine waits for a mask only when it samples that
//! sequence's next row, which is almost always long after the mask is done.
//!
//! The mask thread is not one of the compute pool's workers: a wait on it
//! from the engine thread can never hold up the pool that computes it.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::ids::SeqId;
use crate::structured::{Constraint, Mask};

type MaskResult = Result<Mask, String>;

/// One mask to compute: the grammar it comes from, and where it goes.
struct Job {
    constraint: Arc<Mutex<Constraint>>,
    reply: SyncSender<MaskResult>,
}

/// A constrained sequence: its grammar and its next mask, being computed.
struct Tracked {
    constraint: Arc<Mutex<Constraint>>,
    next: Option<Receiver<MaskResult>>,
}

/// The grammars of the engine's constrained sequences, and the thread that
/// computes their masks ahead.
#[derive(Default)]
pub(super) struct MaskAhead {
    seqs: HashMap<SeqId, Tracked>,
    /// Started with the first constrained sequence.
    worker: Option<(Sender<Job>, JoinHandle<()>)>,
}

impl MaskAhead {
    /// Tracks `seq`'s grammar and starts on its first mask.
    pub(super) fn insert(&mut self, seq: SeqId, constraint: Constraint) {
        let constraint = Arc::new(Mutex::new(constraint));
        let next = Some(self.request(&constraint));
        self.seqs.insert(seq, Tracked { constraint, next });
    }

    /// The mask for `seq`'s next sample, waiting for it if it is still
    /// being computed; `None` for a sequence without a grammar.
    pub(super) fn take(&mut self, seq: SeqId) -> Option<MaskResult> {
        let t = self.seqs.get_mut(&seq)?;
        let result = match t.next.take() {
            Some(rx) => rx
                .recv()
                .unwrap_or_else(|_| Err("the grammar mask thread stopped".into())),
            // Not requested (never the case after `insert` and `consume`):
            // computed here.
            None => lock(&t.constraint).and_then(|mut c| c.mask()),
        };
        Some(result)
    }

    /// Advances `seq`'s grammar past `token` and starts on its next mask.
    /// `Ok(true)` when the grammar is complete; `None` without a grammar.
    pub(super) fn consume(&mut self, seq: SeqId, token: u32) -> Option<Result<bool, String>> {
        let constraint = Arc::clone(&self.seqs.get(&seq)?.constraint);
        let done = lock(&constraint).and_then(|mut c| {
            c.consume(token)?;
            Ok(c.is_finished())
        });
        if let Ok(false) = done {
            let next = self.request(&constraint);
            if let Some(t) = self.seqs.get_mut(&seq) {
                t.next = Some(next);
            }
        }
        Some(done)
    }

    /// Forgets `seq`; a mask still being computed for it is dropped.
    pub(super) fn remove(&mut self, seq: SeqId) {
        self.seqs.remove(&seq);
    }

    /// Queues a mask of `constraint` on the mask thread.
    fn request(&mut self, constraint: &Arc<Mutex<Constraint>>) -> Receiver<MaskResult> {
        let (reply, rx) = mpsc::sync_channel(1);
        let job = Job {
            constraint: Arc::clone(constraint),
            reply,
        };
        let sent = match &self.worker {
            Some((jobs, _)) => jobs.send(job).map_err(|e| e.0),
            None => Err(job),
        };
        if let Err(job) = sent {
            // First use, or the thread could not be started before: start
            // it, or failing that compute the mask here.
            match spawn() {
                Ok((jobs, handle)) => {
                    let _ = jobs.send(job);
                    self.worker = Some((jobs, handle));
                }
                Err(_) => run(job),
            }
        }
        rx
    }
}

impl Drop for MaskAhead {
    fn drop(&mut self) {
        if let Some((jobs, handle)) = self.worker.take() {
            drop(jobs);
            let _ = handle.join();
        }
    }
}

fn spawn() -> std::io::Result<(Sender<Job>, JoinHandle<()>)> {
    let (jobs, rx) = mpsc::channel::<Job>();
    let handle = std::thread::Builder::new()
        .name("stoker-masks".into())
        .spawn(move || {
            for job in rx {
                run(job);
            }
        })?;
    Ok((jobs, handle))
}

/// Computes one mask. A panic inside the grammar engine fails that mask,
/// not the thread.
fn run(job: Job) {
    let mask = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        lock(&job.constraint).and_then(|mut c| c.mask())
    }))
    .unwrap_or_else(|_| Err("the grammar engine panicked computing a mask".into()));
    // The sequence may have ended meanwhile; its mask is then unwanted.
    let _ = job.reply.send(mask);
}

fn lock(c: &Mutex<Constraint>) -> Result<std::sync::MutexGuard<'_, Constraint>, String> {
    c.lock()
        .map_err(|_| "a grammar was left inconsistent by a panic".to_string())
}
