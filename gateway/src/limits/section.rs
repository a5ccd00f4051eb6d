//! The `limits:` section's check: a timeout, and one way to reach Redis when it is the store.

use serde_saphyr::Spanned;

use crate::config::{ConfigError, LimitsStoreConfig, StoreKind, first_failed};

/// Refuses a zero store timeout, then a store that cannot be reached: see [`limits_store`].
pub fn validate_section(limits: &LimitsStoreConfig) -> Result<(), ConfigError> {
    first_failed(&[(
        limits.timeout_ms == 0,
        "limits.timeout_ms must be at least 1",
    )])?;
    limits_store(limits)
}

/// Checks the limits store: Redis settings only with `store: redis`, and then exactly one
/// way to reach it, with URLs Redis clients understand.
fn limits_store(limits: &LimitsStoreConfig) -> Result<(), ConfigError> {
    let sentinel_urls = limits.redis_sentinel.iter().flat_map(|s| &s.urls);
    let urls: Vec<&Spanned<String>> = limits
        .redis_url
        .iter()
        .chain(&limits.redis_cluster_urls)
        .chain(sentinel_urls)
        .collect();
    let ways = usize::from(limits.redis_url.is_some())
        + usize::from(!limits.redis_cluster_urls.is_empty())
        + usize::from(limits.redis_sentinel.is_some());
    match limits.store {
        StoreKind::Memory if ways > 0 => Err(ConfigError::invalid_at(
            urls.first().map_or(0, |u| u.referenced.line()),
            "Redis settings are given but `limits.store` is `memory`: set `store: redis`",
        )),
        StoreKind::Redis if ways != 1 => Err(ConfigError::invalid_at(
            0,
            "`limits.store: redis` needs exactly one of `redis_url`, `redis_cluster_urls` \
             or `redis_sentinel`",
        )),
        _ => {
            for url in urls {
                let scheme_ok = ["redis://", "rediss://"]
                    .iter()
                    .any(|scheme| url.value.starts_with(scheme));
                if !scheme_ok {
                    let reason = format!(
                        "`{}` is not a Redis URL (redis://HOST:PORT/DB, or rediss:// for TLS)",
                        url.value
                    );
                    return Err(ConfigError::invalid(url, reason));
                }
            }
            if let Some(sentinel) = &limits.redis_sentinel
                && (sentinel.master.is_empty() || sentinel.urls.is_empty())
            {
                return Err(ConfigError::invalid_at(
                    0,
                    "`limits.redis_sentinel` needs a `master` name and at least one URL",
                ));
            }
            Ok(())
        }
    }
}
