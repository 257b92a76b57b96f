//! The messages API instances and executors exchange over Kafka in the
//! distributed mode (DESIGN section 8). Each body is JSON with a version
//! field `v`; a reader refuses a version it does not know instead of guessing
//! at it, and ignores fields it does not know, so a newer writer can add
//! optional fields without a version bump.
//!
//! | topic | body |
//! |---|---|
//! | `stoker.interactive` | [`JobMessage`] |
//! | `stoker.replies` | [`ReplyMessage`] |
//! | `stoker.control` | [`ControlMessage`] |
//! | `stoker.capacity` | [`CapacityReport`] |
//!
//! Ids are typed (`ExecutorId`, `RequestId`, ...): a body whose id breaks its
//! kind's rule does not decode, so no process acts on it. On the wire they
//! are the plain strings they always were: the JSON Schemas are unchanged
//! and older messages decode (`tests` below).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::codes::ErrorCode;
use crate::ids::{DeploymentId, ExecutorId, RequestId, RevisionId};

/// The version of every body below.
/// 2: one writer per partition (`slot` in [`CapacityReport`]; jobs and
/// replies on the partition of their executor and API slot pair).
pub const TRANSPORT_VERSION: u32 = 2;

/// Sampling as the engine takes it, after the API validated it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WireSampling {
    pub temperature: f32,
    pub top_p: f32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    pub max_tokens: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop_token_ids: Vec<u32>,
    pub stop_at_eos: bool,
    /// Log probabilities of each sampled token and of this many (0-20)
    /// alternatives; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<u32>,
    /// Score the prompt with this many alternatives per token (`echo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<u32>,
    /// Absent: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    /// Absent: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    /// Absent: 1 (off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f32>,
    /// `[id, bias]` pairs sorted by id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logit_bias: Vec<(u32, f32)>,
    /// Absent: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<u32>,
    /// Absent: false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_stop_str_in_output: Option<bool>,
    /// A format the output must follow. Absent: free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<WireResponseFormat>,
}

/// A response format, compiled by the executor for its vocabulary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireResponseFormat {
    JsonObject,
    JsonSchema { schema: serde_json::Value },
}

/// A sampled token's log probability and the most likely alternatives at
/// its position, as `[id, logprob]` pairs, most likely first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WireLogprob {
    pub id: u32,
    pub logprob: f32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top: Vec<(u32, f32)>,
}

/// One interactive generation, sent to the partition of the executor the API
/// chose. The executor validates it again against its own limits and answers
/// a typed refusal when the API's view of its capacity was stale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobMessage {
    pub v: u32,
    /// Unique per generation; replies and cancels name it.
    pub request_id: RequestId,
    /// The executor the API chose; a message that reaches another one (a
    /// partition changed hands) is refused, never run by the wrong process.
    pub executor_id: ExecutorId,
    /// The artifact the API validated against.
    pub model_sha256: String,
    /// Where the replies go: the `stoker.replies` partition of this
    /// (API instance, executor) pair, which only this executor writes
    /// (pairwise layout), or the API instance's one reply partition, which
    /// every executor writes (shared layout).
    pub reply_partition: i32,
    pub prompt: Vec<u32>,
    pub sampling: WireSampling,
    /// `interactive` or `batch`.
    pub lane: String,
    pub tenant: String,
    /// The tenant's fair-share weight in the executor's scheduler (absent
    /// from older senders: 1).
    #[serde(default = "one")]
    pub tenant_weight: u32,
    /// Milliseconds since the epoch when the API sent it: a job older than
    /// the API's patience is refused instead of run for nobody.
    pub sent_unix_ms: u64,
}

fn one() -> u32 {
    1
}

/// What happened to a job, in order per request (`seq` counts from 0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReplyMessage {
    pub v: u32,
    pub request_id: RequestId,
    pub executor_id: ExecutorId,
    pub seq: u64,
    pub event: ReplyEvent,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ReplyEvent {
    /// The engine scheduled the request after `queue_ms` in its queue.
    Started { queue_ms: f64 },
    /// The prompt's scores, one per prompt token after the first, when the
    /// job asked for them; before any `delta`.
    PromptLogprobs { logprobs: Vec<WireLogprob> },
    Delta {
        text: String,
        token_ids: Vec<u32>,
        /// One per token id when the job asked for log probabilities.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        logprobs: Vec<WireLogprob>,
    },
    Finished {
        /// `stop`, `length` or `cancelled`.
        reason: String,
        prompt_tokens: u32,
        completion_tokens: u32,
        cached_prompt_tokens: u32,
        queue_ms: f64,
        prefill_ms: f64,
        ttft_ms: f64,
        decode_ms: f64,
        total_ms: f64,
        preemptions: u32,
    },
    /// The request ended with the error of this catalogue code.
    // A code this build does not know reads as `ErrorCode::Unknown`, so the
    // reply still ends the request.
    Error { code: ErrorCode, message: String },
}

/// Sent to every executor; each acts on what names it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ControlMessage {
    pub v: u32,
    pub executor_id: ExecutorId,
    pub command: ControlCommand,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlCommand {
    /// The client went away: stop the generation and free its KV blocks.
    Cancel { request_id: RequestId },
}

/// An executor's live capacity, published every 500 ms (keyed by executor id
/// on a compacted topic). An executor whose reports stop is treated as lost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CapacityReport {
    pub v: u32,
    pub executor_id: ExecutorId,
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
    pub model_sha256: String,
    /// The executor slot its lease holds: it reads the `stoker.interactive`
    /// partitions of that slot and writes this topic's partition `slot`.
    pub slot: i32,
    /// Takes new work (loaded, warmed up, not draining).
    pub ready: bool,
    pub draining: bool,
    pub running: u32,
    pub waiting: u32,
    /// Prompt + max tokens of every waiting request.
    pub waiting_tokens: u64,
    pub kv_blocks_total: u64,
    pub kv_blocks_free: u64,
    pub block_size: u32,
    pub max_num_seqs: u32,
    pub tokens_per_second: f64,
    pub prefill_tokens_per_second: f64,
    pub decode_tokens_per_second: f64,
    /// Counts up per report from the same process start.
    pub seq: u64,
    pub sent_unix_ms: u64,
    /// The requests counted in `running` and `waiting` that came in jobs,
    /// by the reply partition they answer on: one entry per partition with
    /// any, so the list grows with this executor's load, not with the API
    /// instances. An API instance takes its own out of the report and adds
    /// what it has in flight here now, so a request it sent is counted once
    /// whether the report predates it, shows it, or outlived it. Absent from
    /// older executors (the API then counts its sends since the report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_reply_partition: Option<Vec<PartitionLoad>>,
    /// Prompt tokens of the requests running and waiting not computed yet
    /// (a cached prefix deducted once admitted): the prefill a new request
    /// queues behind. Absent from older executors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_backlog_tokens: Option<u64>,
}

/// Requests an executor holds for one reply partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PartitionLoad {
    pub partition: i32,
    pub requests: u32,
}

impl CapacityReport {
    /// The requests this report counts for `reply_partition`: `None` when
    /// the executor does not say, 0 when it holds none.
    pub fn held_for(&self, reply_partition: i32) -> Option<u32> {
        self.by_reply_partition.as_ref().map(|v| {
            v.iter()
                .filter(|p| p.partition == reply_partition)
                .map(|p| p.requests)
                .sum()
        })
    }
}

/// Why a body was refused.
#[derive(Debug)]
pub enum DecodeError {
    Json(serde_json::Error),
    Version(u32),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Json(e) => write!(f, "malformed message: {e}"),
            DecodeError::Version(v) => write!(
                f,
                "message version {v} is not supported (this build reads {TRANSPORT_VERSION})"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A body with a version field.
pub trait Versioned: Serialize + for<'de> Deserialize<'de> {
    fn version(&self) -> u32;

    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("transport messages serialize")
    }

    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let m: Self = serde_json::from_slice(bytes).map_err(DecodeError::Json)?;
        match m.version() {
            TRANSPORT_VERSION => Ok(m),
            v => Err(DecodeError::Version(v)),
        }
    }
}

macro_rules! versioned {
    ($($t:ty),*) => {$(
        impl Versioned for $t {
            fn version(&self) -> u32 {
                self.v
            }
        }
    )*};
}

versioned!(JobMessage, ReplyMessage, ControlMessage, CapacityReport);

/// The JSON Schema of each body, as checked in under `schemas/transport/`.
pub fn json_schemas() -> Vec<(&'static str, String)> {
    fn render<T: JsonSchema>() -> String {
        let schema = schemars::schema_for!(T);
        let mut text = serde_json::to_string_pretty(&schema).expect("a JSON Schema is plain JSON");
        text.push('\n');
        text
    }
    vec![
        ("job.schema.json", render::<JobMessage>()),
        ("reply.schema.json", render::<ReplyMessage>()),
        ("control.schema.json", render::<ControlMessage>()),
        ("capacity_report.schema.json", render::<CapacityReport>()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bodies as a sender from before the ids were typed wrote them (ids as
    /// plain strings, the fields of version 2): they still decode, to the
    /// same ids, and encode back to the same JSON.
    #[test]
    fn messages_with_string_ids_from_older_senders_still_decode() {
        let job = r#"{"v":2,"request_id":"api-h-1-18c2f-7","executor_id":"executor-h-42",
            "model_sha256":"ab12","reply_partition":3,"prompt":[1,2,3],
            "sampling":{"temperature":0.0,"top_p":1.0,"max_tokens":8,"stop_at_eos":true},
            "lane":"interactive","tenant":"default","sent_unix_ms":1}"#;
        let m = JobMessage::decode(job.as_bytes()).unwrap();
        assert_eq!(m.request_id, "api-h-1-18c2f-7");
        assert_eq!(m.executor_id, "executor-h-42");
        assert_eq!(m.tenant_weight, 1);
        let again: serde_json::Value = serde_json::from_slice(&m.encode()).unwrap();
        assert_eq!(again["request_id"], "api-h-1-18c2f-7");
        assert_eq!(again["executor_id"], "executor-h-42");

        let reply = r#"{"v":2,"request_id":"r-1","executor_id":"e.1","seq":0,
            "event":{"type":"started","queue_ms":1.5}}"#;
        let r = ReplyMessage::decode(reply.as_bytes()).unwrap();
        assert_eq!(
            (r.request_id.as_str(), r.executor_id.as_str()),
            ("r-1", "e.1")
        );

        let control =
            r#"{"v":2,"executor_id":"e_1","command":{"type":"cancel","request_id":"r-1"}}"#;
        let c = ControlMessage::decode(control.as_bytes()).unwrap();
        assert_eq!(
            c.command,
            ControlCommand::Cancel {
                request_id: "r-1".parse().unwrap()
            }
        );

        let report = r#"{"v":2,"executor_id":"e1","deployment_id":"default","revision_id":"4f2a9c",
            "model_sha256":"ab","slot":0,"ready":true,"draining":false,"running":0,"waiting":0,
            "waiting_tokens":0,"kv_blocks_total":10,"kv_blocks_free":10,"block_size":16,
            "max_num_seqs":8,"tokens_per_second":0.0,"prefill_tokens_per_second":0.0,
            "decode_tokens_per_second":0.0,"seq":1,"sent_unix_ms":0}"#;
        let c = CapacityReport::decode(report.as_bytes()).unwrap();
        assert_eq!(
            (c.deployment_id.as_str(), c.revision_id.as_str()),
            ("default", "4f2a9c")
        );
    }

    /// An id that breaks its kind's rule fails the whole body, naming the
    /// rule: no process acts on a job addressed to an id nobody can hold.
    #[test]
    fn a_body_with_an_invalid_id_does_not_decode() {
        for (body, want) in [
            (
                r#"{"v":2,"executor_id":"e 1","command":{"type":"cancel","request_id":"r"}}"#,
                "invalid executor id",
            ),
            (
                r#"{"v":2,"executor_id":"e","command":{"type":"cancel","request_id":""}}"#,
                "invalid request id",
            ),
        ] {
            let e = ControlMessage::decode(body.as_bytes()).unwrap_err();
            assert!(e.to_string().contains(want), "{e}");
        }
        let long = "x".repeat(129);
        let body = format!(
            r#"{{"v":2,"request_id":"{long}","executor_id":"e","seq":0,"event":{{"type":"started","queue_ms":0}}}}"#
        );
        assert!(ReplyMessage::decode(body.as_bytes()).is_err());
    }
}
