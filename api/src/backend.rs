//! What the HTTP layer generates with. `stoker serve` and `stoker executor`
//! hold the engine in process; `stoker api` holds the executors behind Kafka
//! (`distributed::remote`). Routes, validation, admission and streaming see
//! only this trait, so both modes run the same code above it.

use stoker_executor::chat_template::ChatTemplate;
use stoker_executor::engine::{EngineStats, ModelInfo};
use stoker_executor::tokenizer::ModelTokenizer;
use stoker_executor::{Engine, EngineError, RequestHandle, RequestLimits, ValidRequest};

pub trait Backend: Send + Sync + 'static {
    /// The artifact requests are validated against.
    fn info(&self) -> &ModelInfo;
    fn tokenizer(&self) -> &ModelTokenizer;
    fn chat_template(&self) -> &ChatTemplate;
    /// Limits from the model alone; deployments narrow them.
    fn model_limits(&self) -> RequestLimits;
    /// Live load: of the engine, or summed over the ready executors.
    fn stats(&self) -> EngineStats;
    /// Starts a generation; refusals that depend on live state arrive as the
    /// handle's first event.
    fn submit(&self, request: ValidRequest) -> Result<RequestHandle, EngineError>;
    /// One short generation end to end; readiness waits on it.
    fn warm_up(&self) -> Result<(), EngineError>;
    /// Where the generations run, for logs and `x-stoker-executor`.
    fn kind(&self) -> &'static str;
}

impl Backend for Engine {
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
    fn stats(&self) -> EngineStats {
        Engine::stats(self)
    }
    fn submit(&self, request: ValidRequest) -> Result<RequestHandle, EngineError> {
        Engine::submit(self, request)
    }
    fn warm_up(&self) -> Result<(), EngineError> {
        Engine::warm_up(self)
    }
    fn kind(&self) -> &'static str {
        "in-process"
    }
}
