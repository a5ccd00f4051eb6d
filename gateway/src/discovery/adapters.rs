//! What a `ModelDeployment` says about LoRA adapters: the names its replicas serve beside the
//! model (`spec.model.adapters[].name` for our engine, `--lora-modules` in `engine.args` for
//! vLLM, as the operator tells vLLM users to pass them).

use kube::api::DynamicObject;

/// The adapter names `md`'s replicas serve, in declared order, each once.
pub fn adapters_of(md: &DynamicObject) -> Vec<String> {
    let spec = &md.data["spec"];
    let declared = spec["model"]["adapters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["name"].as_str().map(str::to_string));
    let args: Vec<&str> = spec["engine"]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str())
        .collect();
    let mut names: Vec<String> = Vec::new();
    for name in declared.chain(lora_modules(&args)) {
        if !name.is_empty() && !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The names vLLM's `--lora-modules` values give: `name=path`, or JSON
/// `{"name": …, "path": …}`; every value after the flag up to the next flag, and
/// `--lora-modules=value` too.
fn lora_modules(args: &[&str]) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for arg in args {
        let value = if let Some(value) = arg.strip_prefix("--lora-modules=") {
            inside = false;
            value
        } else if *arg == "--lora-modules" {
            inside = true;
            continue;
        } else if arg.starts_with("--") {
            inside = false;
            continue;
        } else if inside {
            arg
        } else {
            continue;
        };
        let name = match serde_json::from_str::<serde_json::Value>(value) {
            Ok(json) => json["name"].as_str().map(str::to_string),
            Err(_) => value.split_once('=').map(|(name, _)| name.to_string()),
        };
        names.extend(name);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `ModelDeployment` as the API server sends it, with `spec`.
    fn md(spec: serde_json::Value) -> DynamicObject {
        let object = serde_json::json!({
            "apiVersion": "tokenscale.dev/v1alpha1", "kind": "ModelDeployment",
            "metadata": {"name": "base"}, "spec": spec,
        });
        serde_json::from_value(object).expect("a ModelDeployment")
    }

    #[test]
    fn adapters_come_from_the_spec_and_from_vllms_lora_modules() {
        let ours = md(serde_json::json!({"model": {"adapters": [
            {"name": "sql", "source": "hf://org/sql"}, {"name": "legal", "source": "file:///a"}
        ]}}));
        assert_eq!(adapters_of(&ours), ["sql", "legal"]);
        let vllm = md(serde_json::json!({"engine": {"kind": "vllm", "args": [
            "--enable-lora", "--lora-modules", "sql=/a/sql", "{\"name\": \"chat\", \"path\": \"/a/c\"}",
            "--max-loras", "4", "--lora-modules=legal=/a/legal"
        ]}}));
        assert_eq!(adapters_of(&vllm), ["sql", "chat", "legal"]);
        assert!(adapters_of(&md(serde_json::json!({}))).is_empty());
    }
}
