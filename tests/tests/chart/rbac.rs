//! RBAC grants exactly what each program calls: the operator's verbs on its resources
//! (per watched namespace by default, cluster-wide only as an opt-in, plus Leases where it
//! elects), the gateway read-only.

use std::collections::BTreeSet;

use k8s_openapi::api::rbac::v1::PolicyRule;
use tokenscale_e2e::chart::Render;
use tokenscale_e2e::k8s_checks::Typed;
use tokenscale_e2e::k8s_checks::rbac::grants;

use crate::{Rendered, ci_render, default_render};

/// (apiGroup, resource, verbs) the operator calls, with where in operator/src.
const OPERATOR: &[(&str, &str, &[&str])] = &[
    // controller/mod.rs: Controller::new(mds) lists and watches.
    ("tokenscale.dev", "modeldeployments", &["list", "watch"]),
    // controller/apply.rs: patch_status (server-side apply).
    ("tokenscale.dev", "modeldeployments/status", &["patch"]),
    // children/mod.rs: controller_owner_ref sets blockOwnerDeletion.
    ("tokenscale.dev", "modeldeployments/finalizers", &["update"]),
    // controller/apply.rs: server-side apply (create + patch); .owns() lists and watches;
    // scale/kubernetes.rs: get_opt, then patch_scale.
    (
        "apps",
        "deployments",
        &["get", "list", "watch", "create", "patch"],
    ),
    ("apps", "deployments/scale", &["patch"]),
    ("", "services", &["list", "watch", "create", "patch"]),
    (
        "policy",
        "poddisruptionbudgets",
        &["list", "watch", "create", "patch"],
    ),
    // controller/fill.rs (model.cache.fill): the claim applied; the Job read, applied once.
    ("", "persistentvolumeclaims", &["create", "patch"]),
    ("batch", "jobs", &["get", "create", "patch"]),
    // children/network_policy.rs, applied by controller/apply.rs (networkPolicy.enabled, the
    // default).
    ("networking.k8s.io", "networkpolicies", &["create", "patch"]),
    // scale/kubernetes.rs: pod-deletion-cost on the pod chosen for removal;
    // clock/start_phases.rs: the engine pods listed while a replica starts.
    ("", "pods", &["list", "patch"]),
    // metrics_source/discovery.rs: ready endpoints of engine and gateway Services.
    ("discovery.k8s.io", "endpointslices", &["list"]),
    // controller/mod.rs: kube's events Recorder.
    ("events.k8s.io", "events", &["create", "patch"]),
];
/// Leader election, in the lease namespace only.
const OPERATOR_LEASE: &[(&str, &str, &[&str])] = &[(
    "coordination.k8s.io",
    "leases",
    &["get", "create", "update"],
)];
/// The gateway only reads, through reflectors (gateway/src/discovery/kubernetes.rs).
const GATEWAY: &[(&str, &str, &[&str])] = &[
    ("tokenscale.dev", "modeldeployments", &["list", "watch"]),
    ("tokenscale.dev", "modelroutes", &["list", "watch"]),
    ("discovery.k8s.io", "endpointslices", &["list", "watch"]),
];

/// True for a ClusterRole aggregated into one of Kubernetes' default user roles.
fn is_aggregated(object: &tokenscale_e2e::k8s_checks::Object) -> bool {
    let labels = object.value["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels
        .iter()
        .any(|(k, v)| k.starts_with("rbac.authorization.k8s.io/aggregate-to-") && v == "true")
}

fn expected(table: &[(&str, &str, &[&str])]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for (group, resource, verbs) in table {
        for verb in *verbs {
            out.insert((group.to_string(), resource.to_string(), verb.to_string()));
        }
    }
    out
}

/// The rules of the Role/ClusterRole `kind` named `name` in `namespace` (None: any).
fn rules_of(
    rendered: &Rendered,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
) -> Vec<PolicyRule> {
    let object = rendered
        .of_kind(kind)
        .find(|o| o.name == name && (namespace.is_none() || o.namespace.as_deref() == namespace))
        .unwrap_or_else(|| panic!("[{}] no {kind} {name} in {namespace:?}", rendered.label));
    let typed = Typed::parse(object).unwrap_or_else(|e| panic!("{e}"));
    typed
        .policy_rules()
        .map(<[PolicyRule]>::to_vec)
        .unwrap_or_default()
}

fn binding_subject(
    rendered: &Rendered,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
) -> (String, String) {
    let object = rendered
        .of_kind(kind)
        .find(|o| o.name == name && o.namespace.as_deref() == namespace)
        .unwrap_or_else(|| panic!("[{}] no {kind} {name} in {namespace:?}", rendered.label));
    let role = object.value["roleRef"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let subject = object.value["subjects"][0]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (role, subject)
}

#[test]
fn cluster_mode_grants_the_operator_exactly_its_verbs_and_the_gateway_only_reads() {
    let r = ci_render("cluster-wide-values.yaml");
    assert_eq!(
        grants(&rules_of(r, "ClusterRole", "tokenscale-operator", None)),
        expected(OPERATOR)
    );
    assert_eq!(
        grants(&rules_of(r, "ClusterRole", "tokenscale-gateway", None)),
        expected(GATEWAY)
    );
    let lease = rules_of(
        r,
        "Role",
        "tokenscale-operator-leader-election",
        Some("tokenscale-system"),
    );
    assert_eq!(grants(&lease), expected(OPERATOR_LEASE));
    let bound = binding_subject(r, "ClusterRoleBinding", "tokenscale-operator", None);
    assert_eq!(
        bound,
        ("tokenscale-operator".into(), "tokenscale-operator".into())
    );
    assert_eq!(
        r.of_kind("Role").count(),
        1,
        "cluster mode: only the lease Role"
    );
}

#[test]
fn namespaced_mode_uses_roles_in_each_watched_namespace_and_nothing_cluster_wide() {
    let r = ci_render("namespaced-values.yaml");
    let cluster_scoped: Vec<String> = r
        .objects
        .iter()
        .filter(|o| o.namespace.is_none() && o.kind != "CustomResourceDefinition")
        // The user roles aggregated into admin/edit/view bind nothing themselves.
        .filter(|o| !(o.kind == "ClusterRole" && is_aggregated(o)))
        // The admission policies only take away (tests/tests/chart/admission_policy.rs).
        .filter(|o| !o.kind.starts_with("ValidatingAdmissionPolicy"))
        .map(|o| o.id())
        .collect();
    assert!(
        cluster_scoped.is_empty(),
        "namespaced mode renders cluster-scoped {cluster_scoped:?}"
    );
    for namespace in ["models-a", "models-b"] {
        let operator = rules_of(r, "Role", "tokenscale-operator", Some(namespace));
        assert_eq!(
            grants(&operator),
            expected(OPERATOR),
            "operator Role in {namespace}"
        );
        let gateway = rules_of(r, "Role", "tokenscale-gateway", Some(namespace));
        assert_eq!(
            grants(&gateway),
            expected(GATEWAY),
            "gateway Role in {namespace}"
        );
        for who in ["tokenscale-operator", "tokenscale-gateway"] {
            assert_eq!(
                binding_subject(r, "RoleBinding", who, Some(namespace)),
                (who.into(), who.into())
            );
        }
    }
    let lease = rules_of(
        r,
        "Role",
        "tokenscale-operator-leader-election",
        Some("tokenscale-system"),
    );
    assert_eq!(grants(&lease), expected(OPERATOR_LEASE));
    // The gateway lives in the release namespace, which is not watched: the operator may
    // still list its EndpointSlices there to scrape it, and nothing else.
    let scrape = rules_of(
        r,
        "Role",
        "tokenscale-operator-gateway-scrape",
        Some("tokenscale-system"),
    );
    assert_eq!(
        grants(&scrape),
        expected(&[("discovery.k8s.io", "endpointslices", &["list"])])
    );
    let args =
        r.get("Deployment", "tokenscale-operator").value["spec"]["template"]["spec"]["containers"]
            [0]["args"]
            .clone();
    let args: Vec<&str> = args
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(
        args.contains(&"--watch-namespaces=models-a,models-b"),
        "{args:?}"
    );
    assert!(
        args.contains(&"--lease-namespace=tokenscale-system"),
        "{args:?}"
    );
}

#[test]
fn the_default_is_namespaced_in_the_namespace_kubectl_uses_without_n() {
    let r = default_render();
    let cluster_roles: Vec<String> = r
        .of_kind("ClusterRole")
        .chain(r.of_kind("ClusterRoleBinding"))
        .filter(|o| !is_aggregated(o))
        .map(|o| o.id())
        .collect();
    assert!(cluster_roles.is_empty(), "{cluster_roles:?}");
    let operator = rules_of(r, "Role", "tokenscale-operator", Some("default"));
    assert_eq!(grants(&operator), expected(OPERATOR));
    let gateway = rules_of(r, "Role", "tokenscale-gateway", Some("default"));
    assert_eq!(grants(&gateway), expected(GATEWAY));
}

#[test]
fn an_empty_namespace_list_without_the_opt_in_or_a_list_with_it_is_refused() {
    let cases: [(&[&str], &str); 2] = [
        (&["watchNamespaces=null"], "set clusterWide: true"),
        (&["clusterWide=true"], "watchNamespaces lists default"),
    ];
    for (set, reason) in cases {
        let refused = Render {
            set,
            ..Default::default()
        }
        .template();
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains(reason)),
            "{set:?} was not refused with {reason:?}: {:?}",
            refused.map(|_| "rendered")
        );
    }
}

#[test]
fn the_operator_runs_two_replicas_with_leader_election() {
    let deployment = &default_render()
        .get("Deployment", "tokenscale-operator")
        .value;
    assert_eq!(deployment["spec"]["replicas"], 2);
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert!(
        args.as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--leader-election")),
        "{args}"
    );
}

#[test]
fn users_with_edit_manage_model_deployments_and_viewers_read_them() {
    let r = default_render();
    let edit = rules_of(r, "ClusterRole", "tokenscale-modeldeployments-edit", None);
    let edit = grants(&edit);
    for verb in [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ] {
        let grant = (
            "tokenscale.dev".to_string(),
            "modeldeployments".to_string(),
            verb.to_string(),
        );
        assert!(edit.contains(&grant), "edit lacks {verb}");
    }
    let view = grants(&rules_of(
        r,
        "ClusterRole",
        "tokenscale-modeldeployments-view",
        None,
    ));
    assert!(
        view.iter()
            .all(|(_, _, verb)| ["get", "list", "watch"].contains(&verb.as_str())),
        "{view:?}"
    );
    for name in [
        "tokenscale-modeldeployments-edit",
        "tokenscale-modeldeployments-view",
    ] {
        assert!(
            is_aggregated(r.get("ClusterRole", name)),
            "{name} is not aggregated"
        );
    }
}
