//! What the server generates with. `stoker serve` and `stoker executor`
//! hold the engine in process; `stoker api` holds the executors behind Kafka
//! (the remote backend of `stoker-distributed`, which implements these traits
//! and registers its capacity view as the [`Fleet`]).
//! Two traits, as TGI's router separates model info from inference: the
//! served artifact's metadata ([`Artifact`]) and the narrow request path
//! ([`Backend`]). Routes, validation, admission and streaming see only these,
//! so every role runs the same code above them; [`Served`] is one loaded
//! artifact as requests see it.

pub mod fleet;
mod generation;
mod served;

pub use fleet::{Fleet, LiveExecutor};
pub use generation::{BackendError, Generation, Report, Runner};
pub use served::{Provenance, Served, default_revision_id};

use stoker_executor::chat_template::ChatTemplate;
use stoker_executor::engine::{EngineStats, ModelInfo};
use stoker_executor::tokenizer::ModelTokenizer;
use stoker_executor::{Engine, RequestLimits, ValidRequest};

/// The served artifact's metadata: what requests are validated, tokenized
/// and templated against. Fixed for the artifact's life.
pub trait Artifact: Send + Sync + 'static {
    fn info(&self) -> &ModelInfo;
    fn tokenizer(&self) -> &ModelTokenizer;
    fn chat_template(&self) -> &ChatTemplate;
    /// Limits from the model alone; deployments narrow them.
    fn model_limits(&self) -> RequestLimits;
}

/// The request path: where generations run, and how loaded it is.
pub trait Backend: Send + Sync + 'static {
    /// Live load: of the engine, or summed over the ready executors.
    fn stats(&self) -> EngineStats;
    /// Starts a generation; refusals that depend on live state arrive as its
    /// first report.
    fn submit(&self, request: ValidRequest) -> Result<Generation, BackendError>;
    /// Starts `n` choices of one request (OpenAI's `n`), each with its own
    /// seed. Remote executors get one job per choice; the engine in process
    /// computes the prompt once for all of them.
    fn submit_n(&self, request: ValidRequest, n: usize) -> Result<Vec<Generation>, BackendError> {
        (0..n.max(1))
            .map(|i| self.submit(request.choice(i as u64)))
            .collect()
    }
    /// One short generation end to end; readiness waits on it.
    fn warm_up(&self) -> Result<(), BackendError>;
    /// Where the generations run, for logs and `x-stoker-executor`.
    fn kind(&self) -> &'static str;
    /// Puts step-planner targets in force where the steps run (in process;
    /// remote executors plan their own steps from their own configuration).
    fn set_planner(&self, _planner: stoker_executor::scheduler::PlannerConfig) {}
}

impl Artifact for Engine {
    fn info(&self) -> &ModelInfo {
        Engine::info(self)
    }
    fn tokenizer(&self) -> &ModelTokenizer {
        Engine::tokenizer(self)
    }
    fn chat_template(&self) -> &ChatTemplate {
        Engine::chat_template(self)
    }
    fn model_limits(&self) -> RequestLimits {
        Engine::model_limits(self)
    }
}

impl Backend for Engine {
    fn stats(&self) -> EngineStats {
        Engine::stats(self)
    }
    fn submit(&self, request: ValidRequest) -> Result<Generation, BackendError> {
        Ok(Generation::local(Engine::submit(self, request)?))
    }
    fn submit_n(&self, request: ValidRequest, n: usize) -> Result<Vec<Generation>, BackendError> {
        Ok(Engine::submit_n(self, request, n)?
            .into_iter()
            .map(Generation::local)
            .collect())
    }
    fn warm_up(&self) -> Result<(), BackendError> {
        Ok(Engine::warm_up(self)?)
    }
    fn kind(&self) -> &'static str {
        "in-process"
    }
    fn set_planner(&self, planner: stoker_executor::scheduler::PlannerConfig) {
        Engine::set_planner(self, planner)
    }
}
