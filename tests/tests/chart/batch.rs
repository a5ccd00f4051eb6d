//! Where the chart puts the gateway's Batch API work (`gateway.batch`): shared through Redis
//! and a bucket, local to one pod on a claim or an emptyDir, or off when several pods would
//! each see only their own batches; and the settings that cannot work together refused.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::Value;
use tokenscale_e2e::chart::{Render, declared_min_kube_version};
use tokenscale_e2e::k8s_checks::json_diff::{differences, without_nulls};
use tokenscale_e2e::tools::{python_with, run};
use tokenscale_gateway::config::Config;

use crate::{Rendered, ci_render, default_render, render, scratch_dir};

/// Where the local mode mounts the batch volume (and points `batch.dir`).
const BATCH_DIR: &str = "/var/lib/tokenscale/batch";

/// The `batch:` section of the rendered gateway.yaml, once the gateway has accepted the file.
fn batch_config(r: &Rendered) -> Value {
    let text = r.get("ConfigMap", "tokenscale-gateway").value["data"]["gateway.yaml"]
        .as_str()
        .unwrap_or_default();
    if let Err(e) = Config::from_yaml(text) {
        panic!("[{}] gateway.yaml refused: {e}\n{text}", r.label);
    }
    let config: Value =
        serde_saphyr::from_str(text).unwrap_or_else(|e| panic!("[{}] {e}\n{text}", r.label));
    config["batch"].clone()
}

/// The gateway Deployment's spec.
pub(crate) fn gateway_spec(r: &Rendered) -> &Value {
    &r.get("Deployment", "tokenscale-gateway").value["spec"]
}

/// The pod's `batch` volume and the container's mount path for it, when there are.
fn batch_volume(r: &Rendered) -> (Option<&Value>, Option<&str>) {
    let pod = &gateway_spec(r)["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "batch");
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == "batch")
        .and_then(|m| m["mountPath"].as_str());
    (volume, mount)
}

/// The gateway container's env, by name.
pub(crate) fn env<'a>(r: &'a Rendered, name: &str) -> Option<&'a Value> {
    gateway_spec(r)["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == name)
}

/// The NOTES `helm install` prints with `set`.
pub(crate) fn notes(set: &[&str]) -> String {
    let out = Render {
        set,
        ..Render::default()
    }
    .install_dry_run()
    .unwrap_or_else(|e| panic!("{e}"));
    out.split("NOTES:")
        .nth(1)
        .unwrap_or_else(|| panic!("no NOTES in:\n{out}"))
        .to_owned()
}

#[test]
fn with_several_gateway_pods_and_no_shared_store_the_batch_api_is_off_and_the_notes_say_why() {
    // The defaults: two gateway pods, the chart's Redis, no bucket.
    let r = default_render();
    assert_eq!(gateway_spec(r)["replicas"], 2);
    assert_eq!(batch_config(r), serde_json::json!({"enabled": false}));
    assert_eq!(batch_volume(r), (None, None));
    let said = notes(&[]);
    assert!(
        said.contains("the Batch API is off: set gateway.batch.objects and Redis"),
        "{said}"
    );
    // Autoscaled pods count as several too.
    let scaled = ci_render("existing-secret-values.yaml");
    assert_eq!(batch_config(scaled)["enabled"], false);
    // Turned off on purpose: off, and nothing to explain.
    let said = notes(&["gateway.batch.enabled=false"]);
    assert!(!said.contains("Batch API"), "{said}");
}

#[test]
fn one_gateway_pod_keeps_its_batches_on_a_claim_and_is_replaced_not_surged() {
    let set = [
        "gateway.replicas=1",
        "gateway.batch.persistence.enabled=true",
        "gateway.batch.persistence.size=20Gi",
        "gateway.batch.persistence.storageClass=fast",
    ];
    // As the oldest supported cluster gets it: that is the version it is validated at.
    let oldest = declared_min_kube_version().unwrap_or_else(|e| panic!("{e}"));
    let r = render(
        "batch-claim",
        &Render {
            set: &set,
            kube_version: Some(&oldest),
            ..Render::default()
        },
    );
    assert_eq!(batch_config(&r), serde_json::json!({"dir": BATCH_DIR}));
    let (volume, mount) = batch_volume(&r);
    assert_eq!(mount, Some(BATCH_DIR));
    assert_eq!(
        volume.map(|v| &v["persistentVolumeClaim"]["claimName"]),
        Some(&Value::from("tokenscale-gateway-batch"))
    );
    // A second pod on the same state would read it at start and then diverge.
    assert_eq!(gateway_spec(&r)["strategy"]["type"], "Recreate");
    let claim = without_nulls(
        &r.get("PersistentVolumeClaim", "tokenscale-gateway-batch")
            .value,
    );
    let typed: PersistentVolumeClaim =
        serde_json::from_value(claim.clone()).unwrap_or_else(|e| panic!("{e}\n{claim}"));
    let back = serde_json::to_value(&typed).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(differences(&claim, &back), Vec::<String>::new());
    let spec = typed.spec.unwrap_or_default();
    assert_eq!(spec.access_modes, Some(vec!["ReadWriteOnce".to_owned()]));
    assert_eq!(spec.storage_class_name.as_deref(), Some("fast"));
    let storage = spec.resources.and_then(|r| r.requests).unwrap_or_default();
    assert_eq!(storage.get("storage").map(|q| q.0.as_str()), Some("20Gi"));
    passes_kubernetes_validate(&r);

    // A claim of the platform team's: mounted, none created.
    let existing = ci_render("batch-local-values.yaml");
    let (volume, mount) = batch_volume(existing);
    assert_eq!(mount, Some(BATCH_DIR));
    assert_eq!(
        volume.map(|v| &v["persistentVolumeClaim"]["claimName"]),
        Some(&Value::from("tokenscale-batches"))
    );
    assert_eq!(existing.of_kind("PersistentVolumeClaim").count(), 0);

    // No persistence: an emptyDir, surged updates, and the NOTES warn that batches are lost.
    let set = ["gateway.replicas=1"];
    let r = render(
        "batch-emptydir",
        &Render {
            set: &set,
            ..Render::default()
        },
    );
    assert_eq!(batch_config(&r), serde_json::json!({"dir": BATCH_DIR}));
    let (volume, mount) = batch_volume(&r);
    assert_eq!(mount, Some(BATCH_DIR));
    assert_eq!(
        volume.map(|v| &v["emptyDir"]["sizeLimit"]),
        Some(&Value::from("10Gi"))
    );
    assert_eq!(r.of_kind("PersistentVolumeClaim").count(), 0);
    assert_eq!(gateway_spec(&r)["strategy"]["type"], "RollingUpdate");
    let said = notes(&set);
    assert!(said.contains("lost when the gateway pod goes"), "{said}");
}

/// `kubernetes-validate --strict` on one render (the renders of every test are checked in
/// chart.rs; this one has a kind those do not make).
fn passes_kubernetes_validate(r: &Rendered) {
    let dir = scratch_dir("batch");
    let file = dir.join(format!("{}.yaml", r.label));
    std::fs::write(&file, &r.yaml).unwrap_or_else(|e| panic!("{e}"));
    let mut command = python_with("kubernetes_validate").unwrap_or_else(|e| panic!("{e}"));
    let version = declared_min_kube_version().unwrap_or_else(|e| panic!("{e}"));
    command.args([
        "-m",
        "kubernetes_validate",
        "--strict",
        "--quiet",
        "-k",
        &version,
    ]);
    command.arg(&file);
    let out = run(command).unwrap_or_else(|e| panic!("kubernetes-validate --strict: {e}"));
    assert!(out.trim().is_empty(), "{out}");
}

#[test]
fn several_pods_share_batches_through_redis_and_the_bucket_with_its_credentials() {
    let r = ci_render("redis-values.yaml");
    assert_eq!(
        batch_config(r),
        serde_json::json!({"state": "redis", "objects": "s3://tokenscale-batches/prod"})
    );
    assert_eq!(batch_volume(r), (None, None));
    for key in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        let from = env(r, key).map(|e| &e["valueFrom"]["secretKeyRef"]);
        assert_eq!(
            from,
            Some(&serde_json::json!({"name": "batch-s3", "key": key})),
            "{key}"
        );
    }
    for (name, value) in [
        ("AWS_ENDPOINT_URL", "http://minio.storage:9000"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ALLOW_HTTP", "true"),
    ] {
        assert_eq!(
            env(r, name).map(|e| &e["value"]),
            Some(&Value::from(value)),
            "{name}"
        );
    }
    assert_eq!(gateway_spec(r)["strategy"]["type"], "RollingUpdate");
    // Nothing of S3 where nothing was set.
    assert!(env(default_render(), "AWS_REGION").is_none());
    // A bucket alone is enough with two pods: the chart's Redis, on for them, holds the jobs.
    let set = ["gateway.batch.objects=s3://bucket/batches"];
    let bucket = render(
        "batch-objects-default-redis",
        &Render {
            set: &set,
            ..Render::default()
        },
    );
    assert_eq!(batch_config(&bucket)["state"], "redis");
}

#[test]
fn gateway_config_batch_overrides_what_the_chart_chose() {
    let set = [
        "gateway.replicas=1",
        "gateway.config.batch.lease_ms=30000",
        "gateway.config.batch.dir=/data/batch",
    ];
    let r = render(
        "batch-override",
        &Render {
            set: &set,
            ..Render::default()
        },
    );
    assert_eq!(
        batch_config(&r),
        serde_json::json!({"dir": "/data/batch", "lease_ms": 30000})
    );
    // An operator who knows better (e.g. a Sentinel in gateway.config.limits) turns it on.
    let set = ["gateway.config.batch.enabled=true"];
    let on = render(
        "batch-forced-on",
        &Render {
            set: &set,
            ..Render::default()
        },
    );
    assert_eq!(batch_config(&on)["enabled"], true);
    let said = notes(&set);
    assert!(!said.contains("Batch API is off"), "{said}");
}

#[test]
fn persistence_with_several_pods_or_the_shared_mode_is_refused_with_the_way_out() {
    let cases: [(&[&str], &str); 3] = [
        (
            &["gateway.batch.persistence.enabled=true"],
            "gateway.batch.persistence needs a single gateway pod",
        ),
        (
            &[
                "gateway.replicas=1",
                "gateway.autoscaling.enabled=true",
                "gateway.batch.persistence.enabled=true",
            ],
            "gateway.batch.persistence needs a single gateway pod",
        ),
        (
            &[
                "gateway.replicas=1",
                "gateway.batch.persistence.enabled=true",
                "gateway.batch.objects=s3://bucket/batches",
                "redis.enabled=true",
            ],
            "gateway.batch.persistence is for the local mode of one pod",
        ),
    ];
    for (set, message) in cases {
        let out = Render {
            set,
            ..Render::default()
        }
        .template();
        match out {
            Ok(_) => panic!("helm rendered {set:?}"),
            Err(e) => assert!(e.to_string().contains(message), "{set:?}: {e}"),
        }
    }
}
