//! The generated CRD is current, every example validates against its schema (plus the CEL
//! rules, mirrored in Rust), and invalid manifests are rejected with clear messages.
//!
//! No API server runs here: the OpenAPI schema is checked with a JSON-schema validator, made
//! strict about unknown fields the way `kubectl apply --validate=strict` is, and the CEL
//! rules are checked by the Rust mirror in `ModelDeploymentSpec::problems`.

use std::path::{Path, PathBuf};

use kube::CustomResourceExt;
use serde_json::Value;
use tokenscale_operator::crd::generate::all_files;
use tokenscale_operator::crd::spec::{Backend, DEFAULT_CUDA_IMAGE, DEFAULT_IMAGE, EngineKind};
use tokenscale_operator::crd::{ModelDeployment, ModelRoute};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The CEL rules of the CRD, each mirrored by a check in `ModelDeploymentSpec::problems`.
const MIRRORED_RULES: &[&str] = &[
    "self.min <= self.max",
    "!has(self.desired) || (self.desired >= self.min && self.desired <= self.max)",
    "self.backend == 'cuda' || !has(self.gpusPerReplica) || self.gpusPerReplica == 0",
    "(has(self.kind) && self.kind != 'tokenscale') || !has(self.gpusPerReplica) || self.gpusPerReplica <= 1",
];

fn crd_schema() -> Value {
    schema_of(ModelDeployment::crd())
}

/// A CRD's schema as the API server applies it to an object, strict.
fn schema_of(
    crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Value {
    let crd = serde_json::to_value(crd).expect("CRD serialises");
    let mut schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
    // The API server knows these top-level fields without the CRD listing them.
    for (field, kind) in [
        ("apiVersion", "string"),
        ("kind", "string"),
        ("metadata", "object"),
    ] {
        schema["properties"][field] = serde_json::json!({ "type": kind });
    }
    make_strict(&mut schema);
    schema
}

/// Kubernetes' strict field validation rejects unknown fields; JSON schema does that with
/// `additionalProperties: false` on every object that lists its properties.
fn make_strict(schema: &mut Value) {
    if let Value::Object(map) = schema {
        let preserves = map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
        if map.contains_key("properties") && !preserves {
            map.insert("additionalProperties".into(), Value::Bool(false));
        }
        for value in map.values_mut() {
            make_strict(value);
        }
    } else if let Value::Array(items) = schema {
        items.iter_mut().for_each(make_strict);
    }
}

fn collect_rules(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Array(rules)) = map.get("x-kubernetes-validations") {
                out.extend(
                    rules
                        .iter()
                        .filter_map(|r| r["rule"].as_str().map(String::from)),
                );
            }
            map.values().for_each(|v| collect_rules(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_rules(v, out)),
        _ => {}
    }
}

/// Every problem with a manifest, as messages: schema errors first, then the typed parse
/// and the CEL mirror.
fn problems(manifest: &str) -> Vec<String> {
    let value: Value = match serde_saphyr::from_str(manifest) {
        Ok(v) => v,
        Err(e) => return vec![format!("not YAML: {e}")],
    };
    let schema = crd_schema();
    let validator = jsonschema::validator_for(&schema).expect("the CRD schema compiles");
    let mut out: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    match serde_json::from_value::<ModelDeployment>(value) {
        Ok(md) => out.extend(md.spec.problems().iter().map(ToString::to_string)),
        Err(e) => out.push(format!("typed parse: {e}")),
    }
    out
}

#[test]
fn generated_crd_files_are_current() {
    for (path, fresh) in all_files().expect("CRDs render") {
        let on_disk = std::fs::read_to_string(root().join(path)).unwrap_or_default();
        assert!(
            on_disk == fresh,
            "{path} is stale: run `cargo run -p tokenscale-operator --bin crdgen` and commit the result"
        );
    }
}

#[test]
fn crd_has_names_subresources_columns_and_every_cel_rule_is_mirrored() {
    let crd = serde_json::to_value(ModelDeployment::crd()).expect("CRD serialises");
    assert_eq!(crd["spec"]["group"], "tokenscale.dev");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(
        crd["spec"]["names"]["shortNames"],
        serde_json::json!(["md"])
    );
    let version = &crd["spec"]["versions"][0];
    assert_eq!(version["name"], "v1alpha1");
    assert!(version["subresources"]["status"].is_object());
    assert_eq!(
        version["subresources"]["scale"]["labelSelectorPath"],
        ".status.selector"
    );
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        columns,
        [
            "Model",
            "Engine",
            "Ready",
            "Desired",
            "Tokens/s/GPU",
            "P95 TTFT",
            "SLO",
            "SLO 1h",
            "Goodput",
            "Age"
        ]
    );
    let mut rules = Vec::new();
    collect_rules(&version["schema"], &mut rules);
    rules.sort();
    let mut mirrored: Vec<String> = MIRRORED_RULES.iter().map(|r| r.to_string()).collect();
    mirrored.sort();
    assert_eq!(
        rules, mirrored,
        "a CEL rule was added or changed: mirror it in crd/src/validate.rs"
    );
}

/// The problems of one `ModelRoute` document: its CRD's schema, then the typed parse.
fn route_problems(value: Value) -> Vec<String> {
    let schema = schema_of(ModelRoute::crd());
    let validator = jsonschema::validator_for(&schema).expect("the CRD schema compiles");
    let mut out: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    if let Err(e) = serde_json::from_value::<ModelRoute>(value) {
        out.push(format!("typed parse: {e}"));
    }
    out
}

#[test]
fn every_example_validates() {
    let dir = root().join("examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/ exists") {
        let path = entry.expect("readable entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable example");
        // A file may hold several documents: the models and the routes over them.
        let documents: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
        for document in documents.into_iter().filter(|d| !d.is_null()) {
            let found = match document["kind"].as_str() {
                Some("ModelRoute") => route_problems(document),
                _ => problems(&serde_json::to_string(&document).expect("JSON")),
            };
            assert!(found.is_empty(), "{}: {found:#?}", path.display());
            checked += 1;
        }
    }
    assert!(
        checked >= 3,
        "expected the SmolLM2, GPU and sim examples, found {checked}"
    );
}

/// The engine image each backend runs by default, and the one the examples name, are the
/// tags docker/engine.Dockerfile documents: the CUDA libraries are only in `-cuda12.9`.
#[test]
fn engine_images_follow_the_backend_and_the_dockerfile_tags() {
    let parse = |manifest: &str| -> ModelDeployment {
        serde_saphyr::from_str(manifest).expect("test manifest parses")
    };
    assert_eq!(parse(VALID).spec.engine.image(), DEFAULT_IMAGE);
    let cuda = VALID.replace("engine: {backend: cpu}", "engine: {backend: cuda}");
    assert_eq!(parse(&cuda).spec.engine.image(), DEFAULT_CUDA_IMAGE);
    let pinned = VALID.replace(
        "engine: {backend: cpu}",
        "engine: {backend: cuda, image: my/engine:1}",
    );
    assert_eq!(parse(&pinned).spec.engine.image(), "my/engine:1");
    let dockerfile = std::fs::read_to_string(root().join("docker/engine.Dockerfile"))
        .expect("docker/engine.Dockerfile");
    for image in [DEFAULT_IMAGE, DEFAULT_CUDA_IMAGE] {
        assert!(
            dockerfile.contains(&format!("-t {image} ")),
            "docker/engine.Dockerfile does not build {image}"
        );
    }
    let mut cuda_examples = 0;
    for entry in std::fs::read_dir(root().join("examples")).expect("examples/ exists") {
        let path = entry.expect("readable entry").path();
        let text = std::fs::read_to_string(&path).expect("readable example");
        let Ok(md) = serde_saphyr::from_str::<ModelDeployment>(&text) else {
            continue;
        };
        if md.spec.engine.backend == Backend::Cuda && md.spec.engine.kind == EngineKind::Tokenscale
        {
            cuda_examples += 1;
            assert!(
                md.spec.engine.image().ends_with("-cuda12.9"),
                "{}: a cuda backend needs the CUDA image, not {}",
                path.display(),
                md.spec.engine.image()
            );
        }
    }
    assert!(cuda_examples >= 1, "the GPU example is a cuda one");
}

const VALID: &str = "apiVersion: tokenscale.dev/v1alpha1\nkind: ModelDeployment\nmetadata: {name: m}\nspec:\n  \
    model: {source: smollm2-135m}\n  engine: {backend: cpu}\n  replicas: {min: 1, max: 2}\n  \
    slo: {ttftP95: 500ms, tpotP95: 50ms}\n";

fn expect_rejected(manifest: &str, needles: &[&str]) {
    let found = problems(manifest);
    assert!(!found.is_empty(), "accepted: {manifest}");
    let all = found.join("\n");
    for needle in needles {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
}

#[test]
fn the_valid_baseline_is_accepted() {
    assert_eq!(problems(VALID), Vec::<String>::new());
}

#[test]
fn min_above_max_is_rejected_by_the_cel_rule() {
    let manifest = VALID.replace("{min: 1, max: 2}", "{min: 3, max: 1}");
    expect_rejected(
        &manifest,
        &[
            "spec.replicas",
            "replicas.min (3) must be less than or equal to replicas.max (1)",
        ],
    );
}

#[test]
fn negative_slo_is_rejected_by_pattern_and_parse() {
    let manifest = VALID.replace("ttftP95: 500ms", "ttftP95: \"-500ms\"");
    expect_rejected(
        &manifest,
        &[
            "/spec/slo/ttftP95",
            "does not match",
            "invalid duration \"-500ms\"",
        ],
    );
}

#[test]
fn unknown_field_is_rejected_and_named() {
    let manifest = VALID.replace("backend: cpu}", "backend: cpu, gpus: 2}");
    expect_rejected(&manifest, &["/spec/engine", "gpus", "unknown field `gpus`"]);
}

#[test]
fn bad_values_are_rejected_with_their_field() {
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "backend: cpu}",
            "backend: tpu}",
            &["/spec/engine/backend", "tpu"],
        ),
        (
            "backend: cpu}",
            "backend: cpu, gpusPerReplica: 2}",
            &["spec.engine.gpusPerReplica: must be 0 or unset unless backend is cuda"],
        ),
        (
            "source: smollm2-135m",
            "source: \"s3://bucket/model\"",
            &["/spec/model/source", "unknown scheme"],
        ),
        ("max: 2}", "max: 2000}", &["/spec/replicas/max", "2000"]),
        (
            "source: smollm2-135m}",
            "source: smollm2-135m, cache: {fill: true}}",
            &["model.cache.fill", "only an hf:// source"],
        ),
        (
            "source: smollm2-135m}",
            "source: \"hf://org/repo\", cache: {fill: true, claimName: mine}}",
            &["model.cache.fill", "leave claimName out"],
        ),
        (
            "source: smollm2-135m}",
            "source: \"hf://org/repo\", cache: {fill: true, accessMode: ReadOnlyMany}}",
            &["/spec/model/cache/accessMode", "ReadOnlyMany"],
        ),
        (
            "tpotP95: 50ms}",
            "tpotP95: 0s}",
            &["spec.slo.tpotP95: must be greater than zero"],
        ),
    ];
    for (from, to, needles) in cases {
        expect_rejected(&VALID.replace(from, to), needles);
    }
    let missing_slo = VALID.replace("  slo: {ttftP95: 500ms, tpotP95: 50ms}\n", "");
    expect_rejected(
        &missing_slo,
        &["\"slo\" is a required property", "missing field `slo`"],
    );
}
