//! A cold start split into its phases (`status.coldStartPhases`): waiting for a node and
//! pulling the image from the engine pod's conditions; fetching the weights, loading them and
//! warming up from the engine's own start-phase metric, read from the scrape each decision
//! makes anyway. Engines that export none (vLLM, SGLang, llama.cpp) keep everything from the
//! container's start to `Ready` as one phase, `load`.
//!
//! The phases describe the most recent start (the pod that turned ready last), not a median:
//! one start's phases add up to what it took. The autoscaler's lead time still comes from the
//! whole start (`scaling::ColdStarts`).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;
use tokenscale_scaling::metrics_source::EngineStart;

use crate::children::selector_string;
use crate::controller::{Context, model_key};
use crate::crd::{ColdStartPhases, Duration, ModelDeployment};
use crate::metrics_source::MetricsView;
use crate::scale::ReplicaCounts;
use crate::scaling::pending_replicas;

/// The most recent start among `pods` (the pod whose `Ready` condition turned true last): its
/// pod's name and its phases. `None` when no pod is ready.
pub fn latest_start(pods: &[Pod]) -> Option<(String, ColdStartPhases)> {
    let (pod, ready) = pods
        .iter()
        .filter_map(|pod| Some((pod, condition_since(pod, "Ready")?)))
        .max_by_key(|(_, ready)| *ready)?;
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let scheduled = condition_since(pod, "PodScheduled");
    let started = containers_started(pod);
    let phases = ColdStartPhases {
        scheduling: between(created, scheduled),
        image_pull: between(scheduled, started),
        load: between(started, Some(ready)),
        ..ColdStartPhases::default()
    };
    Some((pod.metadata.name.clone().unwrap_or_default(), phases))
}

/// `pod`'s phases with its `load` (container start to `Ready`) split by the engine's own
/// start: `fetch` and `load` as the engine measured them, `warmup` the rest (the engine's
/// warm-up and ready, and the readiness probe noticing), never less than the engine's own
/// warm-up and ready (the pod's times are whole seconds, the engine's are not).
pub fn split(pod: &ColdStartPhases, engine: &EngineStart) -> ColdStartPhases {
    let own_warmup = engine.warmup_s + engine.ready_s;
    let warmup = pod.load.as_ref().map_or(own_warmup, |whole| {
        (whole.as_secs_f64() - engine.fetch_s - engine.load_s).max(own_warmup)
    });
    ColdStartPhases {
        fetch: Some(seconds(engine.fetch_s)),
        load: Some(seconds(engine.load_s)),
        warmup: Some(seconds(warmup)),
        ..pod.clone()
    }
}

/// `s` seconds (non-negative and finite: [`EngineStart`] is read so) as a CRD duration.
fn seconds(s: f64) -> Duration {
    Duration::from_std(std::time::Duration::try_from_secs_f64(s).unwrap_or_default())
}

/// The name of the longest phase of `phases` (its status field's name).
pub fn slowest(phases: &ColdStartPhases) -> Option<String> {
    [
        ("scheduling", &phases.scheduling),
        ("imagePull", &phases.image_pull),
        ("fetch", &phases.fetch),
        ("load", &phases.load),
        ("warmup", &phases.warmup),
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
    let was_pending = ctx
        .clock
        .models()
        .get_mut(&key)
        .is_some_and(|e| std::mem::replace(&mut e.start_pending, pending));
    if !pending && !was_pending {
        return;
    }
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let params = ListParams::default().labels(&selector_string(md));
    match api.list(&params).await {
        Ok(list) => {
            if let (Some((pod, phases)), Some(entry)) =
                (latest_start(&list.items), ctx.clock.models().get_mut(&key))
            {
                entry.start_phases = Some(phases);
                entry.start_pod = Some(pod);
            }
        }
        Err(error) => tracing::warn!(model = %key, "listing pods for the start phases: {error}"),
    }
}

/// Splits the latest start's `load` by its pod's own start phases once this decision's view
/// carries them (read from the scrape it made anyway: no API call). A start already split, or
/// a pod whose engine exports no phases, stays as it is.
pub fn refine(md: &ModelDeployment, ctx: &Context, view: &MetricsView) {
    let mut models = ctx.clock.models();
    let Some(entry) = models.get_mut(&model_key(md)) else {
        return;
    };
    let (Some(pod), Some(phases)) = (&entry.start_pod, &entry.start_phases) else {
        return;
    };
    if phases.fetch.is_some() {
        return;
    }
    if let Some(engine) = view.engine_starts.get(pod) {
        entry.start_phases = Some(split(phases, engine));
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
        let (_, phases) = latest_start(&[ready]).expect("phases");
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
        let (_, phases) = latest_start(&[early, late, pulling.clone()]).expect("phases");
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
        let (_, phases) = latest_start(&[restarted]).expect("phases");
        assert_eq!(
            (phases.scheduling.is_none(), phases.image_pull.is_none()),
            (true, true)
        );
        assert_eq!(phases.load.as_ref().map(Duration::as_secs_f64), Some(0.0));
        assert_eq!(slowest(&phases).as_deref(), Some("load"));
    }

    fn secs(text: &str) -> Option<Duration> {
        Some(text.parse().expect("a duration"))
    }

    #[test]
    fn the_engines_own_start_splits_load_and_warmup_takes_the_rest() {
        let pod = ColdStartPhases {
            scheduling: secs("12s"),
            image_pull: secs("40s"),
            load: secs("95s"),
            ..ColdStartPhases::default()
        };
        let engine = EngineStart {
            fetch_s: 60.0,
            load_s: 20.0,
            warmup_s: 4.5,
            ready_s: 0.5,
        };
        let phases = split(&pod, &engine);
        assert_eq!(
            [&phases.fetch, &phases.load, &phases.warmup].map(text),
            [Some("60s".into()), Some("20s".into()), Some("15s".into())]
        );
        assert_eq!(
            (text(&phases.scheduling), text(&phases.image_pull)),
            (Some("12s".into()), Some("40s".into())),
            "the pod's own phases are kept"
        );
        assert_eq!(slowest(&phases).as_deref(), Some("fetch"));
        // The pod's whole seconds can fall short of the engine's sum: warmup is then the
        // engine's own, never negative.
        let short = ColdStartPhases {
            load: secs("80s"),
            ..pod
        };
        assert_eq!(text(&split(&short, &engine).warmup).as_deref(), Some("5s"));
    }
}
