//! What a row must look like before either database will take it. Rows are
//! written in batches, so one row the database refuses would sink its whole
//! batch with it; the writer therefore makes every row storable first, off the
//! request path, the same way on both backends:
//!
//! - Postgres TEXT cannot hold NUL, so NUL becomes U+FFFD in every string.
//! - An index entry is limited (Postgres btree: about 2.7 KB), and the indexed
//!   ids may come from clients (an unknown model name, say). An id longer than
//!   [`MAX_KEY_BYTES`] is stored as its prefix plus the SHA-256 of the whole id:
//!   still unique, still readable, and looked up the same way ([`stored_key`]).
//! - SQLite stores NaN as NULL, so a non-finite timing is stored as NULL (and a
//!   non-finite `e2e_ms`, which is NOT NULL, as 0).
//! - Both keep timestamps to the microsecond; finer digits are truncated.

use std::borrow::Cow;

use chrono::{DateTime, SubsecRound, Utc};
use sha2::{Digest, Sha256};

use super::RequestRecord;

/// Longest indexed id (`request_id`, `deployment_id`, `revision_id`) stored as
/// given, in bytes. Two of them side by side stay well inside one index entry.
pub const MAX_KEY_BYTES: usize = 512;

/// `~` and 64 hex digits after the kept prefix of an over-long id.
const DIGEST_SUFFIX: usize = 1 + 64;

/// The form in which an indexed id is stored and looked up: the id itself when it
/// is at most [`MAX_KEY_BYTES`] bytes without NUL; otherwise NULs become U+FFFD and
/// an over-long id becomes `prefix~sha256hex`, at most [`MAX_KEY_BYTES`] bytes.
pub fn stored_key(id: &str) -> Cow<'_, str> {
    let id = stored_text(id);
    if id.len() <= MAX_KEY_BYTES {
        return id;
    }
    let digest = Sha256::digest(id.as_bytes());
    let mut end = MAX_KEY_BYTES - DIGEST_SUFFIX;
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}~{}", &id[..end], hex::encode(digest)))
}

/// Any string without NUL, which Postgres TEXT cannot hold.
pub(crate) fn stored_text(s: &str) -> Cow<'_, str> {
    if s.contains('\0') {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// A time bound or stamp at the precision both backends keep.
pub(crate) fn stored_time(t: DateTime<Utc>) -> DateTime<Utc> {
    t.trunc_subsecs(6)
}

/// Makes `r` storable on both backends; allocates only for strings it changes.
pub(crate) fn make_storable(r: &mut RequestRecord) {
    fn key(s: &mut String) {
        if let Cow::Owned(k) = stored_key(s) {
            *s = k;
        }
    }
    fn text(s: &mut String) {
        if let Cow::Owned(t) = stored_text(s) {
            *s = t;
        }
    }
    key(&mut r.request_id);
    key(&mut r.deployment_id);
    if let Some(s) = r.revision_id.as_mut() {
        key(s);
    }
    for s in [&mut r.tenant, &mut r.lane, &mut r.endpoint] {
        text(s);
    }
    for s in [&mut r.executor_id, &mut r.rollout_id, &mut r.finish_reason]
        .into_iter()
        .flatten()
    {
        text(s);
    }
    for ms in [
        &mut r.queue_ms,
        &mut r.prefill_ms,
        &mut r.ttft_ms,
        &mut r.decode_ms,
    ] {
        *ms = ms.filter(|v| v.is_finite());
    }
    if !r.e2e_ms.is_finite() {
        r.e2e_ms = 0.0;
    }
    r.received_at = stored_time(r.received_at);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_ids_are_stored_as_given() {
        assert!(matches!(stored_key("req_1 'quoted' ☃"), Cow::Borrowed(_)));
        let exact = "x".repeat(MAX_KEY_BYTES);
        assert_eq!(stored_key(&exact), exact);
    }

    #[test]
    fn long_ids_keep_a_prefix_and_a_digest_and_stay_distinct() {
        let a = "é".repeat(5_000);
        let b = format!("{a}!");
        let (ka, kb) = (stored_key(&a), stored_key(&b));
        assert!(ka.len() <= MAX_KEY_BYTES && kb.len() <= MAX_KEY_BYTES);
        assert!(ka.starts_with("éé") && ka.contains('~'));
        assert_ne!(ka, kb);
        assert_eq!(stored_key(&a), ka, "the same id always maps the same way");
    }

    #[test]
    fn nul_becomes_replacement_character() {
        assert_eq!(stored_text("a\0b"), "a\u{FFFD}b");
        assert_eq!(stored_key("a\0b"), "a\u{FFFD}b");
    }
}
