//! What the workspace's test suites and benchmarks share, in one place so that
//! each thing has one definition: where the model and the Python venv are (and
//! the fix when they are missing), a fresh Postgres database per test
//! (`postgres`), the percentile the load generator reports,
//! a seeded generator for test data, the seed and case count of property
//! tests, and temporary folders removed on drop.
//!
//! Missing prerequisites fail loudly: every lookup here panics with the script
//! that fixes it, so no test or benchmark can skip or pass vacuously.

pub mod paths;
pub mod postgres;
pub mod property;
pub mod rng;
pub mod tmp;

pub use paths::{MODEL_ENV, model_path, python_bin, repo_root};
pub use rng::TestRng;
pub use stoker_stats::{median, percentile, percentile_of};
pub use tmp::{TempDir, temp_dir};
