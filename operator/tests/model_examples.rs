//! The GPU examples (`examples/llama-3-8b-gpu.yaml`, `examples/qwen3-8b-gpu.yaml`) as a user
//! applies them: they validate, and the operator renders each into an engine pod whose command
//! fetches and serves that model from the Hub (the `hf://` source unchanged), with the Hub
//! cache on the cache volume and the token from the named Secret.

use std::path::PathBuf;

use tokenscale_operator::children::engine_deployment;
use tokenscale_operator::crd::ModelDeployment;

fn example(name: &str) -> ModelDeployment {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("the example exists");
    let mut md: ModelDeployment = serde_saphyr::from_str(&text).expect("the example parses");
    md.spec.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
    md.metadata.uid = Some("uid-1".into()); // as the API server returns it
    md
}

/// `(args, env name → value or secret name/key)` of the engine container.
fn pod(md: &ModelDeployment) -> (Vec<String>, Vec<(String, String)>) {
    let d = engine_deployment(md, 1).expect("renders");
    let pod = d.spec.template.spec.expect("pod");
    let c = &pod.containers[0];
    let env = c
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            let value = match (e.value, e.value_from.and_then(|v| v.secret_key_ref)) {
                (Some(v), _) => v,
                (None, Some(s)) => format!("secret {}/{}", s.name, s.key),
                _ => String::new(),
            };
            (e.name, value)
        })
        .collect();
    (c.args.clone().unwrap_or_default(), env)
}

#[test]
fn the_llama_example_fetches_bf16_safetensors_with_the_token_secret() {
    let md = example("llama-3-8b-gpu.yaml");
    let (args, env) = pod(&md);
    assert_eq!(
        args[..3],
        ["serve", "--model", "hf://meta-llama/Llama-3.1-8B-Instruct"]
    );
    assert!(args.windows(2).any(|w| w == ["--backend", "cuda"]));
    assert!(
        env.contains(&("HF_TOKEN".into(), "secret hf-token/token".into())),
        "{env:?}"
    );
    assert!(env.contains(&("HF_HOME".into(), "/var/cache/tokenscale/huggingface".into())));
}

#[test]
fn the_qwen3_example_pins_a_revision_and_shares_a_cache_claim() {
    let md = example("qwen3-8b-gpu.yaml");
    let (args, env) = pod(&md);
    assert_eq!(args[..3], ["serve", "--model", "hf://Qwen/Qwen3-8B@main"]);
    assert!(
        !env.iter().any(|(k, _)| k == "HF_TOKEN"),
        "a public model needs no token"
    );
    let d = engine_deployment(&md, 1).expect("renders");
    let volumes = d
        .spec
        .template
        .spec
        .expect("pod")
        .volumes
        .unwrap_or_default();
    let cache = volumes
        .iter()
        .find(|v| v.name == "model-cache")
        .expect("a cache volume");
    assert_eq!(
        cache
            .persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.as_str()),
        Some("qwen3-cache")
    );
}

#[test]
fn a_format_that_contradicts_the_source_is_refused() {
    let mut md = example("qwen3-8b-gpu.yaml");
    md.spec.model.format = Some(tokenscale_operator::crd::ModelFormat::Gguf);
    let err = md.spec.validate().expect_err("gguf for a whole repository");
    assert!(
        err.contains("spec.model.format") && err.contains("hf://org/repo/FILE.gguf"),
        "{err}"
    );
    md.spec.model.source = "hf://Qwen/Qwen3-8B-GGUF/Qwen3-8B-Q8_0.gguf".into();
    assert!(md.spec.validate().is_ok());
}
