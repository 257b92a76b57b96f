//! End-to-end tests: the real `stoker` binary on the real model, driven over HTTP by
//! the official OpenAI Python SDK and by reqwest.
//!
//! Needs `target/release/stoker` (`cargo build --release -p stoker --bin stoker`),
//! the model (`scripts/fetch-model.sh`) and the Python venv (`scripts/setup-venv.sh`).
//! Each test starts its own server(s) on `127.0.0.1:0` with a temp config and data
//! dir. Run them one at a time: `cargo test --release -p stoker-tests --test e2e --
//! --test-threads=1`. `STOKER_E2E_ECHO=1` echoes the servers' logs while they run.

mod architectures;
mod batch;
mod bench;
mod broker;
mod cluster;
mod control;
mod disk_full;
mod distributed;
mod drain;
mod guarantees;
mod harness;
mod hf_dir;
mod logs;
mod object_storage;
mod sdk;
mod tcp_proxy;
mod tenants;
