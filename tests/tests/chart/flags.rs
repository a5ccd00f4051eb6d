//! Every command-line flag the chart passes to the operator and the gateway is one their
//! `main.rs` declares (clap derives `--foo-bar` from a field `foo_bar`), in every render:
//! a renamed flag fails here, not in a crash-looping pod.

use serde_json::Value;
use tokenscale_e2e::tools::workspace_root;

use crate::renders;

/// (Deployment, its program's main.rs).
const PROGRAMS: [(&str, &str); 2] = [
    ("tokenscale-operator", "operator/src/main.rs"),
    ("tokenscale-gateway", "gateway/src/main.rs"),
];

/// `--foo-bar=1` → `foo_bar`.
fn field_of(arg: &str) -> Option<String> {
    let flag = arg.strip_prefix("--")?;
    Some(flag.split('=').next().unwrap_or(flag).replace('-', "_"))
}

#[test]
fn every_flag_the_chart_passes_is_declared_by_the_program() {
    for (deployment, main_rs) in PROGRAMS {
        let source = std::fs::read_to_string(workspace_root().join(main_rs))
            .unwrap_or_else(|e| panic!("{main_rs}: {e}"));
        for r in renders() {
            let container =
                &r.get("Deployment", deployment).value["spec"]["template"]["spec"]["containers"][0];
            let args: Vec<&str> = container["args"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            assert!(!args.is_empty(), "[{}] {deployment} has no args", r.label);
            for arg in args.iter().filter(|a| a.starts_with("--")) {
                let field = field_of(arg).unwrap_or_default();
                let declared = source
                    .lines()
                    .any(|l| l.trim_start().starts_with(&format!("{field}:")));
                assert!(
                    declared,
                    "[{}] {deployment} gets {arg}, but {main_rs} declares no `{field}` flag",
                    r.label
                );
            }
        }
    }
}

#[test]
fn flags_map_to_clap_field_names() {
    assert_eq!(
        field_of("--gateway-metrics-port=8080").as_deref(),
        Some("gateway_metrics_port")
    );
    assert_eq!(field_of("--log-json").as_deref(), Some("log_json"));
    assert_eq!(field_of("plain"), None);
}
