//! The `health:` section's check: a probe interval that keeps load fresh.

use crate::config::{ConfigError, HealthConfig, first_failed};

/// Refuses a probe interval outside 1..=1000 ms, or a staleness shorter than it.
pub fn validate_section(health: &HealthConfig) -> Result<(), ConfigError> {
    first_failed(&[
        (
            health.interval_ms == 0 || health.interval_ms > 1000,
            "health.interval_ms must be in 1..=1000",
        ),
        (
            health.stale_after_ms < health.interval_ms,
            "health.stale_after_ms must be ≥ health.interval_ms",
        ),
    ])
}
