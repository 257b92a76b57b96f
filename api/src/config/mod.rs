//! One layered configuration: built-in defaults, then a TOML file, then
//! `STOKER_*` environment variables (nested keys joined with `__`), then
//! command-line flags. `Config::load` is the only place these meet.

use anyhow::Context;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};
use stoker_controlplane::transport::{SlotsError, Topics, TransportLayout};
use stoker_schemas::ids::ExecutorId;

use crate::auth::ApiKeyConfig;

pub const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// Largest chat template file accepted (the biggest real ones are ~20 KB).
pub const MAX_CHAT_TEMPLATE_BYTES: u64 = 1 << 20;

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address to listen on. Non-loopback needs API keys or `insecure`.
    pub listen: SocketAddr,
    /// Path of the GGUF model file, or of a Hugging Face model directory
    /// (config.json, tokenizer.json, safetensors).
    pub model: PathBuf,
    /// Quantize the model's float weights while loading: `q8_0`, `q4_k` or
    /// `q6_k` (vLLM's and mistral.rs's in-situ quantization); unset serves
    /// the weights as stored.
    pub quantize: Option<String>,
    /// Model id clients send; defaults to the file name without `.gguf`.
    pub served_model_name: Option<String>,
    /// A Jinja chat template file served instead of the model's own (vLLM's
    /// `--chat-template`); the revision's template hash names it.
    pub chat_template: Option<PathBuf>,
    /// Where state lives (event store, batch files).
    pub data_dir: PathBuf,
    /// Allow a non-loopback listen address without API keys.
    pub insecure: bool,
    /// On SIGTERM, how long in-flight requests may run before they are ended.
    pub shutdown_timeout_secs: u64,
    /// Name of this executor in provenance headers.
    pub executor_id: ExecutorId,
    /// `text` or `json`.
    pub log_format: String,
    pub limits: LimitsConfig,
    pub engine: EngineSection,
    pub admission: AdmissionConfig,
    pub control: ControlConfig,
    pub batch: BatchConfig,
    pub kafka: KafkaConfig,
    pub api_keys: Vec<ApiKeyConfig>,
}

/// The distributed mode's transport (`stoker api`, `stoker executor`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// `host:port[,host:port]` of the Kafka cluster.
    pub brokers: String,
    /// The most executors that can run at once (each leases a slot).
    pub executor_slots: i32,
    /// The most API instances that can run at once (each leases a slot).
    pub api_slots: i32,
    /// How jobs and replies map onto partitions, the same in every process:
    /// `pairwise` (default), one partition per (executor, API) pair and so one
    /// writer each, product capped at 65536; `shared` (real Kafka), one job
    /// partition per executor and one reply partition per API, many writers.
    pub layout: TransportLayout,
    /// How often an executor publishes its capacity.
    pub capacity_interval_ms: u64,
    /// How an API instance picks the executor for a request:
    /// `power_of_three` (default) or `power_of_two`, the best of three or
    /// two executors drawn at random, or `max_headroom`, the best of all;
    /// with many API instances the latter herds them onto the same executor
    /// between capacity reports (`cargo bench -p stoker-api --bench
    /// route_sim`).
    pub routing: Routing,
    /// An executor silent this long is treated as lost: no new requests go
    /// to it, and the streams it served end with `executor_lost`.
    pub executor_timeout_ms: u64,
    /// How long a partition lease holds without renewal (renewed every third).
    pub lease_ttl_ms: u64,
    /// How long a produce may wait for the broker.
    pub produce_timeout_ms: u64,
    /// A request that hears nothing from its executor this long (while the
    /// executor still reports) ends with a typed error.
    pub reply_timeout_ms: u64,
    /// How long a consumer's fetch waits at the broker for data: bounds the
    /// latency each Kafka hop adds, against empty fetches per second.
    pub fetch_wait_ms: u32,
    /// librdkafka properties for every client (`"security.protocol" =
    /// "ssl"`, …); they override stoker's own.
    pub client_properties: std::collections::BTreeMap<String, String>,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "127.0.0.1:9092".into(),
            executor_slots: 16,
            api_slots: 16,
            layout: Default::default(),
            capacity_interval_ms: 500,
            routing: Routing::default(),
            executor_timeout_ms: 1500,
            lease_ttl_ms: 6000,
            produce_timeout_ms: 3000,
            reply_timeout_ms: 60_000,
            fetch_wait_ms: 5,
            client_properties: Default::default(),
        }
    }
}

/// `kafka.routing`: how an API instance picks an executor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    /// The best of three executors drawn at random.
    #[default]
    PowerOfThree,
    /// The better of two executors drawn at random.
    PowerOfTwo,
    /// The executor with the most headroom of all.
    MaxHeadroom,
}

/// The Batch API: upload limits, the backlog ceiling, shards and runners.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchConfig {
    /// `file:///path`, a path, or `s3://bucket/prefix` (credentials, region and
    /// endpoint from the usual `AWS_*` variables); empty means `<data_dir>/objects`.
    pub storage_url: String,
    /// Largest upload accepted.
    pub max_file_bytes: usize,
    /// Most lines one input file may hold.
    pub max_lines: usize,
    /// Estimated prompt + output tokens all open batches may hold together.
    pub max_backlog_tokens: u64,
    /// Rows per shard: the unit a runner claims and resumes.
    pub shard_rows: u64,
    /// Rows of one shard in flight in the engine's batch lane at once.
    pub row_concurrency: usize,
    /// Shards this process runs at once.
    pub max_running_shards: usize,
    /// Rows per checkpoint (a checkpoint is also taken every second).
    pub checkpoint_rows: usize,
    /// How long a runner's claim on a shard holds without a checkpoint.
    pub lease_secs: u64,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            storage_url: String::new(),
            max_file_bytes: 100 << 20,
            max_lines: 50_000,
            max_backlog_tokens: 50_000_000,
            shard_rows: 100,
            row_concurrency: 8,
            max_running_shards: 2,
            checkpoint_rows: 32,
            lease_secs: 15,
        }
    }
}

/// The control plane: where events and read models live, and its background work.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ControlConfig {
    /// `sqlite:…` or `postgres://…`; empty means `sqlite://<data_dir>/stoker.db`.
    pub store_url: String,
    /// The deployment `stoker serve` creates on first start; empty means the model id.
    pub deployment: String,
    /// The revision id this process's artifact is registered as; empty means
    /// the first 12 hex digits of its sha256.
    pub revision: String,
    /// How often the rollout controller judges gated rollouts; 0 turns it off.
    pub rollout_controller_interval_ms: u64,
    /// How often read models catch up with events other processes appended.
    pub refresh_interval_ms: u64,
    /// Request-log rows queued for the batched writer before new ones are dropped.
    pub request_log_queue: usize,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            store_url: String::new(),
            deployment: String::new(),
            revision: String::new(),
            rollout_controller_interval_ms: 5000,
            refresh_interval_ms: 1000,
            request_log_queue: 16384,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Prompt tokens at most; 0 means the model's context window.
    pub max_input_tokens: usize,
    /// `max_tokens` at most; 0 means the model's context window.
    pub max_output_tokens: usize,
    /// Request bodies larger than this are refused with 413.
    pub max_body_bytes: usize,
    /// A request's line and headers must arrive within this, and a
    /// keep-alive connection idle this long is closed; 0 turns it off.
    pub header_read_timeout_ms: u64,
    /// A request body from which nothing arrives for this long is refused
    /// with 408 `request_timeout`; 0 turns it off.
    pub body_idle_timeout_ms: u64,
    /// A connection whose client reads nothing of its response for this long
    /// is closed, and its request cancelled; 0 turns it off.
    pub write_stall_timeout_ms: u64,
    /// Each connection's socket send buffer (`SO_SNDBUF`); 0 leaves it to
    /// the kernel, which grows it up to `net.ipv4.tcp_wmem`'s maximum (often
    /// 4 MiB). A client that stops reading is noticed only once that buffer
    /// is full, so a smaller one bounds what it can hold.
    pub send_buffer_bytes: usize,
}

impl LimitsConfig {
    fn millis(ms: u64) -> Option<Duration> {
        (ms > 0).then(|| Duration::from_millis(ms))
    }

    pub fn header_read_timeout(&self) -> Option<Duration> {
        Self::millis(self.header_read_timeout_ms)
    }

    pub fn body_idle_timeout(&self) -> Option<Duration> {
        Self::millis(self.body_idle_timeout_ms)
    }

    pub fn write_stall_timeout(&self) -> Option<Duration> {
        Self::millis(self.write_stall_timeout_ms)
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_input_tokens: 0,
            max_output_tokens: 0,
            max_body_bytes: 4 << 20,
            header_read_timeout_ms: 60_000,
            body_idle_timeout_ms: 30_000,
            write_stall_timeout_ms: 30_000,
            send_buffer_bytes: 0,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSection {
    pub kv_cache_mib: usize,
    pub max_num_seqs: usize,
    pub max_batched_tokens: usize,
    /// Forward-pass threads; 0 means one per core.
    pub threads: usize,
    pub enable_prefix_caching: bool,
    pub interactive_reserve_share: f32,
    /// Most tokens the batch lane computes per step (0: no cap); bounds how
    /// long an interactive arrival waits behind a batch step.
    pub batch_max_step_tokens: usize,
    /// The batch lane pauses while interactive requests wait or prefill.
    pub batch_yields_to_prefill: bool,
    /// A step carrying interactive decodes takes at most this many ms,
    /// predicted by the online step-cost model (0: `itl_target_factor`).
    pub itl_target_ms: f64,
    /// With `itl_target_ms` 0: such a step costs at most this many times its
    /// interactive decodes alone (0 with `itl_target_ms` 0: no time target).
    pub itl_target_factor: f64,
    /// Batch work fills a step only up to this many predicted ms (0: none).
    pub batch_step_target_ms: f64,
    /// While chat traffic is about, a step of batch work alone takes at most
    /// this many predicted ms, running rows included (0: no such limit).
    pub batch_step_beside_chat_ms: f64,
    /// The first interactive prefill of a step gets at least this many tokens.
    pub min_prefill_chunk: usize,
    /// `position` (default): a row's order depends on its position alone, so
    /// a conversation's next turn reuses the KV of the previous reply from the
    /// prefix cache; `reference`: attention sums as candle-transformers'
    /// quantized Llama does, so logits are its bits (the reference-parity tests).
    pub attention_order: stoker_executor::AttentionOrder,
}

impl Default for EngineSection {
    fn default() -> Self {
        let e = stoker_executor::EngineConfig::default();
        EngineSection {
            kv_cache_mib: e.kv_cache_bytes >> 20,
            max_num_seqs: e.max_num_seqs,
            max_batched_tokens: e.max_batched_tokens,
            threads: e.threads,
            enable_prefix_caching: e.enable_prefix_caching,
            interactive_reserve_share: e.interactive_reserve_share,
            batch_max_step_tokens: e.batch_max_step_tokens,
            batch_yields_to_prefill: e.batch_yields_to_prefill,
            itl_target_ms: e.planner.interactive_itl_ms,
            itl_target_factor: e.planner.interactive_itl_factor,
            batch_step_target_ms: e.planner.batch_step_ms,
            batch_step_beside_chat_ms: e.planner.batch_step_beside_chat_ms,
            min_prefill_chunk: e.planner.min_prefill_chunk,
            attention_order: e.attention_order,
        }
    }
}

impl EngineSection {
    /// The step planner's targets.
    pub fn planner(&self) -> stoker_executor::scheduler::PlannerConfig {
        stoker_executor::scheduler::PlannerConfig {
            interactive_itl_ms: self.itl_target_ms,
            interactive_itl_factor: self.itl_target_factor,
            batch_step_ms: self.batch_step_target_ms,
            batch_step_beside_chat_ms: self.batch_step_beside_chat_ms,
            min_prefill_chunk: self.min_prefill_chunk,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdmissionConfig {
    /// Requests admitted beyond the running slots (`engine.max_num_seqs`).
    pub max_waiting_requests: usize,
    /// Prompt + max_tokens of all requests not yet scheduled.
    pub max_waiting_tokens: usize,
    /// Retry-After is clamped to this many seconds.
    pub max_retry_after_secs: u64,
    /// With a capacity profile in force, a request whose prompt or output
    /// passes this many times the profile's p95 counts as out of envelope
    /// (`stoker_out_of_envelope_requests_total`).
    pub out_of_envelope_factor: f64,
    /// The time-to-first-token objective: a request whose estimated wait
    /// for its first token passes this many ms, while anything is ahead of
    /// it, is refused (503 `server_overloaded` with Retry-After) rather than
    /// queued to wait. 0 turns it off (the queue bounds alone apply).
    pub max_ttft_ms: u64,
}

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            max_waiting_requests: 256,
            max_waiting_tokens: 256 * 1024,
            max_retry_after_secs: 60,
            out_of_envelope_factor: 4.0,
            max_ttft_ms: 5000,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            model: PathBuf::from(DEFAULT_MODEL),
            quantize: None,
            served_model_name: None,
            chat_template: None,
            data_dir: PathBuf::from("data"),
            insecure: false,
            shutdown_timeout_secs: 30,
            executor_id: "embedded-0".parse().expect("a valid executor id"),
            log_format: "text".into(),
            limits: LimitsConfig::default(),
            engine: EngineSection::default(),
            admission: AdmissionConfig::default(),
            control: ControlConfig::default(),
            batch: BatchConfig::default(),
            kafka: KafkaConfig::default(),
            api_keys: Vec::new(),
        }
    }
}

/// Values from command-line flags; `None` leaves the lower layers' value.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub model: Option<PathBuf>,
    pub quantize: Option<String>,
    pub chat_template: Option<PathBuf>,
    pub listen: Option<SocketAddr>,
    pub data_dir: Option<PathBuf>,
    pub insecure: bool,
    pub shutdown_timeout_secs: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Invalid(String),
    #[error(
        "refusing to listen on non-loopback address {0} without API keys; configure [[api_keys]] or pass --insecure"
    )]
    InsecureListen(SocketAddr),
    /// `kafka.executor_slots` / `kafka.api_slots` that `kafka.layout` cannot carry.
    #[error("configuration: {0}")]
    KafkaSlots(#[from] SlotsError),
}

impl Config {
    /// Defaults < TOML file < `STOKER_*` env < flags.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        Self::load_from(file, Self::env("STOKER_"), overrides)
    }

    /// `PREFIX*` variables whose first segment is a config key. Other
    /// `STOKER_*` variables (`STOKER_CONFIG`, `STOKER_LOG`, test and bench
    /// knobs) are not configuration and must not trip `deny_unknown_fields`.
    pub fn env(prefix: &str) -> Env {
        const KEYS: [&str; 17] = [
            "listen",
            "model",
            "quantize",
            "served_model_name",
            "chat_template",
            "data_dir",
            "insecure",
            "shutdown_timeout_secs",
            "executor_id",
            "log_format",
            "limits",
            "engine",
            "admission",
            "control",
            "batch",
            "kafka",
            "api_keys",
        ];
        Env::prefixed(prefix)
            .filter(|k| {
                let first = k.as_str().split("__").next().unwrap_or_default();
                KEYS.iter().any(|key| first.eq_ignore_ascii_case(key))
            })
            .split("__")
    }

    pub fn load_from(
        file: Option<&Path>,
        env: Env,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(f) = file {
            if !f.exists() {
                return Err(ConfigError::Invalid(format!(
                    "config file {} does not exist",
                    f.display()
                )));
            }
            fig = fig.merge(Toml::file(f));
        }
        fig = fig.merge(env);
        let mut c: Config = fig
            .extract()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if let Some(m) = &overrides.model {
            c.model = m.clone();
        }
        if let Some(t) = &overrides.chat_template {
            c.chat_template = Some(t.clone());
        }
        if let Some(q) = &overrides.quantize {
            c.quantize = Some(q.clone());
        }
        if let Some(l) = overrides.listen {
            c.listen = l;
        }
        if let Some(d) = &overrides.data_dir {
            c.data_dir = d.clone();
        }
        if overrides.insecure {
            c.insecure = true;
        }
        if let Some(t) = overrides.shutdown_timeout_secs {
            c.shutdown_timeout_secs = t;
        }
        c.check()?;
        Ok(c)
    }

    fn check(&self) -> Result<(), ConfigError> {
        self.load_options()?;
        if !self.listen.ip().is_loopback() && self.api_keys.is_empty() && !self.insecure {
            return Err(ConfigError::InsecureListen(self.listen));
        }
        if self.engine.max_num_seqs == 0 {
            return Err(ConfigError::Invalid(
                "engine.max_num_seqs must be >= 1".into(),
            ));
        }
        if !(0.0..1.0).contains(&self.engine.interactive_reserve_share) {
            return Err(ConfigError::Invalid(
                "engine.interactive_reserve_share must be in [0, 1)".into(),
            ));
        }
        let e = &self.engine;
        let targets_ok = [
            e.itl_target_ms,
            e.itl_target_factor,
            e.batch_step_target_ms,
            e.batch_step_beside_chat_ms,
        ]
        .iter()
        .all(|t| t.is_finite() && *t >= 0.0)
            && (e.itl_target_factor == 0.0 || e.itl_target_factor >= 1.0);
        if !targets_ok {
            return Err(ConfigError::Invalid(
                "engine.itl_target_ms, engine.batch_step_target_ms and \
                 engine.batch_step_beside_chat_ms must be finite and >= 0, \
                 and engine.itl_target_factor 0 or at least 1"
                    .into(),
            ));
        }
        let f = self.admission.out_of_envelope_factor;
        if !(f.is_finite() && f > 1.0) {
            return Err(ConfigError::Invalid(
                "admission.out_of_envelope_factor must be a finite number above 1".into(),
            ));
        }
        if !matches!(self.log_format.as_str(), "text" | "json") {
            return Err(ConfigError::Invalid(
                "log_format must be `text` or `json`".into(),
            ));
        }
        let b = &self.batch;
        if b.shard_rows == 0 || b.row_concurrency == 0 || b.max_running_shards == 0 {
            return Err(ConfigError::Invalid(
                "batch.shard_rows, batch.row_concurrency and batch.max_running_shards must be >= 1"
                    .into(),
            ));
        }
        if b.max_file_bytes == 0 || b.max_lines == 0 || b.checkpoint_rows == 0 || b.lease_secs == 0
        {
            return Err(ConfigError::Invalid(
                "batch.max_file_bytes, batch.max_lines, batch.checkpoint_rows and \
                 batch.lease_secs must be >= 1"
                    .into(),
            ));
        }
        let k = &self.kafka;
        Topics::check_slots(k.layout, k.executor_slots, k.api_slots)?;
        for (i, k) in self.api_keys.iter().enumerate() {
            k.check()
                .map_err(|m| ConfigError::Invalid(format!("api_keys[{i}]: {m}")))?;
        }
        Ok(())
    }

    pub fn engine_config(&self) -> stoker_executor::EngineConfig {
        let e = &self.engine;
        stoker_executor::EngineConfig {
            kv_cache_bytes: e.kv_cache_mib << 20,
            max_num_seqs: e.max_num_seqs,
            max_batched_tokens: e.max_batched_tokens,
            // The edge admits first; the engine's own bound is a backstop
            // that must never be stricter than the edge.
            max_waiting_requests: self.admission.max_waiting_requests + e.max_num_seqs + 16,
            max_waiting_tokens: self
                .admission
                .max_waiting_tokens
                .saturating_mul(2)
                .max(1 << 20),
            interactive_reserve_share: e.interactive_reserve_share,
            enable_prefix_caching: e.enable_prefix_caching,
            threads: e.threads,
            batch_max_step_tokens: e.batch_max_step_tokens,
            batch_yields_to_prefill: e.batch_yields_to_prefill,
            attention_order: e.attention_order,
            planner: e.planner(),
            ..Default::default()
        }
    }

    /// The batch path's settings.
    pub fn batch_settings(&self) -> stoker_controlplane::batch::BatchSettings {
        use std::time::Duration;
        use stoker_controlplane::batch::{BatchSettings, input::InputLimits, runner::RunnerConfig};
        let b = &self.batch;
        BatchSettings {
            limits: InputLimits {
                max_bytes: b.max_file_bytes,
                max_lines: b.max_lines,
            },
            shard_rows: b.shard_rows,
            max_backlog_tokens: b.max_backlog_tokens,
            runner: RunnerConfig {
                row_concurrency: b.row_concurrency,
                checkpoint_rows: b.checkpoint_rows,
                checkpoint_interval: Duration::from_secs(1),
                lease: Duration::from_secs(b.lease_secs),
            },
            max_running_shards: b.max_running_shards,
            ..BatchSettings::default()
        }
    }

    /// Where batch files and outputs live.
    pub fn batch_storage_url(&self) -> String {
        if self.batch.storage_url.is_empty() {
            self.data_dir.join("objects").display().to_string()
        } else {
            self.batch.storage_url.clone()
        }
    }

    /// The event store's URL.
    pub fn store_url(&self) -> String {
        if self.control.store_url.is_empty() {
            format!("sqlite://{}", self.data_dir.join("stoker.db").display())
        } else {
            self.control.store_url.clone()
        }
    }

    /// The deployment `stoker serve` creates and serves by default.
    pub fn deployment_id(&self) -> String {
        if self.control.deployment.is_empty() {
            self.model_id()
        } else {
            self.control.deployment.clone()
        }
    }

    /// The `chat_template` file's text and how provenance names it, when
    /// one is configured.
    pub fn chat_template_override(&self) -> anyhow::Result<Option<(String, String)>> {
        let Some(path) = &self.chat_template else {
            return Ok(None);
        };
        let meta = std::fs::metadata(path)
            .with_context(|| format!("reading chat template {}", path.display()))?;
        if meta.len() > MAX_CHAT_TEMPLATE_BYTES {
            anyhow::bail!(
                "chat template {} is {} bytes; at most {MAX_CHAT_TEMPLATE_BYTES} are allowed",
                path.display(),
                meta.len()
            );
        }
        let source = std::fs::read_to_string(path)
            .with_context(|| format!("reading chat template {}", path.display()))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Some((source, format!("--chat-template {name}"))))
    }

    /// The model id clients use: the file name without `.gguf`, or the
    /// directory's name (whose dots are part of it: `Qwen2.5-0.5B`).
    pub fn model_id(&self) -> String {
        self.served_model_name.clone().unwrap_or_else(|| {
            let name = if self.model.is_dir() {
                self.model.file_name()
            } else {
                self.model.file_stem()
            };
            name.map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "model".into())
        })
    }

    /// How the model is loaded: `quantize` as a weight mode.
    pub fn load_options(&self) -> Result<stoker_executor::LoadOptions, ConfigError> {
        use stoker_executor::model::WeightMode;
        let weights = match self.quantize.as_deref().map(str::to_ascii_lowercase) {
            None => WeightMode::Native,
            Some(q) => {
                let ty = match q.as_str() {
                    "q8_0" => "Q8_0",
                    "q4_k" => "Q4_K",
                    "q6_k" => "Q6_K",
                    _ => {
                        return Err(ConfigError::Invalid(format!(
                            "quantize `{q}` is not one of q8_0, q4_k, q6_k"
                        )));
                    }
                };
                let ty = stoker_executor::quantize::parse_type(ty)
                    .map_err(|e| ConfigError::Invalid(e.to_string()))?;
                WeightMode::Quantize(ty)
            }
        };
        Ok(stoker_executor::LoadOptions {
            weights,
            ..Default::default()
        })
    }
}

#[cfg(test)]
mod tests;
