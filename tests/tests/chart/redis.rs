//! Quotas that never multiply (issue 36): several gateway pods without shared limits are
//! refused with the reason, the defaults share them through the chart's own Redis, and that
//! Redis keeps its data (AOF on a claim) behind a password the gateway is given.

use serde_json::Value;
use tokenscale_e2e::chart::Render;
use tokenscale_gateway::config::Config;

use crate::chart::batch::{env, gateway_spec, notes};
use crate::{Rendered, default_render, render_set};

/// The chart's Redis and the Secret it generates for the test release.
const REDIS: &str = "tokenscale-redis";
const GENERATED_SECRET: &str = "tokenscale-redis-password";

/// The Redis container of `r`'s chart Redis.
fn redis_container(r: &Rendered) -> &Value {
    &r.get("Deployment", REDIS).value["spec"]["template"]["spec"]["containers"][0]
}

/// The gateway's gateway.yaml in `r`, as the gateway parses it.
fn gateway_config(r: &Rendered) -> Config {
    let text = r.get("ConfigMap", "tokenscale-gateway").value["data"]["gateway.yaml"]
        .as_str()
        .unwrap_or_default();
    Config::from_yaml(text).unwrap_or_else(|e| panic!("[{}] gateway.yaml refused: {e}", r.label))
}

/// `helm template` with `set`; the error text when it fails.
fn refusal(set: &[&str]) -> String {
    match (Render {
        set,
        ..Render::default()
    })
    .template()
    {
        Ok(_) => panic!("helm rendered {set:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn several_gateway_pods_without_shared_limits_are_refused_with_the_reason() {
    let cases: [(&[&str], &[&str]); 3] = [
        (
            &["gateway.replicas=2", "redis.enabled=false"],
            &[
                "2 gateway pods (gateway.replicas: 2) without shared limits",
                "redis.enabled is false and redis.url is empty",
                "a tenant would get up to 2 times its quota",
                "gateway.replicas: 1",
            ],
        ),
        (
            &[
                "gateway.autoscaling.enabled=true",
                "gateway.autoscaling.maxReplicas=5",
                "redis.enabled=false",
            ],
            &[
                "up to 5 gateway pods (gateway.autoscaling.maxReplicas: 5)",
                "up to 5 times its quota",
            ],
        ),
        (
            &["gateway.config.limits.store=memory"],
            &[
                "gateway.config.limits.store is memory",
                "set gateway.config.limits.store to redis",
            ],
        ),
    ];
    for (set, reasons) in cases {
        let error = refusal(set);
        for reason in reasons {
            assert!(
                error.contains(reason),
                "{set:?}: no {reason:?} in:\n{error}"
            );
        }
    }
    // One pod limits alone, rightly: no Redis, no refusal.
    let one = render_set("one-pod-no-redis", &["gateway.replicas=1"]);
    assert_eq!(
        one.of_kind("Deployment")
            .filter(|d| d.name == REDIS)
            .count(),
        0
    );
    assert!(gateway_config(&one).limits.redis_url.is_none());
    // Your own store in gateway.config.limits (a Sentinel here) shares them: no chart Redis.
    let set = [
        "gateway.config.limits.store=redis",
        "gateway.config.limits.redis_sentinel.master=mymaster",
        "gateway.config.limits.redis_sentinel.urls[0]=redis://sentinel:26379",
    ];
    let sentinel = render_set("sentinel", &set);
    assert_eq!(
        sentinel
            .of_kind("Deployment")
            .filter(|d| d.name == REDIS)
            .count(),
        0
    );
    assert!(gateway_config(&sentinel).limits.redis_sentinel.is_some());
}

#[test]
fn the_defaults_share_limits_through_a_redis_with_aof_a_claim_and_a_password() {
    let r = default_render();
    assert_eq!(gateway_spec(r)["replicas"], 2);
    let limits = gateway_config(r).limits;
    assert_eq!(
        limits.redis_url.map(|u| u.value),
        Some("redis://tokenscale-redis.tokenscale-system.svc:6379/0".to_owned())
    );
    let redis = redis_container(r);
    let args: Vec<&str> = redis["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let after = |flag: &str| {
        args.iter()
            .position(|a| *a == flag)
            .and_then(|i| args.get(i + 1).copied())
    };
    assert_eq!(after("--appendonly"), Some("yes"), "{args:?}");
    assert_eq!(after("--appendfsync"), Some("everysec"), "{args:?}");
    // The kubelet expands $(VAR) from the container's env: the password itself is not here.
    assert_eq!(
        after("--requirepass"),
        Some("$(REDIS_PASSWORD)"),
        "{args:?}"
    );
    let password_env = redis["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "REDIS_PASSWORD")
        .map(|e| &e["valueFrom"]["secretKeyRef"]);
    let secret_ref = serde_json::json!({"name": GENERATED_SECRET, "key": "password"});
    assert_eq!(password_env, Some(&secret_ref));
    // The gateway reads the same Secret through the variable its config names.
    assert_eq!(
        env(r, &limits.redis_password_env).map(|e| &e["valueFrom"]["secretKeyRef"]),
        Some(&secret_ref)
    );
    let secret = r.get("Secret", GENERATED_SECRET);
    let encoded = secret.value["data"]["password"]
        .as_str()
        .unwrap_or_default();
    // 32 random characters are 44 in base64.
    assert_eq!(encoded.len(), 44, "{encoded}");
    // /data on the claim, and the pod replaced rather than surged onto it.
    let spec = &r.get("Deployment", REDIS).value["spec"];
    assert_eq!(spec["strategy"]["type"], "Recreate");
    assert_eq!(redis["volumeMounts"][0]["mountPath"], "/data");
    let data = spec["template"]["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == redis["volumeMounts"][0]["name"]);
    assert_eq!(
        data.map(|v| &v["persistentVolumeClaim"]["claimName"]),
        Some(&Value::from(REDIS))
    );
    let claim = &r.get("PersistentVolumeClaim", REDIS).value["spec"];
    assert_eq!(claim["resources"]["requests"]["storage"], "1Gi");
    assert_eq!(claim["accessModes"], serde_json::json!(["ReadWriteOnce"]));
    assert!(claim.get("storageClassName").is_none(), "{claim}");
}

#[test]
fn your_own_password_secret_and_volume_settings_are_used() {
    let set = [
        "redis.passwordSecret.name=redis-auth",
        "redis.passwordSecret.key=pw",
        "redis.persistence.size=5Gi",
        "redis.persistence.storageClass=-",
    ];
    let r = render_set("redis-own-secret", &set);
    assert_eq!(
        r.of_kind("Secret")
            .filter(|s| s.name.contains("redis"))
            .count(),
        0
    );
    let secret_ref = serde_json::json!({"name": "redis-auth", "key": "pw"});
    assert_eq!(
        env(&r, "TOKENSCALE_REDIS_PASSWORD").map(|e| &e["valueFrom"]["secretKeyRef"]),
        Some(&secret_ref)
    );
    assert_eq!(
        redis_container(&r)["env"][0]["valueFrom"]["secretKeyRef"],
        secret_ref
    );
    let claim = &r.get("PersistentVolumeClaim", REDIS).value["spec"];
    assert_eq!(claim["resources"]["requests"]["storage"], "5Gi");
    // "-": no class at all (a pre-provisioned volume), not the cluster's default.
    assert_eq!(claim["storageClassName"], "");
    // Without persistence: an emptyDir of that size, and no claim.
    let set = ["redis.persistence.enabled=false"];
    let r = render_set("redis-no-claim", &set);
    assert_eq!(r.of_kind("PersistentVolumeClaim").count(), 0);
    let volumes = &r.get("Deployment", REDIS).value["spec"]["template"]["spec"]["volumes"];
    assert_eq!(volumes[0]["emptyDir"]["sizeLimit"], "1Gi");
}

#[test]
fn the_notes_say_what_happens_while_redis_is_down() {
    let said = notes(&[]);
    for expected in [
        "through the chart's Redis",
        "secret/tokenscale-redis-password",
        "While Redis is down",
        "each gateway pod limits alone at its",
        "share of every quota",
        "on_store_failure=deny",
        "503",
    ] {
        assert!(said.contains(expected), "NOTES lack {expected:?}:\n{said}");
    }
    let alone = notes(&["gateway.replicas=1"]);
    assert!(!alone.contains("Shared limits"), "{alone}");
}
