//! Timestamps as SQLite stores them: fixed-width RFC 3339 UTC with microseconds, so
//! comparing the text compares the instants (Postgres has a real TIMESTAMPTZ).

use chrono::{DateTime, SecondsFormat, SubsecRound, Utc};

/// Now, truncated to the microsecond precision both backends keep.
pub(crate) fn now_micros() -> DateTime<Utc> {
    Utc::now().trunc_subsecs(6)
}

pub(crate) fn to_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

pub(crate) fn from_text(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}
