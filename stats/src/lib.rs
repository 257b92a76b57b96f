//! One percentile definition for every test, benchmark and the load
//! generator: linear interpolation between closest ranks (numpy's default),
//! the one `stoker bench` reports, so figures compare across tools and can
//! be checked by hand against the raw times. A crate of its own, with no
//! dependencies, so the `stoker` binary (which links the load generator)
//! links no test-support code for it; `stoker-test-support` re-exports it.

/// The `q` quantile (`0..=1`, clamped) of values sorted ascending, linearly
/// interpolated between the two closest ranks; `NaN` when there are none.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    debug_assert!(
        sorted.is_sorted_by(|a, b| a.total_cmp(b).is_le()),
        "percentile wants sorted values"
    );
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let rank = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let lo = rank.floor() as usize;
            let hi = rank.ceil() as usize;
            sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo as f64)
        }
    }
}

/// The `q` [`percentile`] of values in any order (sorts them first).
pub fn percentile_of(values: &mut [f64], q: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile(values, q)
}

/// The 50th [`percentile`] of unsorted values (sorts them first).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    percentile(&values, 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_like_numpy() {
        // numpy.percentile([1, 2, 3, 4], [0, 25, 50, 90, 100]) = 1, 1.75, 2.5, 3.7, 4
        let xs = [1.0, 2.0, 3.0, 4.0];
        for (q, want) in [(0.0, 1.0), (0.25, 1.75), (0.5, 2.5), (0.9, 3.7), (1.0, 4.0)] {
            let got = percentile(&xs, q);
            assert!((got - want).abs() < 1e-12, "q={q}: {got} != {want}");
        }
    }

    #[test]
    fn ranks_land_on_values_exactly() {
        let xs: Vec<f64> = (0..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 0.99), 99.0);
        assert_eq!(percentile(&xs, 0.5), 50.0);
    }

    #[test]
    fn edge_cases() {
        assert!(percentile(&[], 0.5).is_nan());
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        // q outside 0..=1 is clamped.
        assert_eq!(percentile(&[1.0, 2.0], -1.0), 1.0);
        assert_eq!(percentile(&[1.0, 2.0], 2.0), 2.0);
    }

    #[test]
    fn percentile_of_sorts_first() {
        let mut xs = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(percentile_of(&mut xs, 0.25), 1.75);
        assert_eq!(xs, [1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn median_sorts_and_averages_the_middle_pair() {
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert!(median(Vec::new()).is_nan());
    }
}
