//! Tests of the engine Deployment builder.

use super::*;
use crate::children::test_support::{CUDA_SPEC, md};

fn container(d: &Deployment) -> Container {
    let pod = d.spec.template.spec.clone().expect("pod spec");
    pod.containers.into_iter().next().expect("one container")
}

#[test]
fn gpu_deployment_has_owner_gpus_probes_and_drain() {
    let d = engine_deployment(&md(CUDA_SPEC), 3).expect("builds");
    assert_eq!(d.metadata.name.as_deref(), Some("llama-engine"));
    assert_eq!(d.metadata.namespace.as_deref(), Some("models"));
    let owner = &d.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("ModelDeployment", "llama", "1234-5678")
    );
    assert_eq!(owner.controller, Some(true));
    let spec = d.spec.clone();
    assert_eq!(spec.replicas, Some(3));
    let c = container(&d);
    let limits = c
        .resources
        .clone()
        .and_then(|r| r.limits)
        .unwrap_or_default();
    assert_eq!(limits[GPU_RESOURCE].0, "2");
    let readiness = c
        .readiness_probe
        .clone()
        .and_then(|p| p.http_get)
        .expect("http readiness");
    assert_eq!(readiness.path.as_deref(), Some("/health"));
    // Our engine serves on for the delay after SIGTERM itself: no hook (no `sleep` action,
    // which Kubernetes 1.29 lacks, nor a `sleep` program, which a distroless image lacks).
    assert!(c.lifecycle.is_none(), "{:?}", c.lifecycle);
    let args = c.args.clone().unwrap_or_default();
    let delay = args.iter().position(|a| a == "--shutdown-delay");
    assert_eq!(
        delay.and_then(|i| args.get(i + 1)),
        Some(&PRE_STOP_SLEEP_S.to_string())
    );
    let pod = spec.template.spec.expect("pod");
    // 120 s default drain + pre-stop + margin.
    assert_eq!(pod.termination_grace_period_seconds, Some(135));
    let tolerations = pod.tolerations.unwrap_or_default();
    assert!(
        tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some(GPU_RESOURCE))
    );
}

#[test]
fn an_engine_that_does_not_drain_itself_sleeps_in_an_exec_pre_stop_hook() {
    let d = engine_deployment(
        &md(
            "  model: {source: \"hf://org/repo\"}\n  engine: {kind: vllm, drainTimeout: 30s}\n  \
             replicas: {min: 1, max: 2}\n  slo: {ttftP95: 500ms, tpotP95: 50ms}\n",
        ),
        1,
    )
    .expect("builds");
    let c = container(&d);
    let exec = c
        .lifecycle
        .and_then(|l| l.pre_stop)
        .and_then(|p| p.exec)
        .and_then(|e| e.command);
    // 5 s for the endpoint removal, then the 30 s drain out of the Service; then SIGTERM.
    assert_eq!(exec, Some(vec!["sleep".to_string(), "35".to_string()]));
    let pod = d.spec.template.spec.expect("pod");
    assert_eq!(pod.termination_grace_period_seconds, Some(45));
    assert!(
        !c.args
            .unwrap_or_default()
            .iter()
            .any(|a| a == "--shutdown-delay")
    );
}

#[test]
fn command_is_engine_serve_with_model_from_the_pvc() {
    let c = container(&engine_deployment(&md(CUDA_SPEC), 1).expect("builds"));
    assert_eq!(c.command, Some(vec!["tokenscale-engine".to_string()]));
    let args = c.args.unwrap_or_default().join(" ");
    assert_eq!(
        args,
        "serve --model /models/llama-8b.gguf --host 0.0.0.0 --port 8000 --backend cuda \
         --served-model-name llama-3-8b --drain-timeout 120 --shutdown-delay 5 --tpot-target 50ms"
    );
    let mounts = c.volume_mounts.unwrap_or_default();
    let model = mounts
        .iter()
        .find(|m| m.name == "model")
        .expect("model mount");
    assert_eq!(
        (model.mount_path.as_str(), model.read_only),
        (MODEL_MOUNT_PATH, Some(true))
    );
}

#[test]
fn every_container_is_hardened() {
    let d = engine_deployment(&md(CUDA_SPEC), 1).expect("builds");
    let pod = d.spec.template.spec.expect("pod");
    let pod_ctx = pod.security_context.expect("pod security context");
    assert_eq!(pod_ctx.run_as_non_root, Some(true));
    assert_eq!(
        pod_ctx.seccomp_profile.map(|s| s.type_).as_deref(),
        Some("RuntimeDefault")
    );
    for c in pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
    {
        let ctx = c
            .security_context
            .clone()
            .expect("container security context");
        assert_eq!(ctx.run_as_non_root, Some(true), "{}", c.name);
        assert_eq!(ctx.read_only_root_filesystem, Some(true), "{}", c.name);
        assert_eq!(ctx.allow_privilege_escalation, Some(false), "{}", c.name);
        let drop = ctx.capabilities.and_then(|c| c.drop).unwrap_or_default();
        assert_eq!(drop, ["ALL"], "{}", c.name);
        let resources = c.resources.clone().expect("resources");
        for key in ["cpu", "memory"] {
            assert!(
                resources
                    .requests
                    .as_ref()
                    .is_some_and(|r| r.contains_key(key)),
                "{key} request"
            );
            assert!(
                resources
                    .limits
                    .as_ref()
                    .is_some_and(|r| r.contains_key(key)),
                "{key} limit"
            );
        }
    }
}

#[test]
fn cpu_alias_source_gets_no_gpu_and_a_writable_cache() {
    let spec = "  model: {source: smollm2-135m-instruct}\n  engine: {backend: cpu}\n  \
                replicas: {min: 1, max: 2}\n  slo: {ttftP95: 2s, tpotP95: 200ms}\n  \
                scaling: {period: 5s}\n";
    let d = engine_deployment(&md(spec), 1).expect("builds");
    let c = container(&d);
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(
        args[1..3],
        ["--model".to_string(), "smollm2-135m-instruct".to_string()]
    );
    let tail: Vec<&str> = args.iter().skip(7).map(String::as_str).collect();
    // No servedName: the resource's name; no tuning, so no CUDA-only flag.
    assert_eq!(
        tail,
        [
            "--backend",
            "cpu",
            "--served-model-name",
            "llama",
            "--drain-timeout",
            "120",
            "--shutdown-delay",
            "5",
            "--tpot-target",
            "200ms"
        ]
    );
    let requests = c.resources.and_then(|r| r.requests).unwrap_or_default();
    assert!(!requests.contains_key(GPU_RESOURCE));
    let mounts = c.volume_mounts.unwrap_or_default();
    assert!(
        mounts
            .iter()
            .any(|m| m.mount_path == CACHE_MOUNT_PATH && m.read_only == Some(false))
    );
    let pod = d.spec.template.spec.expect("pod");
    assert!(pod.tolerations.is_none());
}

#[test]
fn tuning_flags_and_extra_args_follow_the_basic_ones() {
    let spec = format!("{CUDA_SPEC}  scaling: {{}}\n").replace(
        "gpusPerReplica: 2}",
        "gpusPerReplica: 1, maxNumSeqs: 64, kvCacheFraction: 0.85, args: [\"--seed\", \"7\"]}",
    );
    let args = container(&engine_deployment(&md(&spec), 1).expect("builds"))
        .args
        .unwrap_or_default();
    let tail: Vec<&str> = args.iter().skip(17).map(String::as_str).collect();
    assert_eq!(
        tail,
        [
            "--max-num-seqs",
            "64",
            "--gpu-memory-utilization",
            "0.85",
            "--seed",
            "7"
        ]
    );
}

#[test]
fn builder_is_pure_and_rejects_objects_without_uid() {
    let a = engine_deployment(&md(CUDA_SPEC), 2).expect("builds");
    let b = engine_deployment(&md(CUDA_SPEC), 2).expect("builds");
    assert_eq!(a, b);
    let mut no_uid = md(CUDA_SPEC);
    no_uid.metadata.uid = None;
    assert_eq!(
        engine_deployment(&no_uid, 1),
        Err(ChildError::MissingMetadata("uid"))
    );
}

#[test]
fn hub_source_passes_through_with_the_cache_the_token_and_hf_home() {
    let spec = "  model:\n    source: hf://meta-llama/Llama-3.1-8B-Instruct@main\n    \
                hfTokenSecret: {name: hf-token}\n    cache: {sizeLimit: 80Gi}\n  \
                engine: {backend: cuda}\n  replicas: {min: 1, max: 2}\n  \
                slo: {ttftP95: 2s, tpotP95: 200ms}\n";
    let d = engine_deployment(&md(spec), 1).expect("builds");
    let c = container(&d);
    let args = c.args.clone().unwrap_or_default();
    assert_eq!(
        args[1..3],
        [
            "--model".to_string(),
            "hf://meta-llama/Llama-3.1-8B-Instruct@main".to_string()
        ],
        "the source reaches the engine unchanged"
    );
    let env = c.env.clone().unwrap_or_default();
    let var = |name: &str| env.iter().find(|e| e.name == name).cloned();
    assert_eq!(
        var("HF_HOME").and_then(|e| e.value).as_deref(),
        Some(HF_HOME_PATH)
    );
    assert!(
        HF_HOME_PATH.starts_with(CACHE_MOUNT_PATH),
        "the Hub cache is on the cache volume"
    );
    let token = var("HF_TOKEN")
        .and_then(|e| e.value_from)
        .and_then(|v| v.secret_key_ref);
    let token = token.expect("HF_TOKEN comes from the Secret");
    assert_eq!(
        (token.name.as_str(), token.key.as_str()),
        ("hf-token", DEFAULT_TOKEN_KEY)
    );
    let pod = d.spec.template.spec.expect("pod");
    let cache = pod
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == "model-cache");
    let size = cache.and_then(|v| v.empty_dir).and_then(|e| e.size_limit);
    assert_eq!(size.map(|q| q.0).as_deref(), Some("80Gi"));
}

#[test]
fn a_shared_cache_claim_replaces_the_empty_dir_and_no_secret_means_no_token() {
    let spec = "  model:\n    source: hf://Qwen/Qwen3-8B\n    cache: {claimName: model-cache}\n  \
                engine: {backend: cuda}\n  replicas: {min: 1, max: 2}\n  \
                slo: {ttftP95: 2s, tpotP95: 200ms}\n";
    let d = engine_deployment(&md(spec), 1).expect("builds");
    let env = container(&d).env.unwrap_or_default();
    assert!(!env.iter().any(|e| e.name == "HF_TOKEN"));
    let pod = d.spec.template.spec.expect("pod");
    let cache = pod
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == "model-cache");
    let claim = cache
        .and_then(|v| v.persistent_volume_claim)
        .expect("a claim");
    assert_eq!(
        (claim.claim_name.as_str(), claim.read_only),
        ("model-cache", Some(false))
    );
}

#[test]
fn compile_caches_are_on_the_cache_volume_and_engine_env_overrides_them() {
    let spec = "  model: {source: hf://org/repo, cache: {claimName: shared}}\n  \
                engine:\n    kind: vllm\n    env: [{name: TRITON_CACHE_DIR, value: /mnt/triton}]\n  \
                replicas: {min: 1, max: 2}\n  slo: {ttftP95: 2s, tpotP95: 200ms}\n";
    let d = engine_deployment(&md(spec), 1).expect("builds");
    let env = container(&d).env.unwrap_or_default();
    let values = |name: &str| {
        env.iter()
            .filter(|e| e.name == name)
            .map(|e| e.value.clone().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        values("VLLM_CACHE_ROOT"),
        [format!("{CACHE_MOUNT_PATH}/vllm")]
    );
    assert_eq!(
        values("TORCHINDUCTOR_CACHE_DIR"),
        [format!("{CACHE_MOUNT_PATH}/torchinductor")]
    );
    assert_eq!(
        values("TRITON_CACHE_DIR"),
        ["/mnt/triton"],
        "once, the user's"
    );
}
