//! The executor's end-to-end suite on the real model.

mod attention_modes;
mod attention_order;
mod batch_invariance;
mod candle_bitwise;
mod choices;
pub(crate) mod common;
mod engine;
mod gguf_fuzz;
mod inspect;
mod model_errors;
mod prompt_scores;
mod reference_parity;
mod structured;
