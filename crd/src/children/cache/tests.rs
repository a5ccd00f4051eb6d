//! Tests of the filled cache's claim, Job and replica mount.

use k8s_openapi::api::batch::v1::JobCondition;

use super::*;
use crate::children::engine_deployment;
use crate::children::test_support::md;

const FILLED: &str = "  model: {source: \"hf://org/repo@main\", cache: {fill: true, size: 80Gi, \
    storageClassName: local-path, accessMode: ReadWriteOnce}}\n  engine: {kind: vllm}\n  \
    replicas: {min: 1, max: 4}\n  slo: {ttftP95: 500ms, tpotP95: 50ms}\n";

/// Where `c` mounts the filled claim, and whether read-only.
fn filled_mount_of(c: &Container) -> Option<(&str, Option<bool>)> {
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == FILLED_VOLUME)?;
    Some((mount.mount_path.as_str(), mount.read_only))
}

#[test]
fn a_filled_cache_is_a_claim_of_its_size_class_and_mode() {
    let claim = cache_claim(&md(FILLED)).expect("builds").expect("a claim");
    assert_eq!(claim.metadata.name.as_deref(), Some("llama-engine-cache"));
    let owner = &claim.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(owner.kind, "ModelDeployment");
    let spec = claim.spec.expect("spec");
    assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_string()]));
    assert_eq!(spec.storage_class_name.as_deref(), Some("local-path"));
    let requests = spec.resources.and_then(|r| r.requests).unwrap_or_default();
    assert_eq!(requests["storage"].0, "80Gi");
}

#[test]
fn the_fill_job_pulls_the_source_into_the_claim_with_our_engine() {
    let job = fill_job(&md(FILLED)).expect("builds").expect("a job");
    let name = job.metadata.name.clone().unwrap_or_default();
    assert!(name.starts_with("llama-engine-fill-"), "{name}");
    // The same source, the same Job (created once); another source, another Job.
    assert_eq!(job_name(&md(FILLED)), name);
    assert_ne!(job_name(&md(&FILLED.replace("@main", "@v2"))), name);
    let template = job.spec.expect("spec").template;
    let labels = template.metadata.and_then(|m| m.labels).unwrap_or_default();
    assert_eq!(labels["app.kubernetes.io/name"], "tokenscale-cache-fill");
    let pod = template.spec.expect("pod");
    assert_eq!(pod.automount_service_account_token, Some(false));
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some(DEFAULT_IMAGE));
    assert_eq!(
        c.args,
        Some(vec!["pull".to_string(), "hf://org/repo@main".to_string()])
    );
    assert_eq!(filled_mount_of(c), Some((HF_HOME_PATH, Some(false))));
}

#[test]
fn replicas_mount_the_filled_claim_read_only_and_stay_offline() {
    let d = engine_deployment(&md(FILLED), 1).expect("builds");
    let pod = d.spec.template.spec.expect("pod");
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == FILLED_VOLUME);
    let claim = volume.and_then(|v| v.persistent_volume_claim.clone());
    assert_eq!(
        claim.map(|c| (c.claim_name, c.read_only)),
        Some(("llama-engine-cache".to_string(), Some(true)))
    );
    let c = &pod.containers[0];
    assert_eq!(filled_mount_of(c), Some((HF_HOME_PATH, Some(true))));
    let offline = c.env.iter().flatten().find(|e| e.name == "HF_HUB_OFFLINE");
    assert_eq!(offline.and_then(|e| e.value.as_deref()), Some("1"));
}

#[test]
fn without_fill_there_is_no_claim_job_or_mount() {
    let plain = md(&FILLED.replace("fill: true, ", ""));
    assert_eq!(cache_claim(&plain), Ok(None));
    assert!(fill_job(&plain).expect("builds").is_none());
    let pod = engine_deployment(&plain, 1)
        .expect("builds")
        .spec
        .template
        .spec;
    let volumes = pod.and_then(|p| p.volumes).unwrap_or_default();
    assert!(!volumes.iter().any(|v| v.name == FILLED_VOLUME));
}

#[test]
fn a_job_is_filled_once_it_succeeded_and_failed_with_its_reason() {
    assert_eq!(fill_state(None), FillState::Filling);
    let running = JobStatus {
        active: Some(1),
        ..Default::default()
    };
    assert_eq!(fill_state(Some(&running)), FillState::Filling);
    let done = JobStatus {
        succeeded: Some(1),
        ..Default::default()
    };
    assert_eq!(fill_state(Some(&done)), FillState::Filled);
    let failed = JobStatus {
        failed: Some(5),
        conditions: Some(vec![JobCondition {
            type_: "Failed".into(),
            status: "True".into(),
            reason: Some("BackoffLimitExceeded".into()),
            message: Some("Job has reached the specified backoff limit".into()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    assert_eq!(
        fill_state(Some(&failed)),
        FillState::Failed(
            "BackoffLimitExceeded: Job has reached the specified backoff limit".into()
        )
    );
}
