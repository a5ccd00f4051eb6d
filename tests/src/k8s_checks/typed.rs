//! Parses an object as its Kubernetes type (k8s-openapi, API version of the `latest` feature)
//! and rejects fields the type does not have: the typed value is serialized back and every
//! field that did not survive the round trip is reported.

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, PodSpec, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::json_diff::{differences, without_nulls};
use super::monitoring::{PodMonitor, ServiceMonitor};
use super::{ManifestError, Object};

/// An object parsed as its type. Boxed: the types are large and differ in size.
#[derive(Debug, Clone)]
pub enum Typed {
    /// `apps/v1` Deployment.
    Deployment(Box<Deployment>),
    /// `v1` Pod.
    Pod(Box<Pod>),
    /// `v1` Service.
    Service(Box<Service>),
    /// `v1` ServiceAccount.
    ServiceAccount(Box<ServiceAccount>),
    /// `v1` ConfigMap.
    ConfigMap(Box<ConfigMap>),
    /// `v1` Secret.
    Secret(Box<Secret>),
    /// `v1` PersistentVolumeClaim.
    PersistentVolumeClaim(Box<PersistentVolumeClaim>),
    /// `rbac.authorization.k8s.io/v1` ClusterRole.
    ClusterRole(Box<ClusterRole>),
    /// `rbac.authorization.k8s.io/v1` ClusterRoleBinding.
    ClusterRoleBinding(Box<ClusterRoleBinding>),
    /// `rbac.authorization.k8s.io/v1` Role.
    Role(Box<Role>),
    /// `rbac.authorization.k8s.io/v1` RoleBinding.
    RoleBinding(Box<RoleBinding>),
    /// `policy/v1` PodDisruptionBudget.
    PodDisruptionBudget(Box<PodDisruptionBudget>),
    /// `autoscaling/v2` HorizontalPodAutoscaler.
    HorizontalPodAutoscaler(Box<HorizontalPodAutoscaler>),
    /// `networking.k8s.io/v1` NetworkPolicy.
    NetworkPolicy(Box<NetworkPolicy>),
    /// `apiextensions.k8s.io/v1` CustomResourceDefinition.
    CustomResourceDefinition(Box<CustomResourceDefinition>),
    /// `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy.
    ValidatingAdmissionPolicy(Box<ValidatingAdmissionPolicy>),
    /// `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicyBinding.
    ValidatingAdmissionPolicyBinding(Box<ValidatingAdmissionPolicyBinding>),
    /// `monitoring.coreos.com/v1` ServiceMonitor.
    ServiceMonitor(Box<ServiceMonitor>),
    /// `monitoring.coreos.com/v1` PodMonitor.
    PodMonitor(Box<PodMonitor>),
}

impl Typed {
    /// Parses `object` by its apiVersion and kind; unknown kinds and unknown fields are errors.
    pub fn parse(object: &Object) -> Result<Self, ManifestError> {
        let typed = match (object.api_version.as_str(), object.kind.as_str()) {
            ("apps/v1", "Deployment") => Typed::Deployment(round_trip(object)?),
            ("v1", "Pod") => Typed::Pod(round_trip(object)?),
            ("v1", "Service") => Typed::Service(round_trip(object)?),
            ("v1", "ServiceAccount") => Typed::ServiceAccount(round_trip(object)?),
            ("v1", "ConfigMap") => Typed::ConfigMap(round_trip(object)?),
            ("v1", "Secret") => Typed::Secret(round_trip(object)?),
            ("v1", "PersistentVolumeClaim") => Typed::PersistentVolumeClaim(round_trip(object)?),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                Typed::ClusterRole(round_trip(object)?)
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                Typed::ClusterRoleBinding(round_trip(object)?)
            }
            ("rbac.authorization.k8s.io/v1", "Role") => Typed::Role(round_trip(object)?),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                Typed::RoleBinding(round_trip(object)?)
            }
            ("policy/v1", "PodDisruptionBudget") => Typed::PodDisruptionBudget(round_trip(object)?),
            ("autoscaling/v2", "HorizontalPodAutoscaler") => {
                Typed::HorizontalPodAutoscaler(round_trip(object)?)
            }
            ("networking.k8s.io/v1", "NetworkPolicy") => Typed::NetworkPolicy(round_trip(object)?),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
                Typed::CustomResourceDefinition(round_trip(object)?)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
                Typed::ValidatingAdmissionPolicy(round_trip(object)?)
            }
            ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
                Typed::ValidatingAdmissionPolicyBinding(round_trip(object)?)
            }
            ("monitoring.coreos.com/v1", "ServiceMonitor") => {
                Typed::ServiceMonitor(round_trip(object)?)
            }
            ("monitoring.coreos.com/v1", "PodMonitor") => Typed::PodMonitor(round_trip(object)?),
            (api_version, kind) => {
                return Err(ManifestError::UnknownKind {
                    object: object.id(),
                    api_version: api_version.into(),
                    kind: kind.into(),
                });
            }
        };
        Ok(typed)
    }

    /// The pod spec this object runs (Deployment template or bare Pod), if it runs pods.
    pub fn pod_spec(&self) -> Option<&PodSpec> {
        match self {
            Typed::Deployment(d) => d.spec.template.spec.as_ref(),
            Typed::Pod(p) => p.spec.as_ref(),
            _ => None,
        }
    }

    /// The RBAC rules this object grants, if it is a Role or ClusterRole.
    pub fn policy_rules(&self) -> Option<&[PolicyRule]> {
        match self {
            Typed::ClusterRole(r) => r.rules.as_deref().or(Some(&[])),
            Typed::Role(r) => r.rules.as_deref().or(Some(&[])),
            _ => None,
        }
    }
}

/// Deserializes `object` as `T`, then requires that serializing it back gives the same JSON
/// (k8s-openapi ignores unknown fields, so this is how they are caught).
fn round_trip<T: DeserializeOwned + Serialize>(object: &Object) -> Result<Box<T>, ManifestError> {
    let kind = object.kind.clone();
    let original = without_nulls(&object.value);
    let typed: T =
        serde_json::from_value(original.clone()).map_err(|source| ManifestError::Type {
            object: object.id(),
            kind: kind.clone(),
            source,
        })?;
    let back = serde_json::to_value(&typed).map_err(|source| ManifestError::Type {
        object: object.id(),
        kind: kind.clone(),
        source,
    })?;
    let paths = differences(&original, &back);
    if !paths.is_empty() {
        return Err(ManifestError::UnknownFields {
            object: object.id(),
            kind,
            paths: paths.join(", "),
        });
    }
    Ok(Box::new(typed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s_checks::parse_documents;

    fn parse(yaml: &str) -> Result<Typed, ManifestError> {
        let objects = parse_documents(yaml)?;
        Typed::parse(&objects[0])
    }

    const SERVICE: &str = "apiVersion: v1\nkind: Service\nmetadata:\n  name: s\n  namespace: ns\nspec:\n  \
                           selector: {app: a}\n  ports:\n    - {name: http, port: 80, targetPort: http}\n";

    #[test]
    fn a_valid_object_parses_as_its_type() {
        assert!(matches!(parse(SERVICE), Ok(Typed::Service(_))));
    }

    #[test]
    fn a_misspelled_field_is_rejected_with_its_path() {
        let typo = SERVICE.replace("targetPort", "tagretPort");
        match parse(&typo) {
            Err(ManifestError::UnknownFields { paths, .. }) => {
                assert_eq!(paths, "spec.ports[0].tagretPort")
            }
            other => panic!("want UnknownFields, got {other:?}"),
        }
    }

    #[test]
    fn a_field_in_the_wrong_place_is_rejected() {
        let misplaced = SERVICE.replace("  selector:", "  replicas: 2\n  selector:");
        assert!(matches!(
            parse(&misplaced),
            Err(ManifestError::UnknownFields { .. })
        ));
    }

    #[test]
    fn a_wrong_type_is_rejected() {
        let wrong = SERVICE.replace("port: 80", "port: eighty");
        assert!(matches!(parse(&wrong), Err(ManifestError::Type { .. })));
    }

    #[test]
    fn an_unknown_kind_is_rejected() {
        let yaml = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n";
        assert!(matches!(
            parse(yaml),
            Err(ManifestError::UnknownKind { .. })
        ));
    }
}
