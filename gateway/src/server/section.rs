//! The listeners' settings' check: body size, client timeouts, `bounds:` and `http2:`.

use crate::config::{Config, ConfigError, first_failed};

/// Refuses listener settings that would refuse every request or never time a client out.
pub fn validate_section(config: &Config) -> Result<(), ConfigError> {
    let (bounds, http2) = (&config.bounds, &config.http2);
    first_failed(&[
        (
            config.max_body_bytes < 1024,
            "max_body_bytes must be at least 1024",
        ),
        (
            config.reload_interval_ms == 0,
            "reload_interval_ms must be at least 1",
        ),
        (
            config.client_header_timeout_ms == 0,
            "client_header_timeout_ms must be at least 1",
        ),
        (
            bounds.max_connections == 0
                || bounds.max_in_flight == 0
                || bounds.max_buffered_body_bytes < config.max_body_bytes,
            "bounds: max_connections and max_in_flight must be at least 1, and \
             max_buffered_body_bytes at least max_body_bytes",
        ),
        (
            bounds.max_connections_per_client == 0
                || bounds.max_in_flight_per_client == 0
                || config.stream_write_timeout_ms == 0,
            "bounds.max_connections_per_client, bounds.max_in_flight_per_client and \
             stream_write_timeout_ms must be at least 1",
        ),
        (
            http2.max_concurrent_streams == 0
                || config.client_idle_timeout_ms == 0
                || http2.keep_alive_interval_ms == 0
                || http2.keep_alive_timeout_ms == 0
                || http2.max_header_list_bytes < 1024,
            "client_idle_timeout_ms and every http2 setting must be positive \
             (max_header_list_bytes at least 1024)",
        ),
    ])
}
