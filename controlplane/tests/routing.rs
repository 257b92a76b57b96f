//! Rollout routing: the split matches the percentage, a key stays put, raising
//! the percentage only moves keys to the new revision, each rollout draws its own
//! cohort, and the hash is pinned so it can never change silently.

use std::collections::BTreeSet;

use stoker_controlplane::routing::{BUCKETS, RolloutRoute, bucket, route, routing_key};

const DEPLOYMENT: &str = "dep-chat";
const A: &str = "rev-a";
const B: &str = "rev-b";

fn keys() -> Vec<String> {
    (0..10_000).map(|i| format!("user-{i}")).collect()
}

fn rollout(id: &str, percent: u8) -> Option<RolloutRoute<'_>> {
    Some(RolloutRoute {
        rollout_id: id,
        to_revision: B,
        percent,
    })
}

/// The keys that `rollout` sends to B.
fn cohort(keys: &[String], rollout_id: &str, percent: u8) -> BTreeSet<String> {
    keys.iter()
        .filter(|k| route(DEPLOYMENT, A, rollout(rollout_id, percent), k) == B)
        .cloned()
        .collect()
}

#[test]
fn ten_thousand_keys_split_within_one_point_of_the_target() {
    let keys = keys();
    for percent in [5u8, 25, 50, 75] {
        let on_b = cohort(&keys, "ro-1", percent).len();
        let share = on_b as f64 * 100.0 / keys.len() as f64;
        assert!(
            (share - f64::from(percent)).abs() <= 1.0,
            "{percent} %: {share:.2} % of keys went to B"
        );
    }
}

#[test]
fn zero_and_hundred_percent_are_absolute() {
    for k in keys().iter().take(2_000) {
        assert_eq!(route(DEPLOYMENT, A, rollout("ro-1", 0), k), A);
        assert_eq!(route(DEPLOYMENT, A, rollout("ro-1", 100), k), B);
        assert_eq!(route(DEPLOYMENT, A, rollout("ro-1", 255), k), B);
        assert_eq!(route(DEPLOYMENT, A, None, k), A);
    }
}

#[test]
fn a_key_routes_the_same_way_on_every_call() {
    for k in keys().iter().take(1_000) {
        let first = route(DEPLOYMENT, A, rollout("ro-1", 50), k);
        for _ in 0..5 {
            assert_eq!(route(DEPLOYMENT, A, rollout("ro-1", 50), k), first);
        }
    }
}

#[test]
fn raising_the_percentage_only_moves_keys_to_the_new_revision() {
    let keys = keys();
    let mut previous = BTreeSet::new();
    for percent in [1u8, 5, 25, 50, 75, 99, 100] {
        let now = cohort(&keys, "ro-1", percent);
        assert!(
            previous.is_subset(&now),
            "a key left B when the rollout went to {percent} %"
        );
        previous = now;
    }
    assert_eq!(previous.len(), keys.len());
}

#[test]
fn a_different_rollout_draws_a_different_cohort() {
    let keys = keys();
    let first = cohort(&keys, "ro-1", 25);
    let second = cohort(&keys, "ro-2", 25);
    assert_ne!(first, second);
    // Independent draws overlap by about a quarter, nowhere near all of them.
    let shared = first.intersection(&second).count();
    assert!(
        shared < first.len() / 2,
        "{shared} of {} keys shared",
        first.len()
    );
    // The deployment id is part of the salt too.
    let elsewhere: BTreeSet<_> = keys
        .iter()
        .filter(|k| route("dep-other", A, rollout("ro-1", 25), k) == B)
        .cloned()
        .collect();
    assert_ne!(first, elsewhere);
}

#[test]
fn the_salt_is_the_deployment_id_followed_by_the_rollout_id() {
    for k in keys().iter().take(1_000) {
        let on_b = bucket(&format!("{DEPLOYMENT}ro-1"), k) < 30 * 100;
        assert_eq!(route(DEPLOYMENT, A, rollout("ro-1", 30), k) == B, on_b);
    }
}

/// Pinned against an independent SHA-256 (Python's hashlib):
/// `int.from_bytes(sha256(salt + b"\0" + key).digest()[:8], "big") % 10000`.
/// If this fails, users would silently change revisions mid-rollout on upgrade.
#[test]
fn bucket_known_answers() {
    assert_eq!(bucket("d1ro1", "alice"), 3233);
    assert_eq!(bucket("d1ro1", "bob"), 2359);
    assert_eq!(bucket("d1ro2", "alice"), 8831);
    assert_eq!(bucket("", ""), 3192);
    assert_eq!(
        bucket("dep-7rollout-3", "req_00000000000000000000000000000000"),
        4740
    );
    assert_eq!(bucket("d1ro1", "☃ snow"), 906);
}

#[test]
fn buckets_stay_in_range() {
    assert!(keys().iter().all(|k| bucket("salt", k) < BUCKETS));
}

#[test]
fn the_key_is_the_user_else_the_request_id() {
    assert_eq!(routing_key(Some("alice"), "req_1"), "alice");
    assert_eq!(routing_key(None, "req_1"), "req_1");
    assert_eq!(routing_key(Some(""), "req_1"), "req_1");
}
