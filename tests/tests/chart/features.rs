//! What each optional part of the chart renders: monitoring gated on the Prometheus
//! Operator's API, the engine NetworkPolicy, tenants from a Secret, the gateway HPA, the
//! `helm test` hook and the NOTES.

use serde_json::Value;
use tokenscale_e2e::chart::{Render, ci_values_files};

use crate::{ci_render, default_render, render};

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn monitors_render_only_when_enabled_and_the_monitoring_api_exists() {
    let file = ci_values_files()
        .into_iter()
        .find(|f| f.ends_with("monitoring-values.yaml"));
    let file = file.unwrap_or_else(|| panic!("no ci/monitoring-values.yaml"));
    let count =
        |r: &crate::Rendered| r.of_kind("ServiceMonitor").count() + r.of_kind("PodMonitor").count();
    let without_api = render(
        "monitoring, no API",
        &Render {
            values: Some(&file),
            ..Default::default()
        },
    );
    assert_eq!(
        count(&without_api),
        0,
        "monitors rendered without monitoring.coreos.com/v1"
    );
    let with_api = ci_render("monitoring-values.yaml");
    assert_eq!(
        with_api.of_kind("ServiceMonitor").count(),
        2,
        "gateway and operator ServiceMonitors"
    );
    assert_eq!(
        with_api.of_kind("PodMonitor").count(),
        1,
        "engine PodMonitor"
    );
    assert_eq!(count(default_render()), 0, "monitors are off by default");
    let monitor = with_api.get("ServiceMonitor", "tokenscale-gateway");
    assert_eq!(
        monitor.value["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
}

/// The peers the operator is told to admit to engine pods (`--engine-ingress-from`).
fn engine_ingress_from(r: &crate::Rendered) -> Option<Vec<Value>> {
    let container = &r.get("Deployment", "tokenscale-operator").value["spec"]["template"]["spec"]["containers"]
        [0];
    strings(&container["args"])
        .iter()
        .find_map(|a| a.strip_prefix("--engine-ingress-from="))
        .map(|json| serde_json::from_str(json).expect("the peers are a JSON list"))
}

#[test]
fn the_operator_gives_every_model_deployment_a_network_policy_admitting_only_the_gateway() {
    // On by default, for every namespace the operator manages: the operator creates the
    // policy beside each ModelDeployment (children/network_policy.rs), so the chart renders
    // none of its own and passes the peers.
    let peers = engine_ingress_from(default_render()).expect("on by default");
    let components: Vec<&str> = peers
        .iter()
        .filter_map(|peer| {
            peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"].as_str()
        })
        .collect();
    assert_eq!(components, ["gateway", "operator"]);
    for peer in &peers {
        assert_eq!(
            peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "tokenscale-system",
            "only the release's own gateway and operator: {peer}"
        );
        // The operator parses each peer as a Kubernetes NetworkPolicyPeer.
        let typed: Result<k8s_openapi::api::networking::v1::NetworkPolicyPeer, _> =
            serde_json::from_value(peer.clone());
        assert!(typed.is_ok(), "{peer}");
    }
    // The chart's own Redis has one (only the gateway may reach it); none for engines.
    let policies = default_render().of_kind("NetworkPolicy");
    assert_eq!(policies.filter(|p| !p.name.ends_with("-redis")).count(), 0);
    // The operator may create and patch NetworkPolicies, cluster-wide or in each namespace.
    let may_apply = |r: &crate::Rendered, kind: &str| {
        r.of_kind(kind).any(|role| {
            role.value["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|rule| {
                    strings(&rule["resources"]) == ["networkpolicies"]
                        && strings(&rule["verbs"]) == ["create", "patch"]
                })
        })
    };
    assert!(may_apply(default_render(), "Role"));
    assert!(may_apply(
        ci_render("cluster-wide-values.yaml"),
        "ClusterRole"
    ));
    assert!(may_apply(ci_render("namespaced-values.yaml"), "Role"));
    let with_scraper = engine_ingress_from(ci_render("networkpolicy-values.yaml")).expect("on");
    assert_eq!(
        with_scraper.len(),
        3,
        "gateway, operator and the extra scraper"
    );
    // Turned off: no flag and no permission.
    let off = render(
        "networkpolicy-off",
        &Render {
            set: &["networkPolicy.enabled=false"],
            ..Render::default()
        },
    );
    assert_eq!(engine_ingress_from(&off), None);
    assert!(!may_apply(&off, "ClusterRole"));
}

/// The tenants volume of the gateway Deployment: (secret name, key).
fn tenants_volume(r: &crate::Rendered) -> (String, String) {
    let pod = &r.get("Deployment", "tokenscale-gateway").value["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "tenants");
    let secret = &volume.unwrap_or_else(|| panic!("[{}] no tenants volume", r.label))["secret"];
    (
        secret["secretName"].as_str().unwrap_or_default().into(),
        secret["items"][0]["key"]
            .as_str()
            .unwrap_or_default()
            .into(),
    )
}

#[test]
fn tenants_come_from_an_existing_secret_or_one_the_chart_creates_with_key_hashes() {
    let existing = ci_render("existing-secret-values.yaml");
    // (The chart's Redis, on for the autoscaled pods, has its own password Secret.)
    assert_eq!(
        existing
            .of_kind("Secret")
            .filter(|s| !s.name.ends_with("-redis-password"))
            .count(),
        0,
        "no chart Secret when one exists"
    );
    assert_eq!(
        tenants_volume(existing),
        ("tokenscale-tenants".into(), "tenants.yaml".into())
    );
    let created = ci_render("tenants-values.yaml");
    let secret = created.get("Secret", "tokenscale-gateway-tenants");
    assert_eq!(
        tenants_volume(created),
        ("tokenscale-gateway-tenants".into(), "tenants.yaml".into())
    );
    let file = secret.value["stringData"]["tenants.yaml"]
        .as_str()
        .unwrap_or_default();
    let tenants: Value =
        serde_saphyr::from_str(file).unwrap_or_else(|e| panic!("tenants.yaml: {e}\n{file}"));
    let keys: Vec<&str> = tenants["tenants"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| strings(&t["keys"]))
        .collect();
    assert_eq!(keys.len(), 1);
    assert!(
        keys.iter()
            .all(|k| k.starts_with("sha256:") && k.len() == 71),
        "{keys:?}"
    );
}

#[test]
fn the_gateway_hpa_scales_on_cpu_and_replaces_fixed_replicas() {
    let r = ci_render("existing-secret-values.yaml");
    let hpa = &r.get("HorizontalPodAutoscaler", "tokenscale-gateway").value["spec"];
    assert_eq!(hpa["scaleTargetRef"]["name"], "tokenscale-gateway");
    assert_eq!(hpa["metrics"][0]["resource"]["name"], "cpu");
    assert_eq!(
        (hpa["minReplicas"].as_i64(), hpa["maxReplicas"].as_i64()),
        (Some(3), Some(12))
    );
    assert!(
        r.get("Deployment", "tokenscale-gateway").value["spec"]
            .get("replicas")
            .is_none()
    );
    assert_eq!(
        default_render().of_kind("HorizontalPodAutoscaler").count(),
        0
    );
    assert_eq!(
        default_render()
            .get("Deployment", "tokenscale-gateway")
            .value["spec"]["replicas"],
        2
    );
    assert_eq!(
        default_render()
            .get("PodDisruptionBudget", "tokenscale-gateway")
            .value["spec"]["maxUnavailable"],
        1
    );
}

#[test]
fn the_helm_test_hook_calls_the_gateways_models_endpoint() {
    for r in [default_render(), ci_render("existing-secret-values.yaml")] {
        let pod = r
            .of_kind("Pod")
            .find(|p| p.value["metadata"]["annotations"]["helm.sh/hook"] == "test");
        let pod = &pod
            .unwrap_or_else(|| panic!("[{}] no helm test Pod", r.label))
            .value;
        let container = &pod["spec"]["containers"][0];
        let env = container["env"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        let url = env
            .iter()
            .find(|e| e["name"] == "GATEWAY_URL")
            .and_then(|e| e["value"].as_str());
        assert_eq!(url, Some("http://tokenscale-gateway:80"), "[{}]", r.label);
        assert!(
            strings(&container["args"])
                .concat()
                .contains("$GATEWAY_URL/v1/models")
        );
        let keyed = env.iter().any(|e| e["name"] == "API_KEY");
        assert_eq!(
            keyed,
            r.label.starts_with("existing-secret"),
            "[{}] API key from tests.apiKeySecret",
            r.label
        );
    }
}

#[test]
fn the_notes_give_the_next_commands() {
    let out = Render::default()
        .install_dry_run()
        .unwrap_or_else(|e| panic!("{e}"));
    let notes = out
        .split("NOTES:")
        .nth(1)
        .unwrap_or_else(|| panic!("no NOTES in:\n{out}"));
    for expected in [
        // The first watched namespace: `default` unless watchNamespaces says otherwise.
        "kubectl apply -n default -f examples/",
        "kubectl get md",
        "service/tokenscale-gateway",
        "/v1/models",
        "helm test tokenscale",
    ] {
        assert!(
            notes.contains(expected),
            "NOTES lack {expected:?}:\n{notes}"
        );
    }
}

#[test]
fn shared_limits_use_the_charts_redis_or_yours_and_the_engine_key_reaches_the_gateway() {
    let r = ci_render("redis-values.yaml");
    let redis = r.get("Deployment", "tokenscale-redis");
    assert_eq!(redis.value["spec"]["replicas"], 1);
    assert_eq!(
        r.get("Service", "tokenscale-redis").value["spec"]["ports"][0]["port"],
        6379
    );
    let config: Value = serde_saphyr::from_str(
        r.get("ConfigMap", "tokenscale-gateway").value["data"]["gateway.yaml"]
            .as_str()
            .unwrap_or_default(),
    )
    .expect("gateway.yaml");
    assert_eq!(config["limits"]["store"], "redis");
    assert_eq!(
        config["limits"]["redis_url"],
        "redis://tokenscale-redis.tokenscale-system.svc:6379/0"
    );
    assert_eq!(
        config["upstream"]["engine_api_key_env"],
        "TOKENSCALE_ENGINE_API_KEY"
    );
    let env = &r.get("Deployment", "tokenscale-gateway").value["spec"]["template"]["spec"]["containers"]
        [0]["env"];
    let names: Vec<&str> = env
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(names.contains(&"POD_NAME") && names.contains(&"TOKENSCALE_ENGINE_API_KEY"));
    // Your own Redis instead: no Redis of the chart's, its URL in the config.
    let yours = render(
        "redis-url",
        &Render {
            set: &["redis.url=rediss://redis.example:6380/2"],
            ..Render::default()
        },
    );
    assert_eq!(
        yours
            .of_kind("Deployment")
            .filter(|d| d.name.contains("redis"))
            .count(),
        0
    );
    assert!(
        yours.get("ConfigMap", "tokenscale-gateway").value["data"]["gateway.yaml"]
            .as_str()
            .unwrap_or_default()
            .contains("rediss://redis.example:6380/2")
    );
    // The defaults' two gateway pods share through the chart's Redis too (chart/redis.rs).
    assert_eq!(
        default_render()
            .of_kind("Deployment")
            .filter(|d| d.name.contains("redis"))
            .count(),
        1
    );
}
