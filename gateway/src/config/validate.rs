//! Checks on configuration values that YAML types cannot express, each reported with its line.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_saphyr::Spanned;

use super::{BatchStateKind, Config, Discovery, LimitsStoreConfig, StoreKind, TenantConfig};

/// A configuration that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The YAML is malformed, has an unknown field or a value of the wrong type.
    #[error("{file}{message}")]
    Parse {
        /// `path: ` prefix once known.
        file: String,
        /// The parser's message (it names the line and column).
        message: String,
    },
    /// A value is of the right type but not acceptable.
    #[error("{file}line {line}: {reason}")]
    Invalid {
        /// `path: ` prefix once known.
        file: String,
        /// 1-based line of the value.
        line: u64,
        /// Why it is refused.
        reason: String,
    },
}

impl ConfigError {
    pub(super) fn parse(error: serde_saphyr::Error) -> Self {
        Self::Parse {
            file: String::new(),
            message: error.to_string(),
        }
    }

    fn invalid<T>(at: &Spanned<T>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            file: String::new(),
            line: at.referenced.line(),
            reason: reason.into(),
        }
    }

    pub(super) fn invalid_route(at: &Spanned<String>, reason: String) -> Self {
        Self::invalid(at, reason)
    }

    fn invalid_at(line: u64, reason: impl Into<String>) -> Self {
        Self::Invalid {
            file: String::new(),
            line,
            reason: reason.into(),
        }
    }

    /// Prefixes the message with the file it came from.
    pub(super) fn in_file(self, path: &Path) -> Self {
        let prefix = format!("{}: ", path.display());
        match self {
            Self::Parse { message, .. } => Self::Parse {
                file: prefix,
                message,
            },
            Self::Invalid { line, reason, .. } => Self::Invalid {
                file: prefix,
                line,
                reason,
            },
            read @ Self::Read { .. } => read,
        }
    }
}

impl Config {
    /// Rejects values that parse but cannot work.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let mut names = HashSet::new();
        for model in &self.models {
            let name = &model.name;
            if name.value.trim().is_empty() {
                return Err(ConfigError::invalid(name, "model name is empty"));
            }
            if !names.insert(name.value.as_str()) {
                return Err(ConfigError::invalid(
                    name,
                    format!("model `{}` listed twice", name.value),
                ));
            }
            if model.replica_concurrency == 0 {
                return Err(ConfigError::invalid(
                    name,
                    "replica_concurrency must be at least 1",
                ));
            }
            if model.discovery == Discovery::Kubernetes && !model.upstreams.is_empty() {
                return Err(ConfigError::invalid(
                    name,
                    "a model with `discovery: kubernetes` cannot also list `upstreams`",
                ));
            }
            for url in &model.upstreams {
                if let Err(reason) = crate::vocab::ReplicaAddr::parse(&url.value) {
                    return Err(ConfigError::invalid(url, reason));
                }
            }
        }
        if self
            .models
            .iter()
            .any(|m| m.discovery == Discovery::Kubernetes)
            && self.kubernetes.is_none()
            && let Some(model) = self
                .models
                .iter()
                .find(|m| m.discovery == Discovery::Kubernetes)
        {
            return Err(ConfigError::invalid(
                &model.name,
                "`discovery: kubernetes` needs a top-level `kubernetes:` section (it may be `{}`)",
            ));
        }
        let checks = [
            (self.queue.max_len == 0, "queue.max_len must be at least 1"),
            (
                self.health.interval_ms == 0 || self.health.interval_ms > 1000,
                "health.interval_ms must be in 1..=1000",
            ),
            (
                self.health.stale_after_ms < self.health.interval_ms,
                "health.stale_after_ms must be ≥ health.interval_ms",
            ),
            (
                self.upstream.max_attempts == 0,
                "upstream.max_attempts must be at least 1",
            ),
            (
                self.upstream.stream_idle_timeout_ms == 0,
                "upstream.stream_idle_timeout_ms must be at least 1",
            ),
            (
                self.upstream.max_resumptions > 16,
                "upstream.max_resumptions must be at most 16",
            ),
            (
                self.max_body_bytes < 1024,
                "max_body_bytes must be at least 1024",
            ),
            (
                self.reload_interval_ms == 0,
                "reload_interval_ms must be at least 1",
            ),
            (
                self.client_header_timeout_ms == 0,
                "client_header_timeout_ms must be at least 1",
            ),
            (
                self.tokens.chars_per_token.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater),
                "tokens.chars_per_token must be positive",
            ),
            (
                self.bounds.max_connections == 0
                    || self.bounds.max_in_flight == 0
                    || self.bounds.max_buffered_body_bytes < self.max_body_bytes,
                "bounds: max_connections and max_in_flight must be at least 1, and \
                 max_buffered_body_bytes at least max_body_bytes",
            ),
            (
                self.bounds.max_connections_per_client == 0
                    || self.bounds.max_in_flight_per_client == 0
                    || self.stream_write_timeout_ms == 0,
                "bounds.max_connections_per_client, bounds.max_in_flight_per_client and \
                 stream_write_timeout_ms must be at least 1",
            ),
            (
                self.http2.max_concurrent_streams == 0
                    || self.client_idle_timeout_ms == 0
                    || self.http2.keep_alive_interval_ms == 0
                    || self.http2.keep_alive_timeout_ms == 0
                    || self.http2.max_header_list_bytes < 1024,
                "client_idle_timeout_ms and every http2 setting must be positive \
                 (max_header_list_bytes at least 1024)",
            ),
            (
                self.limits.timeout_ms == 0,
                "limits.timeout_ms must be at least 1",
            ),
            (
                !(self.batch.max_fill > 0.0 && self.batch.max_fill <= 1.0),
                "batch.max_fill must be above 0 and at most 1",
            ),
            (
                self.batch.lease_ms < 1000
                    || self.batch.max_concurrency == 0
                    || self.batch.max_file_bytes == 0
                    || self.batch.max_lines == 0
                    || self.batch.max_line_bytes == 0,
                "batch: lease_ms must be at least 1000, and max_concurrency, max_file_bytes, \
                 max_lines and max_line_bytes at least 1",
            ),
            (
                self.batch.upload_timeout_ms < 1000,
                "batch.upload_timeout_ms must be at least 1000",
            ),
            (
                self.batch.state == BatchStateKind::Redis && self.limits.store != StoreKind::Redis,
                "batch.state: redis keeps batch jobs in the Redis of `limits:`, which needs \
                 limits.store: redis",
            ),
            (
                self.batch
                    .objects
                    .as_deref()
                    .is_some_and(|o| super::parse_location(o).is_err()),
                "batch.objects must be `s3://BUCKET[/PREFIX]` or `file:///ABSOLUTE/PATH`",
            ),
        ];
        if let Some((_, reason)) = checks.iter().find(|(bad, _)| *bad) {
            // These sections have no spans (defaults fill them); line 0 means "whole file".
            return Err(ConfigError::invalid_at(0, *reason));
        }
        if let Some(kubernetes) = &self.kubernetes {
            let listed = kubernetes.namespaces.iter().chain(&kubernetes.namespace);
            for namespace in listed {
                namespace_name(&namespace.value)
                    .map_err(|reason| ConfigError::invalid(namespace, reason))?;
            }
        }
        limits_store(&self.limits)?;
        self.validate_routes()?;
        if let Some(any_key) = self.anonymous_any_key.as_ref().filter(|a| a.value)
            && self.anonymous.is_none()
        {
            return Err(ConfigError::invalid(
                any_key,
                "anonymous_any_key needs `anonymous:` (the tenant such keys are charged to)",
            ));
        }
        tenants(&self.tenants, self.anonymous.as_ref())
    }
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

/// Checks a namespace name is a DNS label (lowercase letters, digits, `-`, at most 63), so a
/// typo is refused at start rather than failing every watch call later.
fn namespace_name(name: &str) -> Result<(), String> {
    let valid_chars = name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let valid_ends = !name.starts_with('-') && !name.ends_with('-');
    if name.is_empty() || name.len() > 63 || !valid_chars || !valid_ends {
        return Err(format!(
            "`{name}` is not a Kubernetes namespace name (lowercase letters, digits and `-`, \
             at most 63 characters, starting and ending with a letter or digit)"
        ));
    }
    Ok(())
}

/// Checks tenants: unique names, hashed keys only, positive limits, a known anonymous tenant.
pub(super) fn tenants(
    tenants: &[TenantConfig],
    anonymous: Option<&Spanned<String>>,
) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    let mut keys = HashSet::new();
    for tenant in tenants {
        if tenant.name.value.trim().is_empty() {
            return Err(ConfigError::invalid(&tenant.name, "tenant name is empty"));
        }
        if !names.insert(tenant.name.value.as_str()) {
            let reason = format!("tenant `{}` listed twice", tenant.name.value);
            return Err(ConfigError::invalid(&tenant.name, reason));
        }
        for key in &tenant.keys {
            super::parse_key_hash(&key.value)
                .map_err(|reason| ConfigError::invalid(key, reason))?;
            if !keys.insert(key.value.to_ascii_lowercase()) {
                return Err(ConfigError::invalid(
                    key,
                    "the same key hash is listed twice",
                ));
            }
        }
        for limits in tenant.limits.iter().chain(&tenant.total_limits) {
            let values = [
                limits.requests_per_minute,
                limits.input_tokens_per_minute,
                limits.output_tokens_per_minute,
            ];
            if values.contains(&Some(0)) {
                let reason = "limits must be positive (leave a limit out for no limit)";
                return Err(ConfigError::invalid(&tenant.name, reason));
            }
        }
        if let Some(batch) = &tenant.batch
            && (batch.max_enqueued_tokens == Some(0) || batch.max_batches_in_flight == Some(0))
        {
            let reason = "batch limits must be positive (leave a limit out for no limit)";
            return Err(ConfigError::invalid(&tenant.name, reason));
        }
        if tenant.max_in_flight == Some(0) {
            let reason = "max_in_flight must be at least 1 (leave it out for no cap)";
            return Err(ConfigError::invalid(&tenant.name, reason));
        }
        for pattern in tenant.models.iter().flatten() {
            if pattern.value.trim().is_empty() {
                return Err(ConfigError::invalid(pattern, "a model pattern is empty"));
            }
        }
    }
    if let Some(name) = anonymous
        && !names.contains(name.value.as_str())
    {
        let reason = format!("anonymous tenant `{}` is not among the tenants", name.value);
        return Err(ConfigError::invalid(name, reason));
    }
    Ok(())
}
