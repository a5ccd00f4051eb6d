//! Percentiles and per-point summaries: the pure arithmetic of a bench report.

use serde::{Deserialize, Serialize};

/// p50, p95 and p99 of one latency, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
}

impl Percentiles {
    /// Percentiles of `values` (any order); `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        Some(Self {
            p50: percentile(&sorted, 0.50),
            p95: percentile(&sorted, 0.95),
            p99: percentile(&sorted, 0.99),
        })
    }
}

/// The `q` quantile (0–1) of sorted `values`, by linear interpolation between closest ranks
/// (numpy's default), so small samples give stable numbers.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let rank = q.clamp(0.0, 1.0) * (n - 1) as f64;
            let low = rank.floor() as usize;
            let high = rank.ceil() as usize;
            let weight = rank - low as f64;
            sorted[low] * (1.0 - weight) + sorted[high] * weight
        }
    }
}

/// What one request measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Send to first content chunk, in seconds.
    pub ttft_s: f64,
    /// Send to end of stream, in seconds.
    pub e2e_s: f64,
    /// Completion tokens (the server's `usage`, else content chunks).
    pub output_tokens: u64,
    /// Prompt tokens (the server's `usage`; 0 when it sent none).
    pub input_tokens: u64,
}

impl Sample {
    /// Mean time per output token after the first, in seconds; `None` for one-token outputs.
    pub fn tpot_s(&self) -> Option<f64> {
        (self.output_tokens >= 2)
            .then(|| (self.e2e_s - self.ttft_s).max(0.0) / (self.output_tokens - 1) as f64)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let values: Vec<f64> = (1..=100).map(f64::from).rev().collect();
        let p = Percentiles::of(&values).unwrap();
        assert!((p.p50 - 50.5).abs() < 1e-9, "{p:?}");
        assert!((p.p95 - 95.05).abs() < 1e-9, "{p:?}");
        assert!((p.p99 - 99.01).abs() < 1e-9, "{p:?}");
    }

    #[test]
    fn one_value_and_none_and_nan() {
        assert_eq!(
            Percentiles::of(&[2.0]),
            Some(Percentiles {
                p50: 2.0,
                p95: 2.0,
                p99: 2.0
            })
        );
        assert_eq!(Percentiles::of(&[]), None);
        assert_eq!(Percentiles::of(&[f64::NAN, 1.0]).unwrap().p99, 1.0);
    }

    #[test]
    fn tpot_spreads_the_time_after_the_first_token() {
        let s = Sample {
            ttft_s: 0.1,
            e2e_s: 1.1,
            output_tokens: 11,
            input_tokens: 5,
        };
        assert!((s.tpot_s().unwrap() - 0.1).abs() < 1e-12);
        assert_eq!(
            Sample {
                output_tokens: 1,
                ..s
            }
            .tpot_s(),
            None
        );
    }
}
