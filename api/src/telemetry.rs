//! Logging setup. Log lines carry ids, codes, counts and timings; never prompt
//! or output text (a test reads a debug-level log to check this).

use tracing_subscriber::EnvFilter;

/// `STOKER_LOG` or `RUST_LOG` sets the filter; default `info`. librdkafka
/// logs every failed reconnect at error level; unless the filter names it,
/// only its warnings-free summary (our own throttled lines) is kept.
pub fn init(format: &str) {
    let mut filter = std::env::var("STOKER_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .unwrap_or_else(|_| "info".into());
    if !filter.contains("kafka") {
        filter.push_str(",rdkafka=off,librdkafka=off");
    }
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
