//! One progress bar per phase on stderr (indicatif): the phase's time
//! elapsed against its duration, and per tenant the requests done, failed
//! and in flight, or a batch job's rows completed. Hidden with `--json` and
//! when stderr is not a terminal, so logs and pipes get only the tables.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::driver::Progress;

/// What one tenant's part of the bar counts.
#[derive(Clone, Debug)]
pub enum Counter {
    Requests(Arc<Progress>),
    /// Rows the tenant's batch job has completed so far.
    Rows(Arc<AtomicU64>),
}

/// Redrawn every 200 ms until dropped.
pub struct PhaseBar {
    bar: ProgressBar,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Whether bars are drawn: not with `--json`, and only on a terminal.
pub fn enabled(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

impl PhaseBar {
    pub fn start(
        phase: &str,
        duration: Duration,
        tenants: Vec<(String, Counter)>,
        enabled: bool,
    ) -> PhaseBar {
        if !enabled {
            return PhaseBar {
                bar: ProgressBar::hidden(),
                task: None,
            };
        }
        let tenths = (duration.as_secs_f64() * 10.0).round().max(1.0) as u64;
        let bar = ProgressBar::with_draw_target(Some(tenths), ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{prefix:.bold} [{bar:24}] {elapsed:>4} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("#>.");
        bar.set_style(style);
        bar.set_prefix(phase.to_owned());
        let b = bar.clone();
        let task = tokio::spawn(async move {
            let t0 = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let pos = (t0.elapsed().as_secs_f64() * 10.0) as u64;
                b.set_position(pos.min(tenths));
                b.set_message(message(&tenants, pos >= tenths));
            }
        });
        PhaseBar {
            bar,
            task: Some(task),
        }
    }
}

fn message(tenants: &[(String, Counter)], draining: bool) -> String {
    let parts: Vec<String> = tenants
        .iter()
        .map(|(name, c)| match c {
            Counter::Requests(p) => {
                let done = p.done.load(Ordering::Relaxed);
                let failed = p.failed.load(Ordering::Relaxed);
                let in_flight = p.sent.load(Ordering::Relaxed).saturating_sub(done);
                format!("{name}: {done} done, {failed} failed, {in_flight} in flight")
            }
            Counter::Rows(r) => format!("{name}: {} rows", r.load(Ordering::Relaxed)),
        })
        .collect();
    let tail = if draining { "  (draining)" } else { "" };
    format!("{}{tail}", parts.join(" | "))
}

impl Drop for PhaseBar {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.bar.finish_and_clear();
    }
}
