//! Tests of the per-kind renderers: each kind's program and arguments, its priority flags, and
//! the sources an engine cannot load refused with the reason.

use super::*;
use crate::children::test_support::md;

const SLO: &str = "  replicas: {min: 1, max: 4}\n  slo: {ttftP95: 500ms, tpotP95: 50ms}\n";

fn spec(model: &str, engine: &str) -> ModelDeployment {
    md(&format!("  model: {model}\n  engine: {engine}\n{SLO}"))
}

fn rendered(model: &str, engine: &str) -> EngineProcess {
    let md = spec(model, engine);
    let source = ModelSource::parse(&md.spec.model.source).expect("source parses");
    render(&md, &source).expect("renders")
}

#[test]
fn vllm_takes_the_repository_and_splits_it_over_the_gpus() {
    let p = rendered(
        "{source: \"hf://meta-llama/Llama-3.1-70B-Instruct\", servedName: llama-70b}",
        "{kind: vllm, gpusPerReplica: 4, maxNumSeqs: 128, maxModelLen: 8192, \
         kvCacheFraction: 0.9, args: [\"--enable-prefix-caching\"]}",
    );
    assert_eq!(p.command, ["vllm", "serve"]);
    assert_eq!(
        p.args.join(" "),
        "meta-llama/Llama-3.1-70B-Instruct --host 0.0.0.0 --port 8000 --served-model-name \
         llama-70b --tensor-parallel-size 4 --enable-prompt-tokens-details --max-num-seqs 128 --max-model-len 8192 \
         --gpu-memory-utilization 0.9 --scheduling-policy priority --enable-prefix-caching"
    );
    assert_eq!(p.shared_memory, Some("8Gi"));
    assert!(!p.drains_on_sigterm);
}

#[test]
fn vllm_on_one_gpu_needs_no_shared_memory() {
    let p = rendered("{source: \"hf://org/repo\"}", "{kind: vllm}");
    assert_eq!(p.shared_memory, None);
    assert!(
        p.args
            .windows(2)
            .any(|w| w == ["--tensor-parallel-size", "1"])
    );
}

#[test]
fn sglang_turns_metrics_on_and_sets_tensor_parallelism() {
    let p = rendered(
        "{source: \"pvc://weights/qwen2.5-7b\", servedName: qwen}",
        "{kind: sglang, gpusPerReplica: 2, maxNumSeqs: 64, maxBatchTokens: 4096}",
    );
    assert_eq!(p.command, ["python3", "-m", "sglang.launch_server"]);
    assert_eq!(
        p.args.join(" "),
        "--model-path /models/qwen2.5-7b --host 0.0.0.0 --port 8000 --served-model-name qwen \
         --tp-size 2 --enable-metrics --enable-cache-report --max-running-requests 64 --chunked-prefill-size 4096 \
         --enable-priority-scheduling"
    );
    assert_eq!(p.shared_memory, Some("8Gi"));
}

#[test]
fn llamacpp_fetches_one_file_and_gives_each_slot_the_model_length() {
    let p = rendered(
        "{source: \"hf://bartowski/SmolLM2-135M-Instruct-GGUF/SmolLM2-135M-Instruct-Q4_K_M.gguf\"}",
        "{kind: llamacpp, backend: cpu, maxNumSeqs: 4, maxModelLen: 2048}",
    );
    assert_eq!(p.command, ["/app/llama-server"]);
    assert_eq!(
        p.args.join(" "),
        "--hf-repo bartowski/SmolLM2-135M-Instruct-GGUF --hf-file \
         SmolLM2-135M-Instruct-Q4_K_M.gguf --host 0.0.0.0 --port 8000 --alias llama --metrics \
         --parallel 4 --ctx-size 8192"
    );
    let gpu = rendered(
        "{source: \"pvc://weights/m.gguf\"}",
        "{kind: llamacpp, gpusPerReplica: 2}",
    );
    assert!(gpu.args.windows(2).any(|w| w == ["--n-gpu-layers", "999"]));
}

#[test]
fn engine_command_replaces_the_program_and_keeps_the_arguments() {
    let p = rendered(
        "{source: \"file:///models/m.gguf\"}",
        "{kind: llamacpp, backend: cpu, command: [\"/opt/llama.cpp/llama-server\"]}",
    );
    assert_eq!(p.command, ["/opt/llama.cpp/llama-server"]);
    assert_eq!(p.args[..2], ["--model", "/models/m.gguf"]);
}

#[test]
fn sources_an_engine_cannot_load_are_refused_with_the_reason() {
    let alias = ModelSource::parse("smollm2-135m").expect("parses");
    let e = model_location(EngineKind::Vllm, &alias).expect_err("refused");
    assert!(e.contains("alias only tokenscale's engine resolves"), "{e}");
    assert!(model_location(EngineKind::Tokenscale, &alias).is_ok());
    let one_file = ModelSource::parse("hf://org/repo/m.gguf").expect("parses");
    let e = model_location(EngineKind::Sglang, &one_file).expect_err("refused");
    assert!(e.contains("SGLang downloads whole repositories"), "{e}");
    assert!(model_location(EngineKind::Llamacpp, &one_file).is_ok());
}

#[test]
fn validation_names_what_each_kind_cannot_do() {
    let problems = |model: &str, engine: &str| -> Vec<String> {
        spec(model, engine)
            .spec
            .problems()
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    let hf = "{source: \"hf://org/repo\"}";
    assert_eq!(
        problems(hf, "{gpusPerReplica: 4}"),
        [
            "spec.engine.gpusPerReplica: tokenscale's engine uses one GPU per replica (no tensor \
          parallelism yet), got 4: set 1, or engine.kind vllm or sglang to split the model over \
          several GPUs"
        ]
    );
    assert!(problems(hf, "{kind: vllm, gpusPerReplica: 4}").is_empty());
    assert_eq!(
        problems(hf, "{kind: sglang, backend: cpu}"),
        [
            "spec.engine.backend: SGLang replicas run on cuda here; for CPU replicas use \
          engine.kind llamacpp or tokenscale"
        ]
    );
    assert_eq!(
        problems(hf, "{kind: llamacpp, backend: sim}"),
        ["spec.engine.backend: sim is tokenscale's simulated engine; llama.cpp runs cuda or cpu"]
    );
    assert_eq!(
        problems(hf, "{kind: vllm, command: []}"),
        [
            "spec.engine.command: names no program: give the executable first, or leave command \
          unset"
        ]
    );
    let alias = problems("{source: smollm2-135m}", "{kind: vllm}");
    assert_eq!(alias.len(), 1);
    assert!(
        alias[0].starts_with("spec.model.source: \"smollm2-135m\" is an alias"),
        "{alias:?}"
    );
}

#[test]
fn a_pinned_revision_reaches_vllm_and_is_refused_for_llamacpp() {
    let p = rendered("{source: \"hf://org/repo@v1.2\"}", "{kind: vllm}");
    assert_eq!(p.args[..3], ["org/repo", "--revision", "v1.2"]);
    let pinned = ModelSource::parse("hf://org/repo@v1.2/m.gguf").expect("parses");
    let e = model_location(EngineKind::Llamacpp, &pinned).expect_err("refused");
    assert!(e.contains("cannot pin a revision (v1.2)"), "{e}");
}

#[test]
fn compiling_engines_keep_their_compile_caches_on_the_cache_volume() {
    let names = |p: &EngineProcess| p.cache_env.iter().map(|(n, _)| *n).collect::<Vec<_>>();
    let vllm = rendered("{source: \"hf://org/repo\"}", "{kind: vllm}");
    assert_eq!(
        names(&vllm),
        [
            "VLLM_CACHE_ROOT",
            "TRITON_CACHE_DIR",
            "TORCHINDUCTOR_CACHE_DIR",
            "FLASHINFER_WORKSPACE_BASE"
        ]
    );
    let sglang = rendered("{source: \"hf://org/repo\"}", "{kind: sglang}");
    assert_eq!(names(&sglang)[0], "SGLANG_JIT_CACHE_ROOT");
    assert!(names(&sglang).contains(&"TORCHINDUCTOR_CACHE_DIR"));
    // Every folder is distinct: two caches in one folder could clean each other out.
    for p in [&vllm, &sglang] {
        let mut folders: Vec<_> = p.cache_env.iter().map(|(_, f)| *f).collect();
        folders.sort_unstable();
        folders.dedup();
        assert_eq!(folders.len(), p.cache_env.len());
    }
    let llama = rendered("{source: \"hf://org/repo/m.gguf\"}", "{kind: llamacpp}");
    assert!(llama.cache_env.is_empty());
}

#[test]
fn vllm_and_sglang_run_their_priority_scheduling_and_llamacpp_is_paced() {
    let vllm = rendered("{source: \"hf://org/repo\"}", "{kind: vllm}");
    assert!(
        vllm.args
            .windows(2)
            .any(|w| w == ["--scheduling-policy", "priority"])
    );
    let sglang = rendered(
        "{source: \"hf://org/repo\"}",
        "{kind: sglang, image: \"lmsysorg/sglang:v0.5.3\", args: [\"--log-level\", \"info\"]}",
    );
    // Ours before the spec's own flags, which keep the last word.
    assert_eq!(
        sglang.args[sglang.args.len() - 3..],
        ["--enable-priority-scheduling", "--log-level", "info"]
    );
    let llama = rendered("{source: \"hf://org/repo/m.gguf\"}", "{kind: llamacpp}");
    assert!(!llama.args.iter().any(|a| a.contains("priority")));
    let ours = rendered("{source: smollm2-135m}", "{backend: cpu}");
    assert!(!ours.args.iter().any(|a| a.contains("priority")));
}

#[test]
fn an_sglang_too_old_or_unnamed_gets_pacing_only_and_says_so() {
    for image in ["lmsysorg/sglang:v0.5.2", "lmsysorg/sglang:latest"] {
        let md = spec(
            "{source: \"hf://org/repo\"}",
            &format!("{{kind: sglang, image: \"{image}\"}}"),
        );
        let source = ModelSource::parse(&md.spec.model.source).expect("source parses");
        let p = render(&md, &source).expect("renders");
        assert!(!p.args.iter().any(|a| a.contains("priority")), "{image}");
        assert!(priority(&md).note.starts_with("pacing only: "), "{image}");
    }
    let llama = spec("{source: \"hf://org/repo/m.gguf\"}", "{kind: llamacpp}");
    let deployment =
        crate::children::deployment::engine_deployment(&llama, 1).expect("deployment builds");
    let annotations = deployment.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations[crate::children::deployment::ANNOTATION_PRIORITY],
        "pacing only: llama-server has no priority scheduling"
    );
}

#[test]
fn a_policy_in_the_spec_is_kept_and_no_second_one_is_rendered() {
    let p = rendered(
        "{source: \"hf://org/repo\"}",
        "{kind: vllm, args: [\"--scheduling-policy\", \"fcfs\"]}",
    );
    let policies = p
        .args
        .iter()
        .filter(|a| *a == "--scheduling-policy")
        .count();
    assert_eq!(policies, 1);
    assert_eq!(p.args[p.args.len() - 2..], ["--scheduling-policy", "fcfs"]);
}

#[test]
fn the_pinned_default_images_have_priority_scheduling() {
    // The gateway reads a spec without `image` as the pinned default: it must be one whose
    // version has the flags, or the gateway would send a field the replicas refuse.
    for (kind, image) in [
        (EngineKind::Vllm, crate::spec::DEFAULT_VLLM_IMAGE),
        (EngineKind::Sglang, crate::spec::DEFAULT_SGLANG_IMAGE),
    ] {
        assert_eq!(
            render_flags(kind, Some(image), &[]),
            render_flags(kind, None, &[]),
            "{image}"
        );
    }
}

#[test]
fn adapters_become_lora_flags_of_the_tokenscale_engine_and_other_kinds_are_refused() {
    let model = "{source: \"hf://org/repo\", servedName: base, adapters: [\
                 {name: sql, source: \"hf://org/sql-lora@v2\"}, \
                 {name: legal, source: \"file:///adapters/legal\"}]}";
    let p = rendered(model, "{backend: cpu}");
    let args = p.args.join(" ");
    assert!(
        args.ends_with("--lora sql=hf://org/sql-lora@v2 --lora legal=/adapters/legal"),
        "{args}"
    );
    let problems = |model: &str, engine: &str| -> Vec<String> {
        let md = spec(model, engine);
        md.spec.problems().iter().map(ToString::to_string).collect()
    };
    assert!(problems(model, "{backend: cpu}").is_empty());
    let refused = problems(model, "{kind: vllm}");
    assert!(
        refused.iter().any(|p| p.starts_with(
            "spec.model.adapters: adapters are loaded at start by the tokenscale engine only"
        )),
        "{refused:?}"
    );
    let twice = "{source: \"hf://org/repo\", servedName: base, adapters: [\
                 {name: base, source: \"file:///a\"}]}";
    assert_eq!(
        problems(twice, "{backend: cpu}"),
        ["spec.model.adapters: \"base\" is the model's own servedName"]
    );
}
