//! Period detection over a series of equally spaced demand levels: the lag at which the
//! series repeats itself, with the evidence that it does.

/// Shortest period looked for, in bins: fewer points per cycle make chance correlations
/// of noise likely.
pub(super) const MIN_LAG_BINS: usize = 12;
/// The two cycles compared must correlate at least this well (Pearson).
const MIN_CORRELATION: f64 = 0.8;
/// And differ, bin by bin, by at most this share of the series' swing on average: a steady
/// ramp correlates with itself one lag later, but every bin is off by the lag's rise.
const MAX_MISMATCH: f64 = 0.15;
/// A swing below this share of the mean level is noise around a flat load: nothing to plan.
const MIN_SWING: f64 = 0.25;
/// At most this share of the compared bins may have no sample.
const MAX_MISSING: f64 = 0.1;
/// Cycles compared at most (more pairs, fewer chance correlations).
const MAX_CYCLES_COMPARED: usize = 3;
/// A whole fraction of the best lag that correlates within this much of it is the period
/// (the best is often a multiple of the true period).
const SHORTER_LAG_SLACK: f64 = 0.05;

/// A detected period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Period {
    /// The period, in bins.
    pub lag: usize,
    /// The correlation of the compared cycles (0–1).
    pub correlation: f64,
}

/// The period of `bins` (levels, NaN for a bin without a sample), comparing the most recent
/// cycles with the ones a lag before; `None` without evidence (fewer than two whole cycles
/// seen, a poor match, or a flat series).
pub(super) fn detect(bins: &[f64]) -> Option<Period> {
    let n = bins.len();
    let scores: Vec<Period> = (MIN_LAG_BINS..=n / 2)
        .filter_map(|lag| score(bins, lag))
        .collect();
    let best = scores
        .iter()
        .copied()
        .max_by(|a, b| a.correlation.total_cmp(&b.correlation))?;
    // The best lag is often a multiple of the period: the shortest whole fraction of it that
    // matches about as well is the period.
    let fraction = (2..=best.lag / MIN_LAG_BINS).rev().find_map(|parts| {
        let lag = best.lag as f64 / parts as f64;
        scores
            .iter()
            .filter(|p| (p.lag as f64 - lag).abs() <= 1.0)
            .filter(|p| p.correlation >= best.correlation - SHORTER_LAG_SLACK)
            .max_by(|a, b| a.correlation.total_cmp(&b.correlation))
            .copied()
    });
    Some(fraction.unwrap_or(best))
}

/// Sums over the compared pairs, in one pass.
#[derive(Default)]
struct Sums {
    count: f64,
    a: f64,
    b: f64,
    ab: f64,
    aa: f64,
    bb: f64,
    mismatch: f64,
    low: f64,
    high: f64,
}

/// The evidence for `lag`: each of the last `m` bins against the bin a lag before it.
fn score(bins: &[f64], lag: usize) -> Option<Period> {
    let n = bins.len();
    let m = (n - lag).min(MAX_CYCLES_COMPARED * lag);
    let mut s = Sums {
        low: f64::INFINITY,
        high: f64::NEG_INFINITY,
        ..Sums::default()
    };
    for i in n - m..n {
        let (a, b) = (bins[i], bins[i - lag]);
        if !(a.is_finite() && b.is_finite()) {
            continue;
        }
        s.count += 1.0;
        s.a += a;
        s.b += b;
        s.ab += a * b;
        s.aa += a * a;
        s.bb += b * b;
        s.mismatch += (a - b).abs();
        s.low = s.low.min(a).min(b);
        s.high = s.high.max(a).max(b);
    }
    if s.count < (1.0 - MAX_MISSING) * m as f64 || s.count < MIN_LAG_BINS as f64 {
        return None;
    }
    let swing = s.high - s.low;
    let mean = (s.a + s.b) / (2.0 * s.count);
    if !(swing > 0.0 && swing >= MIN_SWING * mean) || s.mismatch / s.count / swing > MAX_MISMATCH {
        return None;
    }
    // Pearson's correlation of the pairs.
    let cov = s.ab - s.a * s.b / s.count;
    let var_a = s.aa - s.a * s.a / s.count;
    let var_b = s.bb - s.b * s.b / s.count;
    let denominator = (var_a * var_b).sqrt();
    let correlation = (denominator > 0.0).then(|| cov / denominator)?;
    (correlation >= MIN_CORRELATION).then_some(Period { lag, correlation })
}
