//! Finalization: the committed segments of every shard, in row order, become
//! the output file (rows answered 200) and the error file (rows refused when
//! run, and rows that never ran because the batch was cancelled or expired).
//! Every row of the input lands in exactly one of the two.
//!
//! File ids are derived from the batch id, so a finalization interrupted by a
//! crash runs again and overwrites the same objects and records.

use std::collections::HashSet;

use serde_json::Value;
use stoker_schemas::batch::{BatchLineError, BatchOutputLine};
use stoker_schemas::codes::ErrorCode;
use stoker_schemas::events::BatchOutcome;
use stoker_schemas::ids::{BatchId, FileId, RequestId};

use super::files::{self, FileRecord};
use super::runner::is_success;
use super::shards;
use super::storage::Storage;
use super::{BatchError, input, now_ms};
use crate::store::Db;

/// What finalization wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finalized {
    pub output_file_id: Option<FileId>,
    pub error_file_id: Option<FileId>,
    pub completed: u64,
    pub failed: u64,
}

/// The ids of a batch's result files.
pub fn result_file_ids(batch_id: &BatchId) -> (FileId, FileId) {
    (
        FileId::batch_output(batch_id),
        FileId::batch_errors(batch_id),
    )
}

fn unrun_line(custom_id: &str, outcome: BatchOutcome) -> Value {
    let (code, message) = match outcome {
        BatchOutcome::Cancelled => (
            ErrorCode::BatchCancelled,
            "the batch was cancelled before this request ran",
        ),
        _ => (
            ErrorCode::BatchExpired,
            "the batch expired before this request ran",
        ),
    };
    let line = BatchOutputLine {
        id: RequestId::generate_batch_row(),
        custom_id: custom_id.to_owned(),
        response: None,
        error: Some(BatchLineError {
            code: code.as_str().to_owned(),
            message: message.to_owned(),
        }),
    };
    serde_json::to_value(line).expect("output lines serialize")
}

/// Assembles and writes the result files of `batch_id`.
pub async fn finalize(
    db: &Db,
    storage: &Storage,
    batch_id: &BatchId,
    tenant: &str,
    input_bytes: &[u8],
    outcome: BatchOutcome,
) -> Result<Finalized, BatchError> {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let (mut n_out, mut n_err) = (0u64, 0u64);
    let mut seen = HashSet::new();
    let mut push = |line: &Value, seen: &mut HashSet<String>| {
        let id = line
            .get("custom_id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if !seen.insert(id.clone()) {
            // Cannot happen by construction (segments cover disjoint rows);
            // if it ever does, the first answer stands.
            tracing::error!(%batch_id, custom_id = %id, "a row appears twice in the segments; keeping the first");
            return;
        }
        let (buf, n) = if is_success(line) {
            (&mut out, &mut n_out)
        } else {
            (&mut err, &mut n_err)
        };
        serde_json::to_writer(&mut *buf, line).expect("JSON values serialize");
        buf.push(b'\n');
        *n += 1;
    };
    for shard in shards::list(db, batch_id).await? {
        for seg in &shard.segments {
            let bytes = storage.get(&seg.key).await?;
            for (_, l) in input::lines(&bytes) {
                let v: Value = serde_json::from_slice(l)
                    .map_err(|e| BatchError::Corrupt(format!("segment {}: {e}", seg.key)))?;
                push(&v, &mut seen);
            }
        }
        if shard.next_row < shard.end_row {
            let rows = input::rows(input_bytes, shard.next_row as usize, shard.end_row as usize)
                .map_err(BatchError::Corrupt)?;
            for r in rows {
                push(&unrun_line(&r.custom_id, outcome), &mut seen);
            }
        }
    }
    let (out_id, err_id) = result_file_ids(batch_id);
    let output_file_id =
        write(db, storage, &out_id, batch_id, tenant, "output", out, n_out).await?;
    let error_file_id = write(db, storage, &err_id, batch_id, tenant, "errors", err, n_err).await?;
    Ok(Finalized {
        output_file_id,
        error_file_id,
        completed: n_out,
        failed: n_err,
    })
}

#[allow(clippy::too_many_arguments)]
async fn write(
    db: &Db,
    storage: &Storage,
    file_id: &FileId,
    batch_id: &BatchId,
    tenant: &str,
    kind: &str,
    bytes: Vec<u8>,
    lines: u64,
) -> Result<Option<FileId>, BatchError> {
    if lines == 0 {
        return Ok(None);
    }
    let key = format!("batches/{batch_id}/{kind}.jsonl");
    let len = bytes.len() as u64;
    storage.put(&key, bytes).await?;
    files::put(
        db,
        &FileRecord {
            id: file_id.clone(),
            tenant: tenant.to_owned(),
            filename: format!("{batch_id}_{kind}.jsonl"),
            purpose: "batch_output".into(),
            bytes: len,
            lines,
            object_key: key,
            endpoint: None,
            estimated_tokens: 0,
            created_at: now_ms(),
        },
    )
    .await?;
    Ok(Some(file_id.clone()))
}
