//! CPU and memory requests/limits of an engine container, as Kubernetes quantity strings.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize};

/// Schema pattern for quantities: a plain or decimal number with an optional SI or binary
/// suffix ("500m", "2", "1.5Gi", "512Mi"). Signs and exponents are left out on purpose.
pub const QUANTITY_PATTERN: &str = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$";

/// A Kubernetes resource quantity, checked against [`QUANTITY_PATTERN`] when read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Quantity(String);

impl Quantity {
    /// Checks `text` and wraps it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (number, suffix) = text.split_at(
            text.find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(text.len()),
        );
        let number_ok = !number.is_empty()
            && !number.starts_with('.')
            && !number.ends_with('.')
            && number.matches('.').count() <= 1;
        let suffix_ok = [
            "", "m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi",
        ]
        .contains(&suffix);
        if number_ok && suffix_ok {
            Ok(Self(text.to_string()))
        } else {
            Err(format!(
                "invalid quantity {text:?}: expected a number with an optional suffix \
                 (m, k, M, G, T, Ki, Mi, Gi, Ti), like \"500m\" or \"4Gi\""
            ))
        }
    }

    /// The quantity as k8s-openapi's type.
    pub fn to_k8s(&self) -> K8sQuantity {
        K8sQuantity(self.0.clone())
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> Cow<'static, str> {
        "Quantity".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": QUANTITY_PATTERN,
            "description": "A Kubernetes quantity, e.g. \"500m\" CPU or \"4Gi\" memory."
        })
    }
}

/// CPU and memory amounts. GPUs are not listed here: they come from `gpusPerReplica`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceAmounts {
    /// CPU, e.g. "2" or "500m".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Quantity>,
    /// Memory, e.g. "4Gi".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Quantity>,
    /// Scratch disk, e.g. "2Gi" (model cache for `hf://` and alias sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<Quantity>,
}

impl ResourceAmounts {
    /// As a Kubernetes resource list (keys `cpu`, `memory`, `ephemeral-storage`).
    pub fn to_resource_list(&self) -> BTreeMap<String, K8sQuantity> {
        [
            ("cpu", &self.cpu),
            ("memory", &self.memory),
            ("ephemeral-storage", &self.ephemeral_storage),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.as_ref().map(|q| (key.to_string(), q.to_k8s())))
        .collect()
    }
}

/// Requests and limits of the engine container. Unset values take the operator's defaults
/// for the backend (see `children::deployment`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EngineResources {
    /// What the scheduler reserves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceAmounts>,
    /// The most the container may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceAmounts>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_kubernetes_quantities_and_rejects_the_rest() {
        for good in ["1", "500m", "1.5", "4Gi", "512Mi", "2G"] {
            assert!(Quantity::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "-1", "4gb", "1e3", ".5", "Gi", "4 Gi"] {
            let err = Quantity::parse(bad).expect_err(bad);
            assert!(err.contains("invalid quantity"), "{err}");
        }
    }

    #[test]
    fn resource_list_uses_kubernetes_keys() {
        let amounts = ResourceAmounts {
            cpu: Some(Quantity::parse("2").expect("valid")),
            memory: None,
            ephemeral_storage: Some(Quantity::parse("1Gi").expect("valid")),
        };
        let list = amounts.to_resource_list();
        assert_eq!(
            list.keys().collect::<Vec<_>>(),
            ["cpu", "ephemeral-storage"]
        );
        assert_eq!(list["cpu"].0, "2");
    }
}
