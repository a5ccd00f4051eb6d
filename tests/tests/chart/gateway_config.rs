//! The gateway's config and tenants files as the chart renders them are accepted by the
//! gateway's own parser and validation, at the paths the Deployment mounts them. Every
//! render is checked and every refusal reported, not only the first.

use std::path::Path;

use serde_json::Value;
use tokenscale_gateway::config::{Config, TenantsFile};

use crate::{Rendered, renders, scratch_dir};

/// Where the gateway pod mounts volume `name`.
fn mount_path(pod: &Value, name: &str) -> Option<String> {
    let mounts = pod["containers"][0]["volumeMounts"].as_array()?;
    let mount = mounts.iter().find(|m| m["name"] == name)?;
    mount["mountPath"].as_str().map(str::to_owned)
}

/// The problems of one render's gateway config, tenants file and mounts.
fn problems(r: &Rendered, scratch: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let text = r.get("ConfigMap", "tokenscale-gateway").value["data"]["gateway.yaml"]
        .as_str()
        .unwrap_or_default();
    let pod = &r.get("Deployment", "tokenscale-gateway").value["spec"]["template"]["spec"];
    match Config::from_yaml(text) {
        Err(e) => out.push(format!("[{}] gateway.yaml refused: {e}\n{text}", r.label)),
        Ok(config) => {
            let dir = config.tenants_file.as_deref().and_then(Path::parent);
            let dir = dir.and_then(Path::to_str).map(str::to_owned);
            if dir != mount_path(pod, "tenants") {
                out.push(format!(
                    "[{}] tenants_file {dir:?} is not the Secret's mount",
                    r.label
                ));
            }
        }
    }
    let args: Vec<&str> = pod["containers"][0]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let config_arg = format!(
        "--config={}/gateway.yaml",
        mount_path(pod, "config").unwrap_or_default()
    );
    if !args.contains(&config_arg.as_str()) {
        out.push(format!("[{}] no {config_arg} in {args:?}", r.label));
    }
    for secret in r.of_kind("Secret") {
        let tenants = secret.value["stringData"]["tenants.yaml"]
            .as_str()
            .unwrap_or_default();
        let path = scratch.join(format!("{}-tenants.yaml", r.label));
        std::fs::write(&path, tenants).unwrap_or_else(|e| panic!("{e}"));
        if let Err(e) = TenantsFile::load(&path) {
            out.push(format!(
                "[{}] tenants.yaml refused: {e}\n{tenants}",
                r.label
            ));
        }
    }
    out
}

#[test]
fn every_rendered_gateway_config_and_tenants_file_is_accepted_by_the_gateway() {
    let scratch = scratch_dir("gateway-config");
    let found: Vec<String> = renders()
        .iter()
        .flat_map(|r| problems(r, &scratch))
        .collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_served_names_list_reaches_the_operator_and_the_gateway_alike() {
    let r = crate::ci_render("namespaced-values.yaml");
    let text = r.get("ConfigMap", "tokenscale-gateway").value["data"]["gateway.yaml"]
        .as_str()
        .unwrap_or_default();
    let config = Config::from_yaml(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let names = config
        .kubernetes
        .expect("kubernetes discovery")
        .served_names;
    assert!(names.allows("models-a", "llama-3-8b") && names.allows("models-b", "smollm2-135m"));
    assert!(!names.allows("models-b", "llama-3-8b"), "{text}");
    let operator = &r.get("Deployment", "tokenscale-operator").value["spec"]["template"]["spec"];
    let args: Vec<&str> = operator["containers"][0]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    for flag in [
        "--served-names=models-a=llama-3-*,meta-llama/*",
        "--served-names=models-b=qwen3-*",
        "--served-names=*=smollm2-135m",
    ] {
        assert!(args.contains(&flag), "{flag} not in {args:?}");
    }
}
