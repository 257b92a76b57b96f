//! The scenario harness's tests: the file's refusals (each names its file,
//! line and field), and whole runs against fake targets and a fake Batch API
//! on tokio's virtual clock, where every ratio can be computed by hand.

mod parse;
mod run;
