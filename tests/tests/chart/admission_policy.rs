//! The operator's ValidatingAdmissionPolicies, evaluated as the API server would: every
//! expression of the rendered chart runs in a CEL interpreter (cel-interpreter) against the
//! Deployments `engine_deployment` renders for the examples (all admitted) and against
//! copies changed one way each (each denied by its own rule, and only by it). Rendered for
//! Kubernetes 1.30, where the API is GA; on 1.29 only where the cluster serves its v1beta1.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel_interpreter::{Context, Program, Value};
use serde_json::{Value as Json, json};
use tokenscale_operator::children::engine_deployment;

use crate::chart::engine_pods::examples;
use tokenscale_e2e::chart::Render;

use crate::{Rendered, render, render_set};

/// The chart's defaults as a 1.30 cluster (the policy API's GA) gets them, rendered once.
fn default_render() -> &'static Rendered {
    static RENDER: OnceLock<Rendered> = OnceLock::new();
    RENDER.get_or_init(|| {
        let at = Render {
            kube_version: Some("1.30.0"),
            ..Render::default()
        };
        render("kubernetes-1.30", &at)
    })
}

/// The operator's user, as the default render (release namespace tokenscale-system) names it.
const OPERATOR: &str = "system:serviceaccount:tokenscale-system:tokenscale-operator";

/// A JSON value as CEL sees it: integers are `int`, objects are maps.
fn cel(value: &Json) -> Value {
    match value {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => n
            .as_i64()
            .map(Value::Int)
            .unwrap_or_else(|| Value::Float(n.as_f64().unwrap_or(f64::NAN))),
        Json::String(s) => Value::String(Arc::new(s.clone())),
        Json::Array(items) => Value::List(Arc::new(items.iter().map(cel).collect())),
        Json::Object(map) => {
            let map: HashMap<String, Value> =
                map.iter().map(|(k, v)| (k.clone(), cel(v))).collect();
            map.into()
        }
    }
}

/// One admission request: who, which operation, the new and the old object.
struct Request<'a> {
    user: &'a str,
    operation: &'a str,
    object: &'a Json,
    old: Option<&'a Json>,
}

/// Evaluates `source` in `context`; an error or a non-bool counts as false, as
/// failurePolicy: Fail makes it deny.
fn holds(source: &str, context: &Context) -> bool {
    let program = Program::compile(source).unwrap_or_else(|e| panic!("{source}: {e:?}"));
    matches!(program.execute(context), Ok(Value::Bool(true)))
}

/// What the policy `name` says of `request`: None when its matchConditions do not select it,
/// else the messages of the validations that deny it (empty: admitted).
fn verdict(rendered: &Rendered, name: &str, request: &Request) -> Option<Vec<String>> {
    let spec = &rendered.get("ValidatingAdmissionPolicy", name).value["spec"];
    let mut context = Context::default();
    context.add_variable_from_value("object", cel(request.object));
    context.add_variable_from_value("oldObject", request.old.map_or(Value::Null, cel));
    let req = json!({"operation": request.operation, "userInfo": {"username": request.user}});
    context.add_variable_from_value("request", cel(&req));
    let conditions = spec["matchConditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !conditions
        .iter()
        .all(|c| holds(c["expression"].as_str().unwrap_or("false"), &context))
    {
        return None;
    }
    let mut variables: HashMap<String, Value> = HashMap::new();
    for variable in spec["variables"].as_array().into_iter().flatten() {
        let source = variable["expression"].as_str().unwrap_or_default();
        let program = Program::compile(source).unwrap_or_else(|e| panic!("{source}: {e:?}"));
        let value = program.execute(&context).unwrap_or(Value::Null);
        variables.insert(variable["name"].as_str().unwrap_or_default().into(), value);
    }
    context.add_variable_from_value("variables", variables);
    let validations = spec["validations"].as_array().cloned().unwrap_or_default();
    assert!(!validations.is_empty(), "{name} has no validations");
    Some(
        validations
            .iter()
            .filter(|v| !holds(v["expression"].as_str().unwrap_or("false"), &context))
            .map(|v| v["message"].as_str().unwrap_or_default().to_string())
            .collect(),
    )
}

/// The engine Deployment of every example, as JSON.
fn rendered_deployments() -> Vec<(String, Json)> {
    examples()
        .into_iter()
        .map(|(file, md)| {
            let deployment = engine_deployment(&md, 2).unwrap_or_else(|e| panic!("{file}: {e}"));
            let value = serde_json::to_value(&deployment).unwrap_or_else(|e| panic!("{e}"));
            (file, value)
        })
        .collect()
}

/// The denials of the Deployment policy for the operator creating `object`.
fn denials(object: &Json) -> Vec<String> {
    let request = Request {
        user: OPERATOR,
        operation: "CREATE",
        object,
        old: None,
    };
    verdict(
        default_render(),
        "tokenscale-operator-deployments",
        &request,
    )
    .unwrap_or_else(|| panic!("the operator's request was not matched"))
}

#[test]
fn every_deployment_the_operator_renders_is_admitted_on_create_and_update() {
    let deployments = rendered_deployments();
    assert!(deployments.len() >= 3, "{} examples", deployments.len());
    for (file, object) in &deployments {
        for (operation, old) in [("CREATE", None), ("UPDATE", Some(object))] {
            let request = Request {
                user: OPERATOR,
                operation,
                object,
                old,
            };
            let verdict = verdict(
                default_render(),
                "tokenscale-operator-deployments",
                &request,
            );
            assert_eq!(verdict, Some(vec![]), "{file} {operation}");
        }
    }
}

/// One change to a rendered Deployment and the rule (its message) that must deny it.
type Mutation = (&'static str, fn(&mut Json), &'static str);

const MUTATIONS: &[Mutation] = &[
    (
        "no owner reference",
        |d| d["metadata"]["ownerReferences"] = json!([]),
        "controlled by a ModelDeployment",
    ),
    (
        "owner not the controller",
        |d| d["metadata"]["ownerReferences"][0]["controller"] = json!(false),
        "controlled by a ModelDeployment",
    ),
    (
        "owner of another kind",
        |d| d["metadata"]["ownerReferences"][0]["kind"] = json!("ReplicaSet"),
        "controlled by a ModelDeployment",
    ),
    (
        "another service account",
        |d| pod(d)["serviceAccountName"] = json!("cluster-admin-sa"),
        "default service account",
    ),
    (
        "the deprecated serviceAccount",
        |d| pod(d)["serviceAccount"] = json!("builder"),
        "default service account",
    ),
    (
        "a mounted token",
        |d| pod(d)["automountServiceAccountToken"] = json!(true),
        "default service account",
    ),
    (
        "a hostPath volume",
        |d| {
            push(
                &mut pod(d)["volumes"],
                json!({"name": "root", "hostPath": {"path": "/"}}),
            )
        },
        "no hostPath",
    ),
    (
        "a secret volume",
        |d| {
            push(
                &mut pod(d)["volumes"],
                json!({"name": "s", "secret": {"secretName": "x"}}),
            )
        },
        "no hostPath",
    ),
    (
        "host network",
        |d| pod(d)["hostNetwork"] = json!(true),
        "host network",
    ),
    (
        "host PID",
        |d| pod(d)["hostPID"] = json!(true),
        "host network",
    ),
    (
        "pod may run as root",
        |d| pod(d)["securityContext"]["runAsNonRoot"] = json!(false),
        "non-root",
    ),
    (
        "privileged",
        |d| container(d)["securityContext"]["privileged"] = json!(true),
        "engine containers run unprivileged",
    ),
    (
        "privilege escalation",
        |d| container(d)["securityContext"]["allowPrivilegeEscalation"] = json!(true),
        "engine containers run unprivileged",
    ),
    (
        "an added capability",
        |d| container(d)["securityContext"]["capabilities"]["add"] = json!(["SYS_ADMIN"]),
        "engine containers run unprivileged",
    ),
    (
        "container as root",
        |d| container(d)["securityContext"]["runAsUser"] = json!(0),
        "engine containers run unprivileged",
    ),
    (
        "a host port",
        |d| container(d)["ports"][0]["hostPort"] = json!(80),
        "engine containers run unprivileged",
    ),
    (
        "no security context",
        |d| {
            container(d)
                .as_object_mut()
                .map(|c| c.remove("securityContext"));
        },
        "engine containers run unprivileged",
    ),
    (
        "a privileged init container",
        |d| {
            pod(d)["initContainers"] =
                json!([{"name": "i", "image": "busybox", "securityContext": {"privileged": true}}])
        },
        "engine initContainers run unprivileged",
    ),
];

fn pod(deployment: &mut Json) -> &mut Json {
    &mut deployment["spec"]["template"]["spec"]
}

fn container(deployment: &mut Json) -> &mut Json {
    &mut pod(deployment)["containers"][0]
}

fn push(list: &mut Json, item: Json) {
    if let Some(items) = list.as_array_mut() {
        items.push(item);
    } else {
        *list = json!([item]);
    }
}

#[test]
fn each_forbidden_shape_is_denied_by_its_own_rule_only() {
    let (file, rendered) = rendered_deployments()
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no example"));
    for (what, mutate, rule) in MUTATIONS {
        let mut object = rendered.clone();
        mutate(&mut object);
        let denied = denials(&object);
        assert_eq!(denied.len(), 1, "{file} with {what}: {denied:?}");
        assert!(
            denied[0].contains(rule),
            "{what}: denied by {denied:?}, want {rule:?}"
        );
    }
}

#[test]
fn an_update_may_not_take_over_a_deployment_no_model_deployment_controls() {
    let (_, owned) = rendered_deployments().swap_remove(0);
    let mut foreign = owned.clone();
    foreign["metadata"]["ownerReferences"] = json!([]);
    let request = Request {
        user: OPERATOR,
        operation: "UPDATE",
        object: &owned,
        old: Some(&foreign),
    };
    let denied = verdict(
        default_render(),
        "tokenscale-operator-deployments",
        &request,
    );
    assert_eq!(
        denied,
        Some(vec![
            "the operator may only change Deployments a ModelDeployment already controls".into()
        ])
    );
}

#[test]
fn only_the_operators_own_requests_are_matched() {
    let (_, mut object) = rendered_deployments().swap_remove(0);
    object["spec"]["template"]["spec"]["hostNetwork"] = json!(true);
    for user in [
        "system:serviceaccount:default:tokenscale-operator",
        "system:serviceaccount:tokenscale-system:tokenscale-gateway",
        "kubernetes-admin",
    ] {
        let request = Request {
            user,
            operation: "CREATE",
            object: &object,
            old: None,
        };
        let verdict = verdict(
            default_render(),
            "tokenscale-operator-deployments",
            &request,
        );
        assert_eq!(verdict, None, "{user} was matched");
    }
}

#[test]
fn the_operator_may_annotate_a_pod_but_not_change_its_spec_or_create_one() {
    let pod = json!({
        "metadata": {"name": "engine-0", "annotations": {}},
        "spec": {"containers": [{"name": "engine", "image": "tokenscale/engine:0.1.0"}]},
    });
    let mut annotated = pod.clone();
    annotated["metadata"]["annotations"]["controller.kubernetes.io/pod-deletion-cost"] =
        json!("-100");
    let mut swapped = annotated.clone();
    swapped["spec"]["containers"][0]["image"] = json!("attacker/miner:latest");
    let cases = [
        ("UPDATE", &annotated, Some(&pod), true),
        ("UPDATE", &swapped, Some(&pod), false),
        ("CREATE", &pod, None, false),
    ];
    for (operation, object, old, admitted) in cases {
        let request = Request {
            user: OPERATOR,
            operation,
            object,
            old,
        };
        let verdict = verdict(default_render(), "tokenscale-operator-pods", &request)
            .unwrap_or_else(|| panic!("the operator's pod request was not matched"));
        assert_eq!(
            verdict.is_empty(),
            admitted,
            "{operation} {object}: {verdict:?}"
        );
    }
}

#[test]
fn the_policies_can_be_switched_off_for_a_cluster_without_the_api() {
    let off = render_set(
        "no-admission-policy",
        &["operator.admissionPolicy.enabled=false"],
    );
    let kinds = [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ];
    let left: Vec<String> = kinds
        .iter()
        .flat_map(|kind| off.of_kind(kind).map(|o| o.id()))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let on = default_render();
    for name in [
        "tokenscale-operator-deployments",
        "tokenscale-operator-pods",
    ] {
        let binding = &on.get("ValidatingAdmissionPolicyBinding", name).value["spec"];
        assert_eq!(binding["policyName"], name);
        assert_eq!(binding["validationActions"], json!(["Deny"]));
    }
}

#[test]
fn on_kubernetes_1_29_the_policies_are_v1beta1_where_served_and_left_out_elsewhere() {
    let at_1_29 = Render {
        kube_version: Some("1.29.0"),
        ..Render::default()
    };
    // `helm template` offers no kind of the beta API: a 1.29 cluster with it off.
    let plain = render("kubernetes-1.29", &at_1_29);
    let left: Vec<String> = plain
        .objects
        .iter()
        .filter(|o| o.kind.starts_with("ValidatingAdmissionPolicy"))
        .map(|o| o.id())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // Everything else is rendered as on newer clusters: the engine Deployments' writer too.
    assert_eq!(
        plain.of_kind("Deployment").count(),
        default_render().of_kind("Deployment").count()
    );
    let ga = default_render()
        .of_kind("ValidatingAdmissionPolicy")
        .map(|o| o.value["apiVersion"].clone())
        .collect::<Vec<_>>();
    assert_eq!(
        ga,
        vec![json!("admissionregistration.k8s.io/v1"); 2],
        "1.30 and newer: the GA API"
    );
    let served = Render {
        api_versions: &["admissionregistration.k8s.io/v1beta1/ValidatingAdmissionPolicy"],
        ..at_1_29
    };
    let beta = render("kubernetes-1.29-beta", &served);
    let mut versions: Vec<String> = beta
        .objects
        .iter()
        .filter(|o| o.kind.starts_with("ValidatingAdmissionPolicy"))
        .map(|o| {
            format!(
                "{} {}",
                o.value["apiVersion"].as_str().unwrap_or("?"),
                o.kind
            )
        })
        .collect();
    versions.sort();
    assert_eq!(
        versions,
        [
            "admissionregistration.k8s.io/v1beta1 ValidatingAdmissionPolicy",
            "admissionregistration.k8s.io/v1beta1 ValidatingAdmissionPolicy",
            "admissionregistration.k8s.io/v1beta1 ValidatingAdmissionPolicyBinding",
            "admissionregistration.k8s.io/v1beta1 ValidatingAdmissionPolicyBinding",
        ]
    );
}

#[test]
fn the_cache_fill_job_is_matched_and_admitted_like_the_deployments() {
    let policy = &default_render()
        .get(
            "ValidatingAdmissionPolicy",
            "tokenscale-operator-deployments",
        )
        .value["spec"]["matchConstraints"]["resourceRules"];
    assert!(
        policy
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| { r["apiGroups"] == json!(["batch"]) && r["resources"] == json!(["jobs"]) }),
        "{policy}"
    );
    let jobs: Vec<(String, Json)> = examples()
        .into_iter()
        .filter_map(|(file, md)| {
            let job = tokenscale_operator::children::cache::fill_job(&md)
                .unwrap_or_else(|e| panic!("{file}: {e}"))?;
            Some((
                file,
                serde_json::to_value(&job).unwrap_or_else(|e| panic!("{e}")),
            ))
        })
        .collect();
    assert!(!jobs.is_empty(), "no example fills its cache");
    for (file, job) in &jobs {
        assert_eq!(denials(job), Vec::<String>::new(), "{file}");
    }
    // The same rules hold: a Job mounting a host path is denied.
    let (_, mut job) = jobs[0].clone();
    push(
        &mut pod(&mut job)["volumes"],
        json!({"name": "host", "hostPath": {"path": "/"}}),
    );
    assert_eq!(
        denials(&job),
        ["engine pods mount only emptyDir and persistentVolumeClaim volumes (no hostPath)"]
    );
}
