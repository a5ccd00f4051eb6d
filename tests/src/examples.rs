//! The `ModelDeployment`s of `examples/*.yaml`, read as the API server would return them
//! (namespace and uid filled in when a file has none), for the suites that run or render them.

use serde_json::Value;

use crate::tools::workspace_root;

/// Every `ModelDeployment` document in `examples/*.yaml`: `(file name, object)`, by file.
pub fn model_deployments() -> Vec<(String, Value)> {
    let dir = workspace_root().join("examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"));
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for mut doc in docs.into_iter().filter(|d| d["kind"] == "ModelDeployment") {
            let metadata = doc["metadata"]
                .as_object_mut()
                .unwrap_or_else(|| panic!("{}: no metadata", file.display()));
            metadata
                .entry("namespace")
                .or_insert_with(|| "default".into());
            metadata
                .entry("uid")
                .or_insert_with(|| "00000000-0000-0000-0000-000000000001".into());
            out.push((file.display().to_string(), doc));
        }
    }
    out
}
