//! The executor's integration tests, in one test binary: each binary costs
//! a full optimized link of the dependency tree, which was most of this
//! suite's build time.

mod architectures;
mod engine_suite;
mod hf_directories;
mod hf_smollm2;
mod kernels;
mod quantize;
mod quantize_llama_cpp;
mod reference_logits_f32;
mod scheduler_invariants;
mod tokenizer;
