//! `ColdStart`: how long a model at zero replicas keeps its first requests waiting.

use std::time::Duration;

/// What discovery knows of how long a model at zero replicas keeps its first requests
/// waiting: they are held for the cold start plus the TTFT SLO (scale from zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColdStart {
    /// Time to a first ready replica, when measured; `None`: the configured expectation.
    pub expected: Option<Duration>,
    /// The model's p95 time-to-first-token target.
    pub ttft_slo: Duration,
}

impl ColdStart {
    /// How long a request without its own deadline waits for a first replica.
    pub fn hold(&self, configured_cold_start: Duration) -> Duration {
        self.expected.unwrap_or(configured_cold_start) + self.ttft_slo
    }
}
