//! The batch aggregate: the lifecycle of one OpenAI batch, from acceptance to
//! its output files. Progress inside a running batch is not here: shard
//! checkpoints change many times a second and are state in the shard table,
//! fenced by epoch. What an auditor needs (who submitted, who cancelled, how
//! it ended and with which files) is here, as events.

use stoker_schemas::events::{
    BatchCancelRequested, BatchCreated, BatchEnded, BatchEvent, BatchFailed, BatchFinalizing,
    BatchOutcome, BatchStarted,
};
use stoker_schemas::ids::{BatchId, FileId};

use super::{Aggregate, DomainError, Meta};

/// The lifecycle states; OpenAI's statuses are derived from them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BatchPhase {
    /// No events yet.
    #[default]
    Absent,
    Validating,
    InProgress,
    /// Assembling the output files; `cancel_requested` tells which way it ends.
    Finalizing,
    Ended(BatchOutcome),
    Failed,
}

#[derive(Clone, Debug, PartialEq)]
pub enum BatchCommand {
    Create(BatchCreated),
    /// The shards exist.
    Start {
        shards: u64,
    },
    Cancel,
    /// Every row ended, or the batch was cancelled or expired.
    Finalize,
    End {
        outcome: BatchOutcome,
        output_file_id: Option<FileId>,
        error_file_id: Option<FileId>,
        completed: u64,
        failed: u64,
    },
    Fail {
        code: String,
        message: String,
    },
}

/// The state of one batch stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Batch {
    /// `None` until `BatchCreated`.
    pub id: Option<BatchId>,
    pub phase: BatchPhase,
    pub cancel_requested: bool,
}

impl Batch {
    /// The OpenAI status this state shows.
    pub fn status(&self) -> &'static str {
        match (self.phase, self.cancel_requested) {
            (BatchPhase::Absent, _) => "absent",
            (BatchPhase::Validating, false) => "validating",
            (BatchPhase::InProgress, false) => "in_progress",
            (BatchPhase::Validating | BatchPhase::InProgress | BatchPhase::Finalizing, true) => {
                "cancelling"
            }
            (BatchPhase::Finalizing, false) => "finalizing",
            (BatchPhase::Ended(BatchOutcome::Completed), _) => "completed",
            (BatchPhase::Ended(BatchOutcome::Cancelled), _) => "cancelled",
            (BatchPhase::Ended(BatchOutcome::Expired), _) => "expired",
            (BatchPhase::Failed, _) => "failed",
        }
    }

    fn refuse(&self, id: &BatchId, action: &'static str) -> DomainError {
        DomainError::BatchStatus {
            batch_id: id.clone(),
            status: self.status(),
            action,
        }
    }
}

impl Aggregate for Batch {
    type Command = BatchCommand;
    type Event = BatchEvent;

    fn handle(&self, cmd: BatchCommand, _meta: &Meta) -> Result<Vec<BatchEvent>, DomainError> {
        use BatchPhase::*;
        let absent = || DomainError::NotFound {
            kind: "batch",
            id: self.id.as_deref().unwrap_or_default().to_owned(),
        };
        if let BatchCommand::Create(c) = cmd {
            if self.phase != Absent {
                return Err(DomainError::AlreadyExists {
                    kind: "batch",
                    id: c.batch_id.into_string(),
                });
            }
            return Ok(vec![c.into()]);
        }
        // Every phase but `Absent` follows `BatchCreated`, which set the id.
        let Some(id) = self.id.clone() else {
            return Err(absent());
        };
        Ok(match cmd {
            BatchCommand::Create(_) => unreachable!("handled above"),
            BatchCommand::Start { shards } => match self.phase {
                Absent => return Err(absent()),
                Validating => vec![
                    BatchStarted {
                        batch_id: id,
                        shards,
                    }
                    .into(),
                ],
                // Starting twice (a retry after a crash) changes nothing.
                _ => Vec::new(),
            },
            BatchCommand::Cancel => match self.phase {
                Absent => return Err(absent()),
                Validating | InProgress | Finalizing if !self.cancel_requested => {
                    vec![BatchCancelRequested { batch_id: id }.into()]
                }
                Validating | InProgress | Finalizing => Vec::new(),
                Ended(_) | Failed => return Err(self.refuse(&id, "cancelled")),
            },
            BatchCommand::Finalize => match self.phase {
                Absent => return Err(absent()),
                InProgress | Validating => vec![BatchFinalizing { batch_id: id }.into()],
                Finalizing => Vec::new(),
                Ended(_) | Failed => return Err(self.refuse(&id, "finalized")),
            },
            BatchCommand::End {
                outcome,
                output_file_id,
                error_file_id,
                completed,
                failed,
            } => match self.phase {
                Absent => return Err(absent()),
                Finalizing => vec![
                    BatchEnded {
                        batch_id: id,
                        outcome,
                        output_file_id,
                        error_file_id,
                        completed,
                        failed,
                    }
                    .into(),
                ],
                _ => return Err(self.refuse(&id, "ended before finalizing")),
            },
            BatchCommand::Fail { code, message } => match self.phase {
                Absent => return Err(absent()),
                Validating | InProgress => vec![
                    BatchFailed {
                        batch_id: id,
                        code,
                        message,
                    }
                    .into(),
                ],
                _ => return Err(self.refuse(&id, "failed")),
            },
        })
    }

    fn apply(&mut self, ev: &BatchEvent) {
        match ev {
            BatchEvent::BatchCreated(c) => {
                self.id = Some(c.batch_id.clone());
                self.phase = BatchPhase::Validating;
            }
            BatchEvent::BatchStarted(_) => self.phase = BatchPhase::InProgress,
            BatchEvent::BatchCancelRequested(_) => self.cancel_requested = true,
            BatchEvent::BatchFinalizing(_) => self.phase = BatchPhase::Finalizing,
            BatchEvent::BatchEnded(e) => self.phase = BatchPhase::Ended(e.outcome),
            BatchEvent::BatchFailed(_) => self.phase = BatchPhase::Failed,
        }
    }
}
