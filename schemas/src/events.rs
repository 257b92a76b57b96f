//! The payloads of control-plane events: what the event store holds, what the
//! audit API shows, and what projections and the rollout controller read.
//!
//! Each event is a payload struct; each enum is the closed set of events of
//! one stream type, one newtype variant per struct and named like it. They are
//! adjacently tagged (`{"type": "RolloutStarted", "payload": {...}}`) so the
//! variant name is the store's `event_type` column and the inner object is its
//! `payload` column; [`EventPayload::to_parts`] and [`EventPayload::from_parts`]
//! convert between the two. Payloads stay readable when fields are added: unknown
//! fields are ignored and every later addition is an `Option` or has a serde
//! default. A change that cannot be expressed that way bumps [`EVENT_VERSION`]
//! and registers an upcaster in the store. Ids are the newtypes of
//! [`crate::ids`]: plain strings on the wire, validated when an event is
//! built and again when it is read back. The JSON
//! Schemas under `schemas/events/` are generated from these types and checked
//! against them by a test.

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ids::{
    BatchId, DeploymentId, ExecutorId, FileId, KeyId, RevisionId, RolloutId, TenantId,
};

/// The payload schema version written with every event of this build.
pub const EVENT_VERSION: i32 = 1;

/// One stream type's closed set of events, convertible to and from the store's
/// `(event_type, payload)` columns.
pub trait EventPayload: Serialize + DeserializeOwned {
    /// The store's `stream_type` for streams holding these events.
    const STREAM_TYPE: &'static str;
    /// Every event type of the stream, in declaration order.
    const EVENT_TYPES: &'static [&'static str];

    /// The event type: the variant name, past tense.
    fn event_type(&self) -> &'static str;

    /// The store columns `(event_type, payload)` of this event.
    fn to_parts(&self) -> (&'static str, Value) {
        let mut tagged = serde_json::to_value(self)
            .expect("event payloads are plain structs of strings and numbers");
        let payload = tagged
            .get_mut("payload")
            .map(Value::take)
            .unwrap_or(Value::Null);
        (self.event_type(), payload)
    }

    /// Rebuilds an event from the store columns; an unknown `event_type` or a
    /// payload missing a required field is an error.
    fn from_parts(event_type: &str, payload: Value) -> Result<Self, serde_json::Error> {
        serde_json::from_value(serde_json::json!({ "type": event_type, "payload": payload }))
    }
}

/// How the executor's scheduler orders waiting requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SchedulerPolicy {
    /// Interactive requests go first; batch requests use what is left.
    #[default]
    InteractiveFirst,
    /// First come, first served.
    Fcfs,
}

/// The request and queue limits of one deployment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeploymentLimits {
    /// Tokens of prompt plus output one sequence may hold.
    pub context_window: u32,
    /// The most prompt tokens one request may send; at most `context_window`.
    pub max_input_tokens: u32,
    /// The most tokens one request may generate; at most `context_window`.
    pub max_output_tokens: u32,
    /// Requests that may wait for admission before new ones are refused.
    pub max_waiting_requests: u32,
    /// Prompt tokens that may wait for admission before new requests are refused.
    pub max_waiting_tokens: u64,
    /// The share of capacity, in `[0, 1)`, held back for interactive requests.
    pub interactive_reserve_share: f64,
    #[serde(default)]
    pub scheduler_policy: SchedulerPolicy,
}

fn default_min_requests() -> u32 {
    SloGates::DEFAULT_MIN_REQUESTS
}

/// The service-level gates a rollout step must pass before it advances; a gate
/// left `None` is not checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SloGates {
    /// The highest acceptable p99 time to first token of the new revision.
    #[serde(default)]
    pub ttft_p99_ms: Option<f64>,
    /// The highest acceptable share, in `[0, 1]`, of failed requests.
    #[serde(default)]
    pub max_error_rate: Option<f64>,
    /// The highest acceptable share, in `[0, 1]`, of requests refused as overloaded.
    #[serde(default)]
    pub max_overload_rate: Option<f64>,
    /// Requests a step must see before the controller judges it.
    #[serde(default = "default_min_requests")]
    pub min_requests: u32,
}

impl SloGates {
    pub const DEFAULT_MIN_REQUESTS: u32 = 20;
}

impl Default for SloGates {
    fn default() -> Self {
        Self {
            ttft_p99_ms: None,
            max_error_rate: None,
            max_overload_rate: None,
            min_requests: Self::DEFAULT_MIN_REQUESTS,
        }
    }
}

/// What the controller measured on the new revision during one step; recorded
/// with the decision it led to so the audit trail shows why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateFigures {
    pub requests: u64,
    #[serde(default)]
    pub ttft_p99_ms: Option<f64>,
    pub error_rate: f64,
    pub overload_rate: f64,
}

/// Declares one stream type's event enum over its payload structs: an
/// adjacently tagged newtype variant per struct, named like it, plus the
/// [`EventPayload`] impl and a `From` per payload.
macro_rules! event_enum {
    (
        $(#[$doc:meta])*
        $name:ident, stream_type = $stream:literal, [$($variant:ident),+ $(,)?]
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(tag = "type", content = "payload")]
        pub enum $name {
            $($variant($variant),)+
        }

        impl EventPayload for $name {
            const STREAM_TYPE: &'static str = $stream;
            const EVENT_TYPES: &'static [&'static str] = &[$(stringify!($variant)),+];

            fn event_type(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => stringify!($variant),)+
                }
            }
        }

        $(
            impl From<$variant> for $name {
                fn from(payload: $variant) -> Self {
                    Self::$variant(payload)
                }
            }
        )+
    };
}

// ---- deployment ----

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeploymentCreated {
    pub deployment_id: DeploymentId,
    pub limits: DeploymentLimits,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeploymentLimitsChanged {
    pub deployment_id: DeploymentId,
    pub limits: DeploymentLimits,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeploymentRetired {
    pub deployment_id: DeploymentId,
}

/// The revision that takes all traffic when no rollout is active.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServingRevisionSet {
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
}

/// A rollout from the serving revision to `to_revision`; traffic to
/// `to_revision` starts at `steps[0]` percent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutStarted {
    pub deployment_id: DeploymentId,
    pub rollout_id: RolloutId,
    pub from_revision: RevisionId,
    pub to_revision: RevisionId,
    /// Percent of traffic to `to_revision` at each step, ending at 100.
    pub steps: Vec<u8>,
    pub gates: SloGates,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutAdvanced {
    pub deployment_id: DeploymentId,
    pub rollout_id: RolloutId,
    /// Index into the rollout's `steps`.
    pub step: u32,
    /// Percent of traffic now sent to `to_revision` (`steps[step]`).
    pub percent: u8,
    #[serde(default)]
    pub figures: Option<GateFigures>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutPaused {
    pub deployment_id: DeploymentId,
    pub rollout_id: RolloutId,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutResumed {
    pub deployment_id: DeploymentId,
    pub rollout_id: RolloutId,
}

/// Traffic returns entirely to the rollout's `from_revision`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutRolledBack {
    pub deployment_id: DeploymentId,
    pub rollout_id: RolloutId,
    #[serde(default)]
    pub figures: Option<GateFigures>,
}

/// `revision_id` (the rollout's `to_revision`) becomes the serving revision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutCompleted {
    pub deployment_id: DeploymentId,
    pub rollout_id: RolloutId,
    pub revision_id: RevisionId,
}

event_enum! {
    /// Events of a `deployment` stream (stream id = deployment id). Rollouts
    /// live here rather than in streams of their own: one stream is the
    /// consistency boundary that keeps "one active rollout per deployment" true
    /// under concurrent writers.
    DeploymentEvent, stream_type = "deployment", [
        DeploymentCreated,
        DeploymentLimitsChanged,
        DeploymentRetired,
        ServingRevisionSet,
        RolloutStarted,
        RolloutAdvanced,
        RolloutPaused,
        RolloutResumed,
        RolloutRolledBack,
        RolloutCompleted,
    ]
}

// ---- revision ----

/// The artifact was read and its sha256 matched `model_sha256`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RevisionRegistered {
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
    pub model_uri: String,
    /// Lowercase hex.
    pub model_sha256: String,
    pub tokenizer_hash: String,
    pub chat_template_hash: String,
    /// Where the chat template came from: the model file's own, or the file
    /// an operator gave with `--chat-template` (`chat_template` in the
    /// config). Absent in events recorded before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template_origin: Option<String>,
    pub precision: String,
    pub runtime_version: String,
}

event_enum! {
    /// Events of a `revision` stream (stream id = `{deployment_id}/{revision_id}`).
    RevisionEvent, stream_type = "revision", [RevisionRegistered]
}

// ---- capacity_profile ----

/// The measured operating envelope of one revision under one workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CapacityEnvelope {
    /// Concurrent sequences the envelope was measured at.
    pub concurrency: u32,
    /// Tokens held in KV memory across those sequences.
    pub active_tokens: u64,
    pub ttft_p95_ms: f64,
    pub tpot_p95_ms: f64,
    /// Output tokens per second across all sequences.
    pub throughput_tok_s: f64,
    #[serde(default)]
    pub prefill_tok_s: Option<f64>,
    #[serde(default)]
    pub decode_tok_s: Option<f64>,
    /// The 95th percentile of prompt tokens in the measured workload; traffic
    /// far past it is counted as out of envelope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_p95: Option<u64>,
    /// The 95th percentile of output tokens in the measured workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_p95: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CapacityProfileRecorded {
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
    pub workload: String,
    pub envelope: CapacityEnvelope,
}

event_enum! {
    /// Events of a `capacity_profile` stream (stream id =
    /// `{deployment_id}/{revision_id}/{workload}`). The latest recording wins;
    /// the earlier ones stay as history.
    CapacityProfileEvent, stream_type = "capacity_profile", [CapacityProfileRecorded]
}

// ---- executor ----

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExecutorRegistered {
    pub executor_id: ExecutorId,
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
}

/// The executor takes no new requests and finishes the ones it holds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExecutorDraining {
    pub executor_id: ExecutorId,
    pub deployment_id: DeploymentId,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExecutorDrained {
    pub executor_id: ExecutorId,
    pub deployment_id: DeploymentId,
}

/// The executor stopped answering; the requests it held are gone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExecutorLost {
    pub executor_id: ExecutorId,
    pub deployment_id: DeploymentId,
}

event_enum! {
    /// Events of an `executor` stream (stream id = executor id).
    ExecutorEvent, stream_type = "executor", [
        ExecutorRegistered,
        ExecutorDraining,
        ExecutorDrained,
        ExecutorLost,
    ]
}

// ---- batch ----

/// An OpenAI batch was accepted: its input file passed structural validation
/// and fits the backlog. It starts `validating` until its shards exist.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BatchCreated {
    pub batch_id: BatchId,
    pub tenant: String,
    pub input_file_id: FileId,
    /// `/v1/chat/completions` or `/v1/completions`.
    pub endpoint: String,
    /// As the client sent it, e.g. `24h`.
    pub completion_window: String,
    /// Unix seconds after which unfinished rows expire.
    pub expires_at: i64,
    pub total_rows: u64,
    /// Rows per shard.
    pub shard_rows: u64,
    /// Prompt plus output tokens the batch may need: what the backlog counts.
    pub estimated_tokens: u64,
    #[serde(default)]
    pub metadata: std::collections::BTreeMap<String, String>,
}

/// The shards exist and runners may take them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BatchStarted {
    pub batch_id: BatchId,
    pub shards: u64,
}

/// A client asked to cancel; running rows stop and completed ones are kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BatchCancelRequested {
    pub batch_id: BatchId,
}

/// Every row has ended (or been stopped); the output files are being assembled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BatchFinalizing {
    pub batch_id: BatchId,
}

/// How a batch ended and where its results are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BatchOutcome {
    Completed,
    Cancelled,
    Expired,
}

/// The output and error files are written; the batch is over.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BatchEnded {
    pub batch_id: BatchId,
    pub outcome: BatchOutcome,
    #[serde(default)]
    pub output_file_id: Option<FileId>,
    #[serde(default)]
    pub error_file_id: Option<FileId>,
    /// Rows whose request returned 200.
    pub completed: u64,
    /// Rows in the error file: refused when run, or never run.
    pub failed: u64,
}

/// The batch could not run at all (e.g. its input file vanished).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BatchFailed {
    pub batch_id: BatchId,
    pub code: String,
    pub message: String,
}

event_enum! {
    /// Events of a `batch` stream (stream id = batch id). Progress within the
    /// batch (shard checkpoints) is state, not events: it lives in the shard
    /// table, fenced by epoch.
    BatchEvent, stream_type = "batch", [
        BatchCreated,
        BatchStarted,
        BatchCancelRequested,
        BatchFinalizing,
        BatchEnded,
        BatchFailed,
    ]
}

// ---- tenant ----

/// What an API key may do: each route needs one of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeyScope {
    Inference,
    Batch,
    Admin,
}

impl KeyScope {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyScope::Inference => "inference",
            KeyScope::Batch => "batch",
            KeyScope::Admin => "admin",
        }
    }
}

/// A tenant's quotas (each `None` is unlimited) and its fair-share weight in
/// the executor's scheduler. Quotas are enforced at the API's edge before any
/// model work; the weight divides prefill and decode tokens within a lane.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TenantQuota {
    /// Requests of the tenant in flight at once.
    #[serde(default)]
    pub max_concurrent_requests: Option<u32>,
    /// Prompt plus `max_tokens` reserved at admission per minute; the unused
    /// part is returned when the request ends.
    #[serde(default)]
    pub tokens_per_minute: Option<u64>,
    /// Rows of the tenant's open batches not yet run.
    #[serde(default)]
    pub max_batch_queued_rows: Option<u64>,
    /// Estimated tokens of the tenant's open batches.
    #[serde(default)]
    pub max_batch_queued_tokens: Option<u64>,
    /// Bytes of the tenant's stored files.
    #[serde(default)]
    pub max_file_bytes: Option<u64>,
    /// The tenant's share of each lane's tokens relative to other tenants'
    /// (1 to 1000; every tenant without a quota weighs 1).
    #[serde(default = "TenantQuota::default_weight")]
    pub weight: u32,
}

impl TenantQuota {
    pub const MAX_WEIGHT: u32 = 1000;

    fn default_weight() -> u32 {
        1
    }
}

impl Default for TenantQuota {
    fn default() -> Self {
        Self {
            max_concurrent_requests: None,
            tokens_per_minute: None,
            max_batch_queued_rows: None,
            max_batch_queued_tokens: None,
            max_file_bytes: None,
            weight: 1,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TenantCreated {
    pub tenant_id: TenantId,
    #[serde(default)]
    pub display_name: Option<String>,
}

/// A key was issued. Only a salted SHA-256 of its secret is recorded: the
/// secret itself was shown once, to whoever issued it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApiKeyIssued {
    pub tenant_id: TenantId,
    pub key_id: KeyId,
    /// Who holds the key: the actor of admin writes made with it.
    pub name: String,
    pub scopes: Vec<KeyScope>,
    /// 16 random bytes, hex.
    pub salt: String,
    /// `sha256(salt bytes || secret)`, hex.
    pub secret_sha256: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApiKeyRevoked {
    pub tenant_id: TenantId,
    pub key_id: KeyId,
}

/// The tenant's quotas and weight from now on (the whole set, not a patch).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TenantQuotaSet {
    pub tenant_id: TenantId,
    pub quota: TenantQuota,
}

event_enum! {
    /// Events of a `tenant` stream (stream id = tenant id): the tenant, its
    /// API keys and its quotas.
    TenantEvent, stream_type = "tenant", [
        TenantCreated,
        ApiKeyIssued,
        ApiKeyRevoked,
        TenantQuotaSet,
    ]
}

/// The JSON Schema of each event enum as checked in under `schemas/events/`:
/// `(file name, pretty-printed document with a trailing newline)`.
pub fn json_schemas() -> Vec<(&'static str, String)> {
    fn render<T: JsonSchema>() -> String {
        let schema = schemars::schema_for!(T);
        let mut text = serde_json::to_string_pretty(&schema).expect("a JSON Schema is plain JSON");
        text.push('\n');
        text
    }
    vec![
        ("deployment.schema.json", render::<DeploymentEvent>()),
        ("revision.schema.json", render::<RevisionEvent>()),
        (
            "capacity_profile.schema.json",
            render::<CapacityProfileEvent>(),
        ),
        ("executor.schema.json", render::<ExecutorEvent>()),
        ("batch.schema.json", render::<BatchEvent>()),
        ("tenant.schema.json", render::<TenantEvent>()),
    ]
}
