//! The stoker executor: turns a GGUF model artifact into a batched token engine.
//!
//! It owns model loading, the tokenizer and chat template, the paged KV cache,
//! the scheduler, sampling and the engine loop. It knows nothing of HTTP, SQL,
//! Kafka or object storage: callers hand it validated requests through
//! [`engine::Engine::submit`] and read events from the returned handle.

mod arch;
pub mod chat_template;
pub mod detokenize;
pub mod engine;
pub mod error;
pub mod ids;
pub mod inspect;
pub mod kernels;
pub mod kv;
pub mod limits;
pub mod logit_processing;
pub mod logits;
pub mod logprobs;
pub mod model;
pub mod quantize;
pub mod request;
pub mod sampling;
pub mod scheduler;
pub mod stop;
pub mod structured;
pub mod tokenizer;
pub mod tool_calls;

pub use engine::{AttentionOrder, Engine, EngineConfig, EngineEvent, FinishReason, RequestHandle};
pub use error::{EngineError, ModelError, ValidationError};
pub use ids::{BLOCK_SIZE, BlockId, Lane, SeqId, TenantId};
pub use logprobs::TokenLogprob;
pub use model::{LoadOptions, Model};
pub use request::{RequestLimits, SamplingParams, ValidRequest};
