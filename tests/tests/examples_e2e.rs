//! Every example runs: each `examples/*.yaml` this machine can run (tokenscale's `sim` and
//! `cpu` ones) comes up under `tokenscale up` and serves a request for each of its models and
//! routes; the others (GPU ones, and
//! other engines' ones) render through the operator's child builders into Deployments that
//! ask for their GPUs and run their engine.

mod cli_support;

use cli_support::soak::{self, Shape};
use std::time::Duration;

use cli_support::{Procs, ready_replicas, scratch_dir, start_up, wait_for};
use tokenscale_operator::children::engine_deployment;
use tokenscale_operator::crd::{Backend, EngineKind, ModelDeployment};

/// The names clients send to what `file` declares: each `ModelDeployment`'s served name (and
/// its `replicas.min`), and each `ModelRoute`'s `modelName`.
fn served_names(file: &str) -> (Vec<(String, u32)>, Vec<String>) {
    let text = std::fs::read_to_string(file).expect("example readable");
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let mut models = Vec::new();
    let mut routes = Vec::new();
    for doc in &docs {
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        match doc["kind"].as_str() {
            Some("ModelDeployment") => {
                let model = doc["spec"]["model"]["servedName"].as_str().unwrap_or(name);
                let min = doc["spec"]["replicas"]["min"].as_u64().unwrap_or(1) as u32;
                models.push((model.to_string(), min));
            }
            Some("ModelRoute") => {
                routes.push(
                    doc["spec"]["modelName"]
                        .as_str()
                        .unwrap_or(name)
                        .to_string(),
                );
            }
            _ => {}
        }
    }
    (models, routes)
}

/// Serves one streamed request for each model and route of `file` through `up` running it.
fn runs_under_up(file: &str) {
    let (models, routes) = served_names(file);
    let (first, min) = models.first().cloned().expect("a ModelDeployment");
    let dir = scratch_dir(&format!("example-{first}"));
    let text = std::fs::read_to_string(file).expect("example readable");
    let mut procs = Procs::default();
    // Scale-to-zero examples start with no replica: the request itself brings one up.
    let up = start_up(&mut procs, &dir, &text, &first, min);
    for (model, min) in &models[1..] {
        wait_for(
            &format!("{model}'s replicas"),
            Duration::from_secs(120),
            || ready_replicas(up.addr, model) >= Some(*min),
        );
    }
    let shape = Shape {
        chat: true,
        prompt: "Say hello.".into(),
        max_tokens: 8,
    };
    let names = models.iter().map(|(m, _)| m).chain(&routes);
    for name in names {
        let outcome = soak::run_one(up.addr, &shape, name);
        let log = std::fs::read_to_string(&up.log).unwrap_or_default();
        assert!(
            outcome.ok(),
            "{file} under tokenscale up, {name}: {outcome:?}\nup's log:\n{log}"
        );
        assert!(!outcome.text.is_empty(), "{file}, {name}: an empty answer");
        eprintln!("{file}, {name}: served {:?}", outcome.text);
    }
}

/// Renders `doc` as the operator would and checks the engine pods ask for their GPUs and run
/// the engine of their kind.
fn renders_for_a_cluster(file: &str, doc: &serde_json::Value) {
    let md: ModelDeployment =
        serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{file}: {e}"));
    let deployment = engine_deployment(&md, 1).unwrap_or_else(|e| panic!("{file}: {e}"));
    let value = serde_json::to_value(&deployment).expect("serialises");
    let container = &value["spec"]["template"]["spec"]["containers"][0];
    let gpus = md.spec.engine.gpus_per_replica();
    let cuda = md.spec.engine.backend == Backend::Cuda;
    assert_eq!(
        gpus > 0,
        cuda,
        "{file}: a GPU example asks for GPUs, a CPU one for none"
    );
    if cuda {
        assert_eq!(
            container["resources"]["limits"]["nvidia.com/gpu"],
            serde_json::json!(gpus.to_string()),
            "{file}: {container}"
        );
    }
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    let command = container["command"][0].as_str().unwrap_or_default();
    match md.spec.engine.kind {
        EngineKind::Tokenscale => assert!(
            args.windows(2).any(|w| w == ["--backend", "cuda"]),
            "{file}: {args:?}"
        ),
        EngineKind::Vllm => assert!(
            command == "vllm"
                && args
                    .windows(2)
                    .any(|w| w == ["--tensor-parallel-size", &gpus.to_string()]),
            "{file}: {command} {args:?}"
        ),
        EngineKind::Sglang => assert!(
            command == "python3" && args.contains(&"--enable-metrics"),
            "{file}: {command} {args:?}"
        ),
        EngineKind::Llamacpp => assert!(
            command.ends_with("llama-server") && args.contains(&"--metrics"),
            "{file}: {command} {args:?}"
        ),
    }
}

#[test]
fn every_example_runs_here_or_renders_for_its_cluster() {
    let examples = tokenscale_e2e::examples::model_deployments();
    assert!(examples.len() >= 3, "{examples:?}");
    let mut ran = 0;
    let mut files_run: Vec<&str> = Vec::new();
    for (file, doc) in &examples {
        // Other engines' binaries are not installed here: their examples render (the
        // llama.cpp one also runs under `up` where llama-server is, see the README).
        let ours = doc["spec"]["engine"]["kind"]
            .as_str()
            .is_none_or(|k| k == "tokenscale");
        match doc["spec"]["engine"]["backend"].as_str() {
            // One `up` per file serves every model and route in it.
            Some("sim" | "cpu") if ours && files_run.contains(&file.as_str()) => {}
            Some("sim" | "cpu") if ours => {
                runs_under_up(file);
                files_run.push(file);
                ran += 1;
            }
            Some("cuda" | "cpu") => renders_for_a_cluster(file, doc),
            other => panic!("{file}: backend {other:?}: neither runnable here nor a GPU example"),
        }
    }
    assert!(ran >= 2, "the sim and SmolLM2 examples run");
}
