//! Cumulative histogram buckets read from scrapes, and the increase between two scrapes; the
//! quantile over them is the one in `tokenscale_common::exposition` (Prometheus'
//! `histogram_quantile`), beside the histogram type the engine and gateway export.

pub use tokenscale_common::exposition::quantile;

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

#[cfg(test)]
mod tests {
    use super::*;

    const INF: f64 = f64::INFINITY;

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
