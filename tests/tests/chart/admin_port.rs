//! The gateway's `/metrics` names every model and tenant, so the chart serves it only on the
//! gateway's admin port: its own container port and ClusterIP Service, scraped there by the
//! ServiceMonitor and the operator, never on the front-door Service (issue 36).

use serde_json::Value;

use crate::{ci_render, renders};

/// The strings of a JSON list (empty when absent).
fn strings(list: &Value) -> Vec<&str> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// Whether every label `selector` asks for is on `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .into_iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value))
}

#[test]
fn metrics_are_served_scraped_and_published_on_the_admin_port_only() {
    for r in renders() {
        let label = &r.label;
        let gateway = &r.get("Deployment", "tokenscale-gateway").value["spec"]["template"]["spec"]
            ["containers"][0];
        let port_named = |name: &str| {
            gateway["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == name)
                .and_then(|p| p["containerPort"].as_i64())
                .unwrap_or_else(|| panic!("[{label}] the gateway has no {name:?} port"))
        };
        let (api, admin) = (port_named("http"), port_named("metrics"));
        assert_ne!(api, admin, "[{label}] one port for the API and /metrics");
        let args = strings(&gateway["args"]);
        assert!(
            args.contains(&format!("--admin-listen=0.0.0.0:{admin}").as_str()),
            "[{label}] the gateway's admin listener is not on its metrics port: {args:?}"
        );

        let front = &r.get("Service", "tokenscale-gateway").value["spec"];
        for port in front["ports"].as_array().into_iter().flatten() {
            assert_eq!(port["targetPort"], "http", "[{label}] front door: {port}");
        }
        let admin_service = &r.get("Service", "tokenscale-gateway-admin").value;
        assert_eq!(admin_service["spec"]["type"], "ClusterIP", "[{label}]");
        assert_eq!(
            admin_service["spec"]["ports"][0]["targetPort"], "metrics",
            "[{label}]"
        );

        let operator = &r.get("Deployment", "tokenscale-operator").value["spec"]["template"]["spec"]
            ["containers"][0];
        if let Some(port) = strings(&operator["args"])
            .iter()
            .find_map(|a| a.strip_prefix("--gateway-metrics-port="))
        {
            assert_eq!(
                port,
                admin.to_string(),
                "[{label}] the operator scrapes another port"
            );
        }
    }

    let monitoring = ci_render("monitoring-values.yaml");
    let monitor = &monitoring.get("ServiceMonitor", "tokenscale-gateway").value["spec"];
    assert_eq!(monitor["endpoints"][0]["port"], "metrics");
    let selector = &monitor["selector"]["matchLabels"];
    let labels = |name| &monitoring.get("Service", name).value["metadata"]["labels"];
    assert!(selects(selector, labels("tokenscale-gateway-admin")));
    assert!(
        !selects(selector, labels("tokenscale-gateway")),
        "the ServiceMonitor also selects the front-door Service"
    );
}
