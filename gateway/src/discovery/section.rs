//! The `kubernetes:` section's check: present when a model is discovered, namespaces that
//! can be watched.

use crate::config::{ConfigError, Discovery, KubernetesConfig, ModelConfig};

/// Refuses a discovered model without a `kubernetes:` section, and a watched namespace
/// whose name Kubernetes would refuse.
pub fn validate_section(
    models: &[ModelConfig],
    kubernetes: Option<&KubernetesConfig>,
) -> Result<(), ConfigError> {
    let discovered = models.iter().find(|m| m.discovery == Discovery::Kubernetes);
    let Some(kubernetes) = kubernetes else {
        return match discovered {
            Some(model) => Err(ConfigError::invalid(
                &model.name,
                "`discovery: kubernetes` needs a top-level `kubernetes:` section (it may be `{}`)",
            )),
            None => Ok(()),
        };
    };
    let listed = kubernetes.namespaces.iter().chain(&kubernetes.namespace);
    for namespace in listed {
        namespace_name(&namespace.value)
            .map_err(|reason| ConfigError::invalid(namespace, reason))?;
    }
    Ok(())
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
