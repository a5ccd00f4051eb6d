//! The tenants' check (`tenants:`, `anonymous:`, `anonymous_any_key:`), and loading a
//! tenants file with it.

use std::collections::HashSet;
use std::path::Path;

use serde_saphyr::Spanned;

use crate::config::{Config, ConfigError, TenantConfig, TenantsFile, parse_key_hash, read};

/// Refuses `anonymous_any_key` without an anonymous tenant, then tenants that cannot work.
pub fn validate_section(config: &Config) -> Result<(), ConfigError> {
    if let Some(any_key) = config.anonymous_any_key.as_ref().filter(|a| a.value)
        && config.anonymous.is_none()
    {
        return Err(ConfigError::invalid(
            any_key,
            "anonymous_any_key needs `anonymous:` (the tenant such keys are charged to)",
        ));
    }
    validate_tenants(&config.tenants, config.anonymous.as_ref())
}

impl TenantsFile {
    /// Reads a tenants file (or a whole config file, whose other fields are ignored here
    /// because the config was checked at start) and checks its tenants.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let parsed = read(path)
            .and_then(|text| Self::parse(&text))
            .map_err(|e| e.in_file(path))?;
        validate_tenants(&parsed.tenants, parsed.anonymous.as_ref())
            .map_err(|e| e.in_file(path))?;
        Ok(parsed)
    }
}

/// Checks tenants (of a config or a tenants file): unique names, hashed keys only, positive limits, a known anonymous tenant.
pub fn validate_tenants(
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
            parse_key_hash(&key.value).map_err(|reason| ConfigError::invalid(key, reason))?;
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
