//! Logging setup. Log lines carry ids, codes, counts and timings; never prompt
//! or output text (a test reads a debug-level log to check this).

use tracing_subscriber::EnvFilter;

/// `STOKER_LOG` or `RUST_LOG` sets the filter; default `info`.
pub fn init(format: &str) {
    let filter = std::env::var("STOKER_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".into());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = if format == "json" {
        b.json().try_init()
    } else {
        b.try_init()
    };
}
