//! The pod security every pod tokenscale creates must carry (the chart's and the operator's):
//! non-root, read-only root filesystem, no privilege escalation, all capabilities dropped,
//! RuntimeDefault seccomp, no host namespaces or host paths, and resource requests and limits.

use k8s_openapi::api::core::v1::{Container, PodSecurityContext, PodSpec, ResourceRequirements};

use super::Violation;

/// Resources every container must request.
pub const REQUIRED_REQUESTS: [&str; 2] = ["cpu", "memory"];
/// Resources every container must be limited in. CPU limits are left to the values: a CPU
/// limit throttles latency-critical engines, while a memory limit protects the node.
pub const REQUIRED_LIMITS: [&str; 1] = ["memory"];

/// Every rule `pod` breaks; `object` names the pod's owner in the findings.
pub fn check_pod_security(object: &str, pod: &PodSpec) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut violation = |object: String, rule, detail: String| {
        found.push(Violation {
            object,
            rule,
            detail,
        })
    };
    if pod.host_network == Some(true) || pod.host_pid == Some(true) || pod.host_ipc == Some(true) {
        violation(
            object.into(),
            "no host namespaces",
            "hostNetwork/hostPID/hostIPC is set".into(),
        );
    }
    for volume in pod
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.host_path.is_some())
    {
        violation(
            object.into(),
            "no hostPath volumes",
            format!("volume {:?}", volume.name),
        );
    }
    let containers = pod.init_containers.iter().flatten().chain(&pod.containers);
    for container in containers {
        let at = format!("{object} container {:?}", container.name);
        for (rule, detail) in container_findings(container, pod.security_context.as_ref()) {
            violation(at.clone(), rule, detail);
        }
    }
    found
}

/// (rule, detail) for each rule one container breaks, the pod's context filling in where
/// the container's leaves a field unset (as the kubelet does).
fn container_findings(
    c: &Container,
    pod: Option<&PodSecurityContext>,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let sc = c.security_context.clone().unwrap_or_default();
    let pod = pod.cloned().unwrap_or_default();
    let non_root = sc.run_as_non_root.or(pod.run_as_non_root);
    let user = sc.run_as_user.or(pod.run_as_user);
    if non_root != Some(true) || user == Some(0) {
        out.push((
            "runAsNonRoot",
            format!("runAsNonRoot {non_root:?}, runAsUser {user:?}"),
        ));
    }
    if sc.read_only_root_filesystem != Some(true) {
        out.push((
            "readOnlyRootFilesystem",
            format!("{:?}", sc.read_only_root_filesystem),
        ));
    }
    if sc.allow_privilege_escalation != Some(false) || sc.privileged == Some(true) {
        out.push((
            "allowPrivilegeEscalation false",
            format!("{:?}", sc.allow_privilege_escalation),
        ));
    }
    let caps = sc.capabilities.clone().unwrap_or_default();
    if !caps.drop.iter().flatten().any(|cap| cap == "ALL")
        || caps.add.as_ref().is_some_and(|a| !a.is_empty())
    {
        out.push((
            "capabilities drop ALL, add none",
            format!("drop {:?}, add {:?}", caps.drop, caps.add),
        ));
    }
    let seccomp = sc.seccomp_profile.or(pod.seccomp_profile).map(|p| p.type_);
    if seccomp.as_deref() != Some("RuntimeDefault") {
        out.push(("seccompProfile RuntimeDefault", format!("{seccomp:?}")));
    }
    out.extend(resource_findings(c.resources.as_ref()));
    out
}

fn resource_findings(resources: Option<&ResourceRequirements>) -> Vec<(&'static str, String)> {
    let resources = resources.cloned().unwrap_or_default();
    let requests = resources.requests.unwrap_or_default();
    let limits = resources.limits.unwrap_or_default();
    let mut out = Vec::new();
    for name in REQUIRED_REQUESTS
        .iter()
        .filter(|n| !requests.contains_key(**n))
    {
        out.push(("resource requests", format!("no {name} request")));
    }
    for name in REQUIRED_LIMITS.iter().filter(|n| !limits.contains_key(**n)) {
        out.push(("resource limits", format!("no {name} limit")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod that passes every rule, as YAML to mutate in each test.
    const GOOD: &str = r#"{
      "securityContext": {"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
      "containers": [{
        "name": "app", "image": "app:1",
        "securityContext": {"readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]}},
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}
      }]
    }"#;

    fn rules_broken(mutate: impl FnOnce(&mut serde_json::Value)) -> Vec<&'static str> {
        let mut pod: serde_json::Value = serde_json::from_str(GOOD).expect("GOOD is JSON");
        mutate(&mut pod);
        let pod: PodSpec = serde_json::from_value(pod).expect("a PodSpec");
        check_pod_security("Pod p", &pod)
            .into_iter()
            .map(|v| v.rule)
            .collect()
    }

    fn container(pod: &mut serde_json::Value) -> &mut serde_json::Value {
        &mut pod["containers"][0]
    }

    #[test]
    fn the_good_pod_passes() {
        assert!(rules_broken(|_| {}).is_empty());
    }

    #[test]
    fn root_is_caught_at_pod_or_container_level() {
        assert_eq!(
            rules_broken(|p| p["securityContext"]["runAsNonRoot"] = false.into()),
            ["runAsNonRoot"]
        );
        assert_eq!(
            rules_broken(|p| container(p)["securityContext"]["runAsUser"] = 0.into()),
            ["runAsNonRoot"]
        );
    }

    #[test]
    fn a_writable_root_filesystem_is_caught() {
        let broken = rules_broken(|p| {
            container(p)["securityContext"]["readOnlyRootFilesystem"] = false.into()
        });
        assert_eq!(broken, ["readOnlyRootFilesystem"]);
    }

    #[test]
    fn privilege_escalation_and_privileged_are_caught() {
        let unset = rules_broken(|p| {
            container(p)["securityContext"]
                .as_object_mut()
                .map(|sc| sc.remove("allowPrivilegeEscalation"));
        });
        assert_eq!(unset, ["allowPrivilegeEscalation false"]);
        let privileged =
            rules_broken(|p| container(p)["securityContext"]["privileged"] = true.into());
        assert_eq!(privileged, ["allowPrivilegeEscalation false"]);
    }

    #[test]
    fn kept_or_added_capabilities_are_caught() {
        let kept = rules_broken(|p| {
            container(p)["securityContext"]["capabilities"]["drop"] = serde_json::json!(["NET_RAW"])
        });
        assert_eq!(kept, ["capabilities drop ALL, add none"]);
        let added = rules_broken(|p| {
            container(p)["securityContext"]["capabilities"]["add"] =
                serde_json::json!(["NET_ADMIN"])
        });
        assert_eq!(added, ["capabilities drop ALL, add none"]);
    }

    #[test]
    fn a_missing_or_unconfined_seccomp_profile_is_caught() {
        let missing = rules_broken(|p| {
            p["securityContext"]
                .as_object_mut()
                .map(|sc| sc.remove("seccompProfile"));
        });
        assert_eq!(missing, ["seccompProfile RuntimeDefault"]);
        let unconfined = rules_broken(|p| {
            container(p)["securityContext"]["seccompProfile"] =
                serde_json::json!({"type": "Unconfined"})
        });
        assert_eq!(unconfined, ["seccompProfile RuntimeDefault"]);
    }

    #[test]
    fn missing_requests_and_limits_are_caught() {
        let broken = rules_broken(|p| {
            container(p)["resources"] = serde_json::json!({"requests": {"cpu": "1"}})
        });
        assert_eq!(broken, ["resource requests", "resource limits"]);
    }

    #[test]
    fn init_containers_are_checked_too() {
        let broken = rules_broken(|p| {
            p["initContainers"] = serde_json::json!([{"name": "init", "image": "busybox"}]);
        });
        assert!(broken.contains(&"readOnlyRootFilesystem"), "{broken:?}");
        assert!(broken.contains(&"resource requests"), "{broken:?}");
    }

    #[test]
    fn host_namespaces_and_host_paths_are_caught() {
        let broken = rules_broken(|p| {
            p["hostNetwork"] = true.into();
            p["volumes"] = serde_json::json!([{"name": "root", "hostPath": {"path": "/"}}]);
        });
        assert_eq!(broken, ["no host namespaces", "no hostPath volumes"]);
    }
}
