//! How property tests choose their seed and case count, in one place.
//!
//! The suite must give the same answer on every run: a property test that
//! draws a fresh seed each time lets a submission pass or fail CI by chance.
//! So every property test runs from [`DEFAULT_SEED`] unless told otherwise,
//! and the failures found anywhere are committed as regression cases
//! (`proptest-regressions/` beside each suite) that every run replays first.
//! Exploration with fresh seeds is `scripts/fuzz.sh`, which sets
//! [`SEED_ENV`] to `random` (or a number, to replay one run) and
//! [`CASES_ENV`] to a larger count.
//!
//! This module names no proptest type, so the crate that every binary may
//! link stays free of it; each suite builds its `ProptestConfig` from
//! [`seed`] and [`cases`].

/// The environment variable that picks the seed: unset for [`DEFAULT_SEED`],
/// `random` for a fresh one per run, or a number.
pub const SEED_ENV: &str = "STOKER_PROPTEST_SEED";

/// The environment variable that overrides each suite's case count.
pub const CASES_ENV: &str = "STOKER_PROPTEST_CASES";

/// The seed CI runs from.
pub const DEFAULT_SEED: u64 = 0x5704_e12c_0ffe_e000;

/// The seed to run from: `Some(n)` for a fixed one, `None` for a fresh one.
///
/// # Panics
/// When [`SEED_ENV`] is set to something that is neither `random` nor a
/// number, so a typo never silently turns into the default.
pub fn seed() -> Option<u64> {
    match std::env::var(SEED_ENV) {
        Err(_) => Some(DEFAULT_SEED),
        Ok(v) if v == "random" => None,
        Ok(v) => Some(v.parse().unwrap_or_else(|_| {
            panic!("{SEED_ENV}={v:?}: expected `random` or an unsigned integer")
        })),
    }
}

/// The number of cases to run: [`CASES_ENV`] when set, else `default`.
///
/// # Panics
/// When [`CASES_ENV`] is set to something that is not a number.
pub fn cases(default: u32) -> u32 {
    match std::env::var(CASES_ENV) {
        Err(_) => default,
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{CASES_ENV}={v:?}: expected an unsigned integer")),
    }
}
