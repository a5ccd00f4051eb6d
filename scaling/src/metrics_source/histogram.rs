//! Quantiles from cumulative histogram buckets, as Prometheus' `histogram_quantile` computes
//! them: find the bucket holding the rank, interpolate linearly inside it.

/// Cumulative buckets `(upper_bound_s, count)` sorted by bound, the last one `+Inf`.
pub type Buckets = Vec<(f64, f64)>;

/// Per-bucket increase between two cumulative snapshots of the same histogram; bounds missing
/// from `older` count from zero (a bucket layout can only grow between scrapes of new pods).
pub fn bucket_delta(newer: &[(f64, f64)], older: &[(f64, f64)]) -> Buckets {
    newer
        .iter()
        .map(|&(le, count)| {
            let before = older
                .iter()
                .find(|(b, _)| *b == le)
                .map_or(0.0, |&(_, c)| c);
            (le, (count - before).max(0.0))
        })
        .collect()
}

/// The `q` quantile (0–1) of a cumulative bucket list; `None` without observations.
/// Values in the `+Inf` bucket report the highest finite bound (Prometheus does the same).
pub fn quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last().map(|&(_, c)| c)?;
    if total.is_nan() || total <= 0.0 || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let rank = q * total;
    let mut lower_bound = 0.0;
    let mut lower_count = 0.0;
    for &(upper_bound, count) in buckets {
        if count >= rank && count > lower_count {
            if upper_bound.is_infinite() {
                return Some(lower_bound);
            }
            let fraction = (rank - lower_count) / (count - lower_count);
            return Some(lower_bound + (upper_bound - lower_bound) * fraction);
        }
        if upper_bound.is_finite() {
            lower_bound = upper_bound;
        }
        lower_count = lower_count.max(count);
    }
    Some(lower_bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

    #[test]
    fn interpolates_inside_the_bucket_holding_the_rank() {
        // 100 observations: 50 ≤ 0.1 s, 40 in (0.1, 0.5], 10 in (0.5, 1].
        let b = vec![(0.1, 50.0), (0.5, 90.0), (1.0, 100.0), (INF, 100.0)];
        // rank 95 is half-way through the (0.5, 1] bucket.
        assert!((quantile(0.95, &b).unwrap_or(0.0) - 0.75).abs() < 1e-9);
        // rank 50 is the top of the first bucket.
        assert!((quantile(0.5, &b).unwrap_or(0.0) - 0.1).abs() < 1e-9);
    }

    #[test]
    fn inf_bucket_reports_the_highest_finite_bound_and_empty_is_none() {
        let b = vec![(0.1, 1.0), (0.5, 2.0), (INF, 10.0)];
        assert_eq!(quantile(0.95, &b), Some(0.5));
        assert_eq!(quantile(0.95, &[(0.1, 0.0), (INF, 0.0)]), None);
        assert_eq!(quantile(0.95, &[]), None);
    }

    #[test]
    fn deltas_isolate_the_window() {
        let older = vec![(0.1, 1000.0), (0.5, 1000.0), (INF, 1000.0)];
        // In the window, 10 new observations all landed in (0.1, 0.5].
        let newer = vec![(0.1, 1000.0), (0.5, 1010.0), (INF, 1010.0)];
        let d = bucket_delta(&newer, &older);
        assert_eq!(d, vec![(0.1, 0.0), (0.5, 10.0), (INF, 10.0)]);
        let p95 = quantile(0.95, &d).unwrap_or(0.0);
        assert!(p95 > 0.1 && p95 <= 0.5, "{p95}");
        // The lifetime p95 would have hidden the slow window entirely.
        assert!(quantile(0.95, &newer).unwrap_or(1.0) <= 0.1);
    }
}
