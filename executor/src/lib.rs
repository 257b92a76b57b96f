//! The stoker executor: turns a GGUF model artifact into a batched token engine.
//!
//! It owns model loading, the tokenizer and chat template, the paged KV cache,
//! the scheduler, sampling and the engine loop. It knows nothing of HTTP, SQL,
//! Kafka or object storage: callers hand it validated requests through
//! [`engine::Engine::submit`] and read events from the returned handle.

pub mod ids;
pub mod kernels;
