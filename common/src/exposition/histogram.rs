//! The one histogram type: fixed bucket bounds, counted lock-free (the hot path writes, a
//! scrape reads a [`HistogramSnapshot`]).

use std::sync::atomic::{AtomicU64, Ordering};

/// How a bucket's `le` label spells its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeFormat {
    /// `1.0`, `0.5`: as vLLM (and `prometheus-client`) write it, so the engine's buckets
    /// match vLLM's on dashboards.
    Decimal,
    /// `1`, `0.5`: the shortest spelling, as the gateway has always written it.
    Shortest,
}

impl LeFormat {
    /// The `le` label of `bound`.
    pub fn label(self, bound: f64) -> String {
        match self {
            Self::Decimal => format!("{bound:?}"),
            Self::Shortest => bound.to_string(),
        }
    }
}

/// Counts observations per bucket (not cumulative; made cumulative by [`Self::snapshot`]).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    le: LeFormat,
    /// One per bound, plus `+Inf`.
    counts: Vec<AtomicU64>,
    sum_bits: AtomicU64,
}

impl Histogram {
    /// An empty histogram with upper bounds `bounds` (sorted; `+Inf` implied).
    pub fn new(bounds: &'static [f64], le: LeFormat) -> Self {
        Self {
            bounds,
            le,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Records one value (in the first bucket whose bound is at least the value).
    pub fn observe(&self, value: f64) {
        let index = self.bounds.partition_point(|&bound| bound < value);
        self.counts[index].fetch_add(1, Ordering::Relaxed);
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
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The sum of the observations so far.
    pub fn sum(&self) -> f64 {
        f64::from_bits(self.sum_bits.load(Ordering::Relaxed))
    }

    /// The counts now, cumulative as exported.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let cumulative = self
            .counts
            .iter()
            .map(|c| {
                total += c.load(Ordering::Relaxed);
                total
            })
            .collect();
        HistogramSnapshot {
            bounds: self.bounds,
            le: self.le,
            cumulative,
            sum: self.sum(),
        }
    }
}

/// A histogram's counts at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// The finite upper bounds.
    pub bounds: &'static [f64],
    /// How the `le` labels spell them.
    pub le: LeFormat,
    /// Observations at or under each bound, then all of them (`+Inf`).
    pub cumulative: Vec<u64>,
    /// The sum of the observations.
    pub sum: f64,
}

impl HistogramSnapshot {
    /// Every observation.
    pub fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    /// The finite bounds' `le` labels.
    pub fn le_labels(&self) -> Vec<String> {
        self.bounds.iter().map(|&b| self.le.label(b)).collect()
    }

    /// `(bound, cumulative count)` with `+Inf` last, as [`super::quantile`] reads them.
    pub fn buckets(&self) -> Vec<(f64, f64)> {
        let bounds = self.bounds.iter().copied().chain([f64::INFINITY]);
        bounds
            .zip(&self.cumulative)
            .map(|(bound, &count)| (bound, count as f64))
            .collect()
    }
}
