//! Summary statistics of benchmark timings.

/// Median, 10th and 90th percentile of a set of samples (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// 50th percentile (mean of the two middle samples for an even count).
    pub median: f64,
    /// 10th percentile (linear interpolation between closest ranks).
    pub p10: f64,
    /// 90th percentile (linear interpolation between closest ranks).
    pub p90: f64,
}

/// The `q`-quantile (0..=1) of sorted samples, interpolating linearly between closest ranks
/// (numpy's default), so the median of an even count is the mean of the middle two.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Summarises `samples`; `None` when there are none.
pub fn summarize(samples: &[f64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    Some(Summary {
        median: quantile(&sorted, 0.5),
        p10: quantile(&sorted, 0.1),
        p90: quantile(&sorted, 0.9),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_has_no_summary() {
        assert_eq!(summarize(&[]), None);
    }

    #[test]
    fn single_sample_is_every_percentile() {
        let s = summarize(&[4.5]).unwrap();
        assert_eq!((s.median, s.p10, s.p90), (4.5, 4.5, 4.5));
    }

    #[test]
    fn odd_and_even_counts_unsorted() {
        assert_eq!(summarize(&[3.0, 1.0, 2.0]).unwrap().median, 2.0);
        assert_eq!(summarize(&[4.0, 1.0, 3.0, 2.0]).unwrap().median, 2.5);
    }

    #[test]
    fn percentiles_interpolate_like_numpy() {
        // numpy.percentile(range(11), [10, 90]) == [1, 9]; of 1..=10 → [1.9, 9.1].
        let s = summarize(&(0..=10).map(f64::from).collect::<Vec<_>>()).unwrap();
        assert_eq!((s.p10, s.median, s.p90), (1.0, 5.0, 9.0));
        let s = summarize(&(1..=10).map(f64::from).collect::<Vec<_>>()).unwrap();
        assert!((s.p10 - 1.9).abs() < 1e-12 && (s.p90 - 9.1).abs() < 1e-12);
    }
}
