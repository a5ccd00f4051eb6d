//! The `queue:` section's check: values its type cannot refuse.

use crate::config::{ConfigError, QueueConfig, first_failed};

/// Refuses a queue that holds no one.
pub fn validate_section(queue: &QueueConfig) -> Result<(), ConfigError> {
    first_failed(&[(queue.max_len == 0, "queue.max_len must be at least 1")])
}
