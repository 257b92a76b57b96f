//! Rollout routing: which revision of a deployment serves one request while a
//! rollout from A to B is under way (DESIGN section 7).
//!
//! Each key (the request's `user`, else its request id; see [`routing_key`]) is
//! hashed into one of 10,000 buckets, and a rollout at `p` % sends buckets below
//! `p × 100` to B. The hash is SHA-256, fixed by a known-answer test, so every API
//! process, platform and Rust version puts a user in the same bucket (std's
//! `DefaultHasher` promises none of that). Consequences:
//!
//! - sticky: a user stays on one revision while the percentage holds;
//! - monotonic: raising the percentage only moves users from A to B;
//! - salted by deployment and rollout id, so each rollout draws a fresh cohort
//!   and the same users are not always the first to meet a new revision.

use sha2::{Digest, Sha256};

/// Number of buckets: one bucket is 0.01 %.
pub const BUCKETS: u32 = 10_000;

/// An active rollout as the router needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RolloutRoute<'a> {
    pub rollout_id: &'a str,
    pub to_revision: &'a str,
    /// Share of keys sent to `to_revision`, 0..=100 (more counts as 100).
    pub percent: u8,
}

/// The key's bucket in `0..10_000` under `salt`: the first 8 bytes of
/// `SHA-256(salt || 0x00 || key)`, big-endian, modulo 10,000.
pub fn bucket(salt: &str, key: &str) -> u32 {
    bucket_of(&[salt], key)
}

fn bucket_of(salt_parts: &[&str], key: &str) -> u32 {
    let mut h = Sha256::new();
    for part in salt_parts {
        h.update(part.as_bytes());
    }
    h.update([0u8]);
    h.update(key.as_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(BUCKETS)) as u32
}

/// The revision that serves the request with `key`: `serving_revision` unless a
/// rollout is active and the key's bucket (salted with the deployment id followed
/// by the rollout id) is below `percent × 100`.
pub fn route<'a>(
    deployment_id: &str,
    serving_revision: &'a str,
    rollout: Option<RolloutRoute<'a>>,
    key: &str,
) -> &'a str {
    let Some(r) = rollout else {
        return serving_revision;
    };
    match r.percent {
        0 => serving_revision,
        100.. => r.to_revision,
        p => {
            // Hashing the parts in turn is hashing their concatenation, without
            // building it.
            if bucket_of(&[deployment_id, r.rollout_id], key) < u32::from(p) * 100 {
                r.to_revision
            } else {
                serving_revision
            }
        }
    }
}

/// The routing key of a request: its `user` when given and non-empty (so one
/// end user sees one revision), else its request id.
pub fn routing_key<'a>(user: Option<&'a str>, request_id: &'a str) -> &'a str {
    user.filter(|u| !u.is_empty()).unwrap_or(request_id)
}
