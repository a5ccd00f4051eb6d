//! A lock-free histogram with fixed bucket bounds, rendered in Prometheus text.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts observations per bucket (non-cumulative; made cumulative when rendered).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_bits: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    /// An empty histogram with upper bounds `bounds` (sorted; `+Inf` implied).
    pub fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_bits: AtomicU64::new(0f64.to_bits()),
            count: AtomicU64::new(0),
        }
    }

    /// Records one value.
    pub fn observe(&self, value: f64) {
        let index = self.bounds.partition_point(|&bound| bound < value);
        self.counts[index].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        let mut current = self.sum_bits.load(Ordering::Relaxed);
        loop {
            let next = (f64::from_bits(current) + value).to_bits();
            match self.sum_bits.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The sum of the observations so far.
    pub fn sum(&self) -> f64 {
        f64::from_bits(self.sum_bits.load(Ordering::Relaxed))
    }

    /// Writes `name_bucket{labels,le=..}`, `name_sum` and `name_count` lines.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, bound) in self.bounds.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += self.counts[self.bounds.len()].load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
        );
        let sum = f64::from_bits(self.sum_bits.load(Ordering::Relaxed));
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_with_le_inclusive() {
        static BOUNDS: &[f64] = &[0.1, 1.0];
        let h = Histogram::new(BOUNDS);
        for v in [0.05, 0.1, 0.5, 3.0] {
            h.observe(v);
        }
        let mut out = String::new();
        h.render(&mut out, "x", "model_name=\"m\"");
        assert!(
            out.contains("x_bucket{model_name=\"m\",le=\"0.1\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{model_name=\"m\",le=\"1\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("x_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"),
            "{out}"
        );
        assert!(out.contains("x_sum{model_name=\"m\"} 3.65\n"), "{out}");
        assert_eq!(h.count(), 4);
    }
}
