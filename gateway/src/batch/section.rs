//! The `batch:` section's check: fill, lease, sizes, where jobs and files are kept.

use crate::config::{
    BatchConfig, BatchStateKind, ConfigError, LimitsStoreConfig, StoreKind, first_failed,
    parse_location,
};

/// Refuses batch settings that cannot run; `limits` because jobs kept in Redis use its Redis.
pub fn validate_section(
    batch: &BatchConfig,
    limits: &LimitsStoreConfig,
) -> Result<(), ConfigError> {
    first_failed(&[
        (
            !(batch.max_fill > 0.0 && batch.max_fill <= 1.0),
            "batch.max_fill must be above 0 and at most 1",
        ),
        (
            batch.lease_ms < 1000
                || batch.max_concurrency == 0
                || batch.max_file_bytes == 0
                || batch.max_lines == 0
                || batch.max_line_bytes == 0,
            "batch: lease_ms must be at least 1000, and max_concurrency, max_file_bytes, \
             max_lines and max_line_bytes at least 1",
        ),
        (
            batch.upload_timeout_ms < 1000,
            "batch.upload_timeout_ms must be at least 1000",
        ),
        (
            batch.state == BatchStateKind::Redis && limits.store != StoreKind::Redis,
            "batch.state: redis keeps batch jobs in the Redis of `limits:`, which needs \
             limits.store: redis",
        ),
        (
            batch
                .objects
                .as_deref()
                .is_some_and(|o| parse_location(o).is_err()),
            "batch.objects must be `s3://BUCKET[/PREFIX]` or `file:///ABSOLUTE/PATH`",
        ),
    ])
}
