//! The executor's end-to-end suite on the real model, in one test binary so
//! the optimized profile links it once.

mod attention_modes;
mod attention_order;
mod batch_invariance;
mod candle_bitwise;
mod choices;
mod common;
mod engine;
mod inspect;
mod model_errors;
mod prompt_scores;
mod reference_parity;
mod structured;
