//! How `stoker batch submit --wait` shows a batch moving: row counts from the
//! batch object, a rows/s figure over a sliding window, the ETA, the one-line
//! progress bar and the final summary.

use std::collections::VecDeque;

use serde_json::Value;

use crate::table::cell;

/// Width of the progress bar, in characters.
const BAR_WIDTH: usize = 24;
/// The window the rows/s figure is measured over.
pub const RATE_WINDOW_SECS: f64 = 30.0;

/// `45s`, `3m05s`, `2h03m`; `--` for an unknown (non-finite or negative) span.
pub fn fmt_duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "--".into();
    }
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Rows per second with two or three significant digits.
pub fn fmt_rate(rows_per_sec: f64) -> String {
    if !rows_per_sec.is_finite() || rows_per_sec < 0.0 {
        return "-- rows/s".into();
    }
    if rows_per_sec < 10.0 {
        format!("{rows_per_sec:.2} rows/s")
    } else if rows_per_sec < 100.0 {
        format!("{rows_per_sec:.1} rows/s")
    } else {
        format!("{rows_per_sec:.0} rows/s")
    }
}

/// Seconds until `remaining` rows are done at `rate`; `None` when the rate is
/// unknown or zero.
pub fn eta_secs(remaining: u64, rate: Option<f64>) -> Option<f64> {
    match rate {
        _ if remaining == 0 => Some(0.0),
        Some(r) if r.is_finite() && r > 0.0 => Some(remaining as f64 / r),
        _ => None,
    }
}

/// A batch's row counts, read from its `request_counts`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: u64,
    pub completed: u64,
    pub failed: u64,
}

impl Counts {
    pub fn of(batch: &Value) -> Counts {
        let n = |k: &str| batch["request_counts"][k].as_u64().unwrap_or(0);
        Counts {
            total: n("total"),
            completed: n("completed"),
            failed: n("failed"),
        }
    }

    /// Rows that have ended, either way.
    pub fn done(&self) -> u64 {
        self.completed + self.failed
    }
}

/// Rows/s over a sliding window of `(seconds, rows done)` observations. The
/// count may go down (rows run again after a server restart); the window then
/// starts over, so the rate never goes negative.
#[derive(Debug)]
pub struct RateMeter {
    window_secs: f64,
    samples: VecDeque<(f64, u64)>,
}

impl RateMeter {
    pub fn new(window_secs: f64) -> RateMeter {
        RateMeter {
            window_secs,
            samples: VecDeque::new(),
        }
    }

    pub fn observe(&mut self, at_secs: f64, done: u64) {
        if self.samples.back().is_some_and(|&(_, d)| done < d) {
            self.samples.clear();
        }
        self.samples.push_back((at_secs, done));
        // Keep one sample at or before the window's start so the span covers it.
        while self.samples.len() > 2 && self.samples[1].0 <= at_secs - self.window_secs {
            self.samples.pop_front();
        }
    }

    /// `None` until two observations at least half a second apart.
    pub fn rate(&self) -> Option<f64> {
        let (&(t0, d0), &(t1, d1)) = (self.samples.front()?, self.samples.back()?);
        let span = t1 - t0;
        (span >= 0.5).then(|| (d1 - d0) as f64 / span)
    }
}

/// What one progress line shows.
#[derive(Debug)]
pub struct Progress<'a> {
    pub status: &'a str,
    pub counts: Counts,
    pub rate: Option<f64>,
}

/// `[#########...............]  750/2000  37%  41.2 rows/s  ETA 30s  in_progress  3 failed`
pub fn progress_line(p: &Progress<'_>) -> String {
    let Counts { total, failed, .. } = p.counts;
    let done = p.counts.done();
    let filled = if total == 0 {
        0
    } else {
        ((done as u128 * BAR_WIDTH as u128) / total as u128).min(BAR_WIDTH as u128) as usize
    };
    let bar = format!("[{}{}]", "#".repeat(filled), ".".repeat(BAR_WIDTH - filled));
    let mut line = if total == 0 {
        format!("{bar}  {done}/?")
    } else {
        let pct = done as f64 * 100.0 / total as f64;
        format!("{bar}  {done}/{total}  {pct:.0}%")
    };
    let rate = p.rate.map_or("-- rows/s".into(), fmt_rate);
    // No total yet (validating): nothing to estimate.
    let eta = (total > 0)
        .then(|| eta_secs(total.saturating_sub(done), p.rate))
        .flatten()
        .map_or("--".into(), fmt_duration);
    line.push_str(&format!("  {rate}  ETA {eta}  {}", p.status));
    if failed > 0 {
        line.push_str(&format!("  {failed} failed"));
    }
    line
}

/// The line `--wait` ends with, on stdout.
pub fn summary_line(batch: &Value, elapsed_secs: Option<f64>) -> String {
    let c = Counts::of(batch);
    let mut s = format!(
        "{} {}: {}/{} rows, {} completed, {} failed",
        cell(batch, "/id"),
        cell(batch, "/status"),
        c.done(),
        c.total,
        c.completed,
        c.failed
    );
    if let Some(e) = elapsed_secs {
        s.push_str(&format!(" in {}", fmt_duration(e)));
    }
    for (label, ptr) in [("output", "/output_file_id"), ("errors", "/error_file_id")] {
        if batch.pointer(ptr).and_then(Value::as_str).is_some() {
            s.push_str(&format!("; {label} {}", cell(batch, ptr)));
        }
    }
    s
}

/// Statuses a batch never leaves.
pub fn is_terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "expired" | "cancelled")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations_and_rates_read_at_a_glance() {
        assert_eq!(fmt_duration(0.0), "0s");
        assert_eq!(fmt_duration(44.6), "45s");
        assert_eq!(fmt_duration(59.4), "59s");
        assert_eq!(fmt_duration(60.0), "1m00s");
        assert_eq!(fmt_duration(185.0), "3m05s");
        assert_eq!(fmt_duration(7380.0), "2h03m");
        assert_eq!(fmt_duration(f64::INFINITY), "--");
        assert_eq!(fmt_duration(f64::NAN), "--");
        assert_eq!(fmt_duration(-1.0), "--");

        assert_eq!(fmt_rate(0.25), "0.25 rows/s");
        assert_eq!(fmt_rate(41.23), "41.2 rows/s");
        assert_eq!(fmt_rate(1234.4), "1234 rows/s");
        assert_eq!(fmt_rate(f64::NAN), "-- rows/s");
    }

    #[test]
    fn eta_needs_a_positive_rate() {
        assert_eq!(eta_secs(100, Some(10.0)), Some(10.0));
        assert_eq!(eta_secs(0, None), Some(0.0));
        assert_eq!(eta_secs(100, None), None);
        assert_eq!(eta_secs(100, Some(0.0)), None);
        assert_eq!(eta_secs(100, Some(f64::NAN)), None);
    }

    #[test]
    fn the_rate_follows_a_sliding_window_and_restarts_after_a_setback() {
        let mut m = RateMeter::new(30.0);
        assert_eq!(m.rate(), None);
        m.observe(0.0, 0);
        assert_eq!(m.rate(), None);
        m.observe(0.2, 5);
        assert_eq!(m.rate(), None, "under half a second is no measurement");
        m.observe(10.0, 100);
        assert_eq!(m.rate(), Some(10.0));
        // Old samples leave the window: only the last ~30 s count.
        m.observe(40.0, 100);
        m.observe(70.0, 700);
        assert_eq!(m.rate(), Some(20.0));
        // Rows lost in a restart: start over rather than report a negative rate.
        m.observe(71.0, 650);
        assert_eq!(m.rate(), None);
        m.observe(73.0, 660);
        assert_eq!(m.rate(), Some(5.0));
    }

    #[test]
    fn progress_lines_show_bar_counts_rate_and_eta() {
        let counts = Counts {
            total: 2000,
            completed: 747,
            failed: 3,
        };
        let line = progress_line(&Progress {
            status: "in_progress",
            counts,
            rate: Some(25.0),
        });
        assert_eq!(
            line,
            "[#########...............]  750/2000  38%  25.0 rows/s  ETA 50s  in_progress  3 failed"
        );
        let line = progress_line(&Progress {
            status: "validating",
            counts: Counts::default(),
            rate: None,
        });
        assert_eq!(
            line,
            "[........................]  0/?  -- rows/s  ETA --  validating"
        );
        let line = progress_line(&Progress {
            status: "completed",
            counts: Counts {
                total: 10,
                completed: 10,
                failed: 0,
            },
            rate: None,
        });
        assert_eq!(
            line,
            "[########################]  10/10  100%  -- rows/s  ETA 0s  completed"
        );
    }

    #[test]
    fn counts_and_summary_come_from_the_batch_object() {
        let b = json!({
            "id": "batch_1", "status": "completed",
            "request_counts": {"total": 12, "completed": 10, "failed": 2},
            "output_file_id": "file-out", "error_file_id": "file-err",
        });
        assert_eq!(
            Counts::of(&b),
            Counts {
                total: 12,
                completed: 10,
                failed: 2
            }
        );
        assert_eq!(
            summary_line(&b, Some(65.0)),
            "batch_1 completed: 12/12 rows, 10 completed, 2 failed in 1m05s; output file-out; errors file-err"
        );
        let b = json!({"id": "batch_2", "status": "cancelled", "output_file_id": null});
        assert_eq!(
            summary_line(&b, None),
            "batch_2 cancelled: 0/0 rows, 0 completed, 0 failed"
        );
        assert!(is_terminal("cancelled") && is_terminal("expired"));
        assert!(!is_terminal("cancelling") && !is_terminal("finalizing"));
    }
}
