//! The one quantile function: Prometheus' `histogram_quantile` over cumulative buckets.

/// The `q` quantile (0–1) of cumulative buckets `(upper_bound, count)` sorted by bound, the
/// last one `+Inf`: the bucket holding the rank, interpolated linearly inside it. `None`
/// without observations or with `q` outside 0–1. Values in the `+Inf` bucket report the
/// highest finite bound (Prometheus does the same).
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
