//! The `upstream:` and `tokens:` sections' checks: the upstream call and the token estimate.

use crate::config::{ConfigError, TokenConfig, UpstreamConfig, first_failed};

/// Refuses an upstream call that can never be made or never ends, and a token estimate
/// that divides by nothing.
pub fn validate_section(
    upstream: &UpstreamConfig,
    tokens: &TokenConfig,
) -> Result<(), ConfigError> {
    first_failed(&[
        (
            upstream.max_attempts == 0,
            "upstream.max_attempts must be at least 1",
        ),
        (
            upstream.stream_idle_timeout_ms == 0,
            "upstream.stream_idle_timeout_ms must be at least 1",
        ),
        (
            upstream.max_resumptions > 16,
            "upstream.max_resumptions must be at most 16",
        ),
        (
            tokens.chars_per_token.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater),
            "tokens.chars_per_token must be positive",
        ),
    ])
}
