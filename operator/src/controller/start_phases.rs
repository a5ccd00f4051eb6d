//! A cold start split into its phases, read from the engine pods' conditions: waiting for a
//! node, pulling the image, loading the model (`status.coldStartPhases`).
//!
//! The engine exposes no start-up timing of its own (no metric or log line splits fetching
//! weights from loading and warming up), so everything from the container's start to
//! `Ready` is one phase, `load`. The phases describe the most recent start (the pod that
//! turned ready last), not a median: one start's phases add up to what it took. The
//! autoscaler's lead time still comes from the whole start (`scaling::ColdStarts`).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;

use super::{Context, lock, model_key};
use crate::children::selector_string;
use crate::crd::{ColdStartPhases, Duration, ModelDeployment};
use crate::scale::ReplicaCounts;
use crate::scaling::pending_replicas;

/// The phases of the most recent start among `pods`: the pod whose `Ready` condition turned
/// true last. `None` when no pod is ready.
pub fn latest_start(pods: &[Pod]) -> Option<ColdStartPhases> {
    let (pod, ready) = pods
        .iter()
        .filter_map(|pod| Some((pod, condition_since(pod, "Ready")?)))
        .max_by_key(|(_, ready)| *ready)?;
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let scheduled = condition_since(pod, "PodScheduled");
    let started = containers_started(pod);
    Some(ColdStartPhases {
        scheduling: between(created, scheduled),
        image_pull: between(scheduled, started),
        load: between(started, Some(ready)),
    })
}

/// The name of the longest phase of `phases` (its status field's name).
pub fn slowest(phases: &ColdStartPhases) -> Option<String> {
    [
        ("scheduling", &phases.scheduling),
        ("imagePull", &phases.image_pull),
        ("load", &phases.load),
    ]
    .into_iter()
    .filter_map(|(name, d)| Some((name, d.as_ref()?.as_secs_f64())))
    .max_by(|a, b| a.1.total_cmp(&b.1))
    .map(|(name, _)| name.to_string())
}

/// When condition `type_` last turned true on `pod`; `None` while it is not true.
fn condition_since(pod: &Pod, type_: &str) -> Option<Timestamp> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let c = conditions.iter().find(|c| c.type_ == type_)?;
    (c.status == "True").then_some(c.last_transition_time.as_ref()?.0)
}

/// When the last of the pod's containers started running (readiness waits for all of them).
fn containers_started(pod: &Pod) -> Option<Timestamp> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses
        .iter()
        .filter_map(|s| Some(s.state.as_ref()?.running.as_ref()?.started_at.as_ref()?.0))
        .max()
}

/// `to − from` as a CRD duration; a negative span (a clock step, a restart after `Ready`)
/// reads as zero.
fn between(from: Option<Timestamp>, to: Option<Timestamp>) -> Option<Duration> {
    let ms = to?.as_millisecond() - from?.as_millisecond();
    let span = std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    Some(Duration::from_std(span))
}

/// Lists the model's pods (by its label selector) while a start is pending and once more
/// after it (the look that sees the pod ready), and keeps the latest phases in the model's
/// entry. One list per decision period while pending, none otherwise. A failed list is
/// logged and keeps the phases known: phases inform, they never block a decision.
pub async fn observe(
    md: &ModelDeployment,
    ctx: &Context,
    namespace: &str,
    counts: Option<ReplicaCounts>,
) {
    let pending = counts.is_some_and(|c| pending_replicas(c) > 0);
    let key = model_key(md);
    let was_pending = lock(&ctx.models)
        .get_mut(&key)
        .is_some_and(|e| std::mem::replace(&mut e.start_pending, pending));
    if !pending && !was_pending {
        return;
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let params = ListParams::default().labels(&selector_string(md));
    match api.list(&params).await {
        Ok(list) => {
            if let (Some(phases), Some(entry)) =
                (latest_start(&list.items), lock(&ctx.models).get_mut(&key))
            {
                entry.start_phases = Some(phases);
            }
        }
        Err(error) => tracing::warn!(model = %key, "listing pods for the start phases: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A pod created at 10:00:00 with `conditions` (type, time) true and its one container
    /// started at `started`.
    fn pod(conditions: &[(&str, &str)], started: Option<&str>) -> Pod {
        let conditions: Vec<_> = conditions
            .iter()
            .map(|(t, at)| json!({"type": t, "status": "True", "lastTransitionTime": at}))
            .collect();
        let state = started.map_or(
            json!({"waiting": {"reason": "ContainerCreating"}}),
            |at| json!({"running": {"startedAt": at}}),
        );
        serde_json::from_value(json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-01-01T10:00:00Z"},
            "status": {"conditions": conditions, "containerStatuses": [{
                "name": "engine", "image": "i", "imageID": "", "ready": false,
                "restartCount": 0, "state": state}]}
        }))
        .expect("a pod")
    }

    fn text(d: &Option<Duration>) -> Option<String> {
        d.as_ref().map(ToString::to_string)
    }

    #[test]
    fn a_ready_pod_splits_into_scheduling_image_pull_and_load() {
        let ready = pod(
            &[
                ("PodScheduled", "2026-01-01T10:00:12Z"),
                ("Initialized", "2026-01-01T10:00:20Z"),
                ("ContainersReady", "2026-01-01T10:02:27Z"),
                ("Ready", "2026-01-01T10:02:27Z"),
            ],
            Some("2026-01-01T10:00:52Z"),
        );
        let phases = latest_start(&[ready]).expect("phases");
        assert_eq!(
            (
                text(&phases.scheduling),
                text(&phases.image_pull),
                text(&phases.load)
            ),
            (Some("12s".into()), Some("40s".into()), Some("95s".into()))
        );
        assert_eq!(slowest(&phases).as_deref(), Some("load"));
    }

    #[test]
    fn the_pod_ready_last_is_the_start_reported_and_unready_pods_none() {
        let early = pod(
            &[
                ("PodScheduled", "2026-01-01T10:00:01Z"),
                ("Ready", "2026-01-01T10:00:30Z"),
            ],
            Some("2026-01-01T10:00:20Z"),
        );
        let late = pod(
            &[
                ("PodScheduled", "2026-01-01T10:03:00Z"),
                ("Ready", "2026-01-01T10:03:40Z"),
            ],
            Some("2026-01-01T10:03:30Z"),
        );
        let pulling = pod(&[("PodScheduled", "2026-01-01T10:00:02Z")], None);
        let phases = latest_start(&[early, late, pulling.clone()]).expect("phases");
        assert_eq!(text(&phases.scheduling).as_deref(), Some("180s"));
        assert_eq!(slowest(&phases).as_deref(), Some("scheduling"));
        assert_eq!(latest_start(&[pulling]), None, "no pod ready: no start");
    }

    #[test]
    fn a_phase_without_its_bounds_is_absent_and_a_negative_span_is_zero() {
        // Ready before the (restarted) container's start: load reads 0, never negative.
        let restarted = pod(
            &[("Ready", "2026-01-01T10:01:00Z")],
            Some("2026-01-01T10:05:00Z"),
        );
        let phases = latest_start(&[restarted]).expect("phases");
        assert_eq!(
            (phases.scheduling.is_none(), phases.image_pull.is_none()),
            (true, true)
        );
        assert_eq!(phases.load.as_ref().map(Duration::as_secs_f64), Some(0.0));
        assert_eq!(slowest(&phases).as_deref(), Some("load"));
    }
}
