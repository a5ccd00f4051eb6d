//! The operator's per-model gauges: set by a decision (mocked API server) from what it saw,
//! labelled `model_name` (served name) and `namespace`, dropped with the model, and the whole
//! `/metrics` text accepted by `promtool check metrics`.

// Shared with the other mocked-API tests; this file uses a part of it.
#[allow(dead_code)]
mod fixtures;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use fixtures::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokenscale_common::metrics::operator;
use tokenscale_operator::controller::reconcile;
use tokenscale_operator::controller::ticker::decide_due;
use tokenscale_operator::telemetry::{Metrics, ModelFigures};

/// The exposition line of the series `name{...}`, if any.
fn line_of<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(&format!("{name}{{")))
}

#[tokio::test]
async fn a_decision_sets_the_models_gauges_and_a_deletion_drops_them() {
    let (ctx, verifier) = context(heavy_demand());
    let server = verifier.run(Scenario::ScaleUp);
    let model = Arc::new(md("engine:v1"));
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        reconcile(model.clone(), ctx.clone()),
    )
    .await
    .expect("reconcile finished in time");
    assert!(result.is_ok(), "{result:?}");
    tokio::time::timeout(Duration::from_secs(5), decide_due(&ctx))
        .await
        .expect("the decision finished in time");
    let text = ctx.metrics.encode();

    let mut deleted = (*model).clone();
    deleted.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let gone = reconcile(Arc::new(deleted), ctx.clone()).await;
    assert!(gone.is_ok(), "{gone:?}");
    let after_delete = ctx.metrics.encode();
    drop(ctx);
    let bodies = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("verifier finished")
        .expect("verifier passed");

    // The fixture: servedName llama-3 in testns, 1 GPU per replica, SLO 500ms / 50ms; the
    // Deployment had one ready replica when observed, and the status says what was desired.
    let desired = bodies[7]["status"]["desiredReplicas"].as_u64().unwrap_or(0);
    assert!(desired > 1, "heavy demand scales up: {desired}");
    let labels = "{model_name=\"llama-3\",namespace=\"testns\"}";
    for (name, value) in [
        (operator::DESIRED_REPLICAS, desired.to_string()),
        (operator::READY_REPLICAS, "1".to_string()),
        (operator::GPUS, "1".to_string()),
        (operator::SLO_TTFT_SECONDS, "0.5".to_string()),
        (operator::SLO_TPOT_SECONDS, "0.05".to_string()),
    ] {
        assert_eq!(
            line_of(&text, name),
            Some(format!("{name}{labels} {value}").as_str()),
            "{text}"
        );
        assert!(text.contains(&format!("# TYPE {name} gauge")), "{text}");
        assert_eq!(line_of(&after_delete, name), None, "{after_delete}");
    }
}

#[test]
fn gpus_count_only_ready_replicas_times_gpus_per_replica() {
    let metrics = Metrics::default();
    let mut model = md("engine:v1");
    model.spec.engine.gpus_per_replica = Some(4);
    let figures = ModelFigures {
        desired_replicas: 5,
        ready_replicas: 3,
    };
    metrics.models.set(&model, figures);
    let text = metrics.encode();
    assert_eq!(
        line_of(&text, operator::GPUS),
        Some(
            format!(
                "{}{{model_name=\"llama-3\",namespace=\"testns\"}} 12",
                operator::GPUS
            )
            .as_str()
        ),
        "{text}"
    );
}

#[test]
fn a_renamed_model_leaves_no_stale_series() {
    let metrics = Metrics::default();
    let figures = ModelFigures {
        desired_replicas: 1,
        ready_replicas: 1,
    };
    let mut model = md("engine:v1");
    metrics.models.set(&model, figures);
    model.spec.model.served_name = Some("llama-next".into());
    metrics.models.set(&model, figures);
    let text = metrics.encode();
    assert!(!text.contains("\"llama-3\""), "{text}");
    assert!(
        line_of(&text, operator::READY_REPLICAS).is_some_and(|l| l.contains("\"llama-next\"")),
        "{text}"
    );
}

#[test]
fn the_exposition_passes_promtool_check_metrics() {
    let metrics = Metrics::default();
    metrics.reconciliations.inc();
    metrics.decision("up", "SloBroken");
    metrics.models.set(
        &md("engine:v1"),
        ModelFigures {
            desired_replicas: 2,
            ready_replicas: 1,
        },
    );
    let text = metrics.encode();
    // promtool is a CI tool (scripts/setup installs it): missing is a failure, not a skip.
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("promtool (Debian package `prometheus`) not runnable: {e}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("writing to promtool: {e}"));
    }
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("promtool: {e}"));
    assert!(
        out.status.success(),
        "promtool check metrics failed:\n{}{}\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The whole exposition (one series per family, so the order within a family is fixed), byte
/// for byte as captured (`TOKENSCALE_BLESS=1` rewrites the file after a deliberate change).
#[test]
fn the_exposition_is_unchanged_byte_for_byte() {
    let metrics = Metrics::default();
    metrics.reconciliations.inc();
    metrics.decision("up", "SloBroken");
    metrics.reconcile_failure(&tokenscale_operator::error::Error::InvalidSpec("x".into()));
    metrics.leader.set(1);
    for seconds in [0.0005, 0.02, 0.3, 50.0] {
        metrics.duration.observe(seconds);
    }
    let figures = ModelFigures {
        desired_replicas: 2,
        ready_replicas: 1,
    };
    metrics.models.set(&md("engine:v1"), figures);
    let text = metrics.encode();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/metrics_golden.txt"
    );
    assert_eq!(tokenscale_scratch::golden(path, &text), text);
}
