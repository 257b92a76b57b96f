//! The per-revision figures a rollout gate compares (DESIGN section 7: TTFT p99,
//! error rate, overload rate), and exactly how each is counted.
//!
//! An overload is the service saying "not now" ([`ErrorCode::is_overload`]): a rollout
//! should not be blamed for the fleet being full, so overloads are counted apart
//! from errors. An error is a 5xx that is not an overload, or a stream that
//! started (2xx) and then failed with an error code. Client mistakes (4xx other
//! than the overload codes) are neither.

use serde::{Deserialize, Serialize};
use stoker_schemas::codes::ErrorCode;

/// The codes [`ErrorCode::is_overload`] picks, as an SQL list:
/// `('server_overloaded', ...)`. Catalogue codes are snake_case, so quoting
/// them is all the escaping they need.
pub(crate) fn overload_sql() -> String {
    let quoted: Vec<String> = ErrorCode::ALL
        .iter()
        .filter(|c| c.is_overload())
        .map(|c| format!("'{c}'"))
        .collect();
    format!("({})", quoted.join(", "))
}

/// One revision's requests over a window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RevisionFigures {
    pub requests: u64,
    /// 5xx other than overloads, plus 2xx streams that ended with an error code.
    pub errors: u64,
    /// Rows whose `error_code` is an overload ([`ErrorCode::is_overload`]),
    /// whatever the status.
    pub overloads: u64,
    /// Nearest-rank p99 over the rows that have a TTFT: the `ceil(0.99 n)`-th
    /// smallest value (for TTFTs 1..=100, 99). `None` when no row has one.
    pub ttft_p99_ms: Option<f64>,
    /// `errors / requests`, 0 when there were no requests.
    pub error_rate: f64,
    /// `overloads / requests`, 0 when there were no requests.
    pub overload_rate: f64,
}

/// What one aggregate query returns.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Counts {
    pub requests: u64,
    pub errors: u64,
    pub overloads: u64,
    pub with_ttft: u64,
}

impl RevisionFigures {
    pub(crate) fn new(c: Counts, ttft_p99_ms: Option<f64>) -> Self {
        let rate = |n: u64| {
            if c.requests == 0 {
                0.0
            } else {
                n as f64 / c.requests as f64
            }
        };
        RevisionFigures {
            requests: c.requests,
            errors: c.errors,
            overloads: c.overloads,
            ttft_p99_ms,
            error_rate: rate(c.errors),
            overload_rate: rate(c.overloads),
        }
    }
}

/// The 1-based nearest rank of p99 among `n` values, `ceil(99 n / 100)`, in
/// integers so no float rounding moves it.
pub(crate) fn p99_rank(n: u64) -> Option<u64> {
    (n > 0).then(|| (99 * n).div_ceil(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overload_sql_lists_exactly_the_overload_codes() {
        assert_eq!(
            overload_sql(),
            "('server_overloaded', 'deadline_infeasible', 'not_ready', 'tenant_quota_exceeded')"
        );
    }

    #[test]
    fn p99_is_the_nearest_rank() {
        assert_eq!(p99_rank(0), None);
        assert_eq!(p99_rank(1), Some(1));
        assert_eq!(p99_rank(50), Some(50));
        assert_eq!(p99_rank(100), Some(99));
        assert_eq!(p99_rank(101), Some(100));
        assert_eq!(p99_rank(1_000), Some(990));
    }
}
