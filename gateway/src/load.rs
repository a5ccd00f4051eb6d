//! The configuration loader, above every layer: `config` parses the file (syntax and
//! defaults), then each concept checks its own section, so no caller gets an unchecked
//! configuration.

use std::path::Path;

use crate::config::{Config, ConfigError, TenantsFile, read};

impl Config {
    /// Parses a configuration text and checks every section.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let config = Config::parse(text)?;
        validate(&config)?;
        Ok(config)
    }

    /// Reads, parses and checks a configuration file; a `tenants_file` is resolved relative
    /// to it and loaded too.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = read(path)?;
        let mut config = Self::from_yaml(&text).map_err(|e| e.in_file(path))?;
        if let Some(file) = &config.tenants_file {
            let file = path.parent().unwrap_or(Path::new(".")).join(file);
            let tenants = TenantsFile::load(&file)?;
            config.tenants = tenants.tenants;
            config.anonymous = tenants.anonymous;
            config.tenants_file = Some(file);
            validate(&config).map_err(|e| e.in_file(path))?;
        }
        Ok(config)
    }
}

/// Every concept's check of its section, in the order the checks ran when `config` made
/// them all; the first refusal wins.
fn validate(config: &Config) -> Result<(), ConfigError> {
    crate::routing::validate_section(&config.models)?;
    crate::admission::validate_section(&config.queue)?;
    crate::health::validate_section(&config.health)?;
    crate::proxy::validate_section(&config.upstream, &config.tokens)?;
    crate::server::validate_section(config)?;
    // Before `limits`: with `state: redis` and a memory store, batch's reason says why.
    crate::batch::validate_section(&config.batch, &config.limits)?;
    crate::discovery::validate_section(&config.models, config.kubernetes.as_ref())?;
    crate::limits::validate_section(&config.limits)?;
    crate::routing::validate_routes(config)?;
    crate::auth::validate_section(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_parses_what_a_concept_then_refuses() {
        let yaml = "models: []\nqueue: {max_len: 0}\n";
        let parsed = Config::parse(yaml).expect("syntax and defaults accept it");
        assert_eq!(parsed.queue.max_len, 0);
        let error = Config::from_yaml(yaml).expect_err("the queue's check refuses it");
        assert_eq!(
            error.to_string(),
            "line 0: queue.max_len must be at least 1"
        );
    }
}
