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

#[test]
fn the_engine_network_policy_admits_only_the_gateway_and_the_operator() {
    let r = ci_render("networkpolicy-values.yaml");
    let policies: Vec<_> = r.of_kind("NetworkPolicy").collect();
    let namespaces: Vec<_> = policies
        .iter()
        .filter_map(|p| p.namespace.as_deref())
        .collect();
    assert_eq!(namespaces, ["default", "models"]);
    let spec = &policies[0].value["spec"];
    // The label every engine pod carries (tokenscale_operator::children::selector_labels).
    assert_eq!(
        spec["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "tokenscale-engine"
    );
    assert_eq!(strings(&spec["policyTypes"]), ["Ingress"]);
    let rules = spec["ingress"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    assert_eq!(rules.len(), 1);
    assert_eq!(
        rules[0]["ports"][0]["port"],
        tokenscale_operator::children::ENGINE_PORT
    );
    let components: Vec<&str> = rules[0]["from"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|peer| {
            peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"].as_str()
        })
        .collect();
    assert_eq!(components, ["gateway", "operator"]);
    let peers = rules[0]["from"]
        .as_array()
        .map(Vec::len)
        .unwrap_or_default();
    assert_eq!(
        peers, 3,
        "gateway, operator and the one extra scraper of the values file"
    );
    assert_eq!(
        default_render().of_kind("NetworkPolicy").count(),
        0,
        "off by default"
    );
    let namespaced = ci_render("namespaced-values.yaml");
    let watched: Vec<_> = namespaced
        .of_kind("NetworkPolicy")
        .filter_map(|p| p.namespace.as_deref())
        .collect();
    assert_eq!(
        watched,
        ["models-a", "models-b"],
        "namespaced mode: a policy per watched namespace"
    );
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
    assert_eq!(
        existing.of_kind("Secret").count(),
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
        "kubectl apply -n tokenscale-system -f examples/",
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
