//! Tenants and their API keys: keys are held as SHA-256 hashes and compared in constant time;
//! what a request presents is read strictly (`credentials`); each tenant has a model list.

mod credentials;
mod layer;
mod models;
mod section;

pub use credentials::{Presented, presented_key};
pub use layer::{Auth, AuthLayer, Authed, authenticate};
pub use models::{ModelAccess, glob_match};
pub use section::{validate_section, validate_tenants};

use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::{LimitsConfig, TenantConfig, parse_key_hash};

/// A tenant as the request path sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Tenant {
    /// Name (label on metrics, key of limit buckets, fairness in the admission queue).
    pub name: Arc<str>,
    /// Its limits per model; `None` is unlimited.
    pub limits: Option<LimitsConfig>,
    /// Its limits across all its models; `None` is unlimited.
    pub total_limits: Option<LimitsConfig>,
    /// The models it may use.
    pub models: ModelAccess,
    /// Its cap on requests in flight over all gateway pods.
    pub max_in_flight: Option<u32>,
    /// Its Batch API limits.
    pub batch: crate::config::BatchLimitsConfig,
}

impl Tenant {
    /// A tenant with no limits, no cap and every model (tests, `tokenscale up`).
    pub fn unlimited(name: &str) -> Self {
        Self {
            name: Arc::from(name),
            limits: None,
            total_limits: None,
            models: ModelAccess::All,
            max_in_flight: None,
            batch: Default::default(),
        }
    }

    fn from_config(config: &TenantConfig) -> Self {
        let models = match &config.models {
            None => ModelAccess::All,
            Some(list) => ModelAccess::Only(list.iter().map(|p| p.value.clone()).collect()),
        };
        Self {
            name: Arc::from(config.name.value.as_str()),
            limits: config.limits,
            total_limits: config.total_limits,
            models,
            max_in_flight: config.max_in_flight,
            batch: config.batch.unwrap_or_default(),
        }
    }
}

/// One immutable generation of tenants and key hashes.
#[derive(Debug, Default)]
struct Directory {
    keys: Vec<([u8; 32], Arc<Tenant>)>,
    anonymous: Option<Arc<Tenant>>,
}

/// The current tenants, swapped whole on reload.
#[derive(Debug, Default)]
pub struct TenantDirectory {
    current: RwLock<Arc<Directory>>,
    /// Keys no tenant owns go to the anonymous tenant (`anonymous_any_key`).
    any_key: bool,
}

/// The `sha256:<hex>` form of a key, as written in the config file.
pub fn hash_key(key: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(key.as_bytes())))
}

impl TenantDirectory {
    /// A directory holding `tenants` (already validated).
    pub fn new(tenants: &[TenantConfig], anonymous: Option<&str>) -> Self {
        let directory = Self::default();
        directory.replace(tenants, anonymous);
        directory
    }

    /// Keys no tenant owns are the anonymous tenant's (a local run that takes any key).
    pub fn with_any_key(mut self, any_key: bool) -> Self {
        self.any_key = any_key;
        self
    }

    /// The tenant a key no tenant owns is charged to: the anonymous one when any key is
    /// taken, else none (401).
    pub fn unknown_key(&self) -> Option<Arc<Tenant>> {
        self.any_key.then(|| self.anonymous()).flatten()
    }

    /// Swaps in a new generation of tenants.
    pub fn replace(&self, tenants: &[TenantConfig], anonymous: Option<&str>) {
        let mut next = Directory::default();
        let open: Vec<&str> = tenants
            .iter()
            .filter(|t| t.models.is_none())
            .map(|t| t.name.value.as_str())
            .collect();
        if !open.is_empty() {
            tracing::warn!(
                tenants = ?open,
                "tenants without a `models:` list may use every model; give each one its list"
            );
        }
        for config in tenants {
            let tenant = Arc::new(Tenant::from_config(config));
            for key in &config.keys {
                // Validated at load; an unparsable one here would be skipped, not trusted.
                if let Ok(hash) = parse_key_hash(&key.value) {
                    next.keys.push((hash, tenant.clone()));
                }
            }
            if anonymous == Some(config.name.value.as_str()) {
                next.anonymous = Some(tenant.clone());
            }
        }
        let mut current = self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *current = Arc::new(next);
    }

    /// The tenant owning `key`, comparing its hash against every stored hash in constant time
    /// (no early exit, so timing says nothing about which or how many bytes matched).
    pub fn authenticate(&self, key: &str) -> Option<Arc<Tenant>> {
        let presented: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        let directory = self.snapshot();
        let mut found = None;
        for (hash, tenant) in &directory.keys {
            if bool::from(hash.ct_eq(&presented)) {
                found = Some(tenant.clone());
            }
        }
        found
    }

    /// The tenant for keyless requests, when configured.
    pub fn anonymous(&self) -> Option<Arc<Tenant>> {
        self.snapshot().anonymous.clone()
    }

    /// The tenant named `name` as configured now (a batch's lines run as the tenant that
    /// created it, with its current model access; `None` once it is removed).
    pub fn by_name(&self, name: &str) -> Option<Arc<Tenant>> {
        let directory = self.snapshot();
        let mut tenants = directory
            .keys
            .iter()
            .map(|(_, t)| t)
            .chain(&directory.anonymous);
        tenants.find(|t| &*t.name == name).cloned()
    }

    fn snapshot(&self) -> Arc<Directory> {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn keys_match_by_hash_and_plain_keys_are_refused() {
        let yaml = format!(
            "tenants:\n  - name: a\n    keys: [\"{}\"]\n  - name: b\n    keys: []\nanonymous: b\n",
            hash_key("secret-a")
        );
        let config = Config::from_yaml(&yaml).expect("valid config");
        let directory = TenantDirectory::new(&config.tenants, Some("b"));
        assert_eq!(
            directory
                .authenticate("secret-a")
                .map(|t| t.name.to_string()),
            Some("a".into())
        );
        assert!(directory.authenticate("secret-b").is_none());
        assert_eq!(
            directory.anonymous().map(|t| t.name.to_string()),
            Some("b".into())
        );

        let plain = "tenants:\n  - name: a\n    keys: [\"secret-a\"]\n";
        let error = Config::from_yaml(plain)
            .expect_err("plain key refused")
            .to_string();
        assert!(
            error.contains("line 3") && error.contains("plain keys are refused"),
            "{error}"
        );
    }
}
