//! What makes a ModelDeployment reconcile: a change of its spec, labels or annotations, or a
//! change of one of its children that reconcile acts on. Not its status (the scaling clock
//! writes it every period) nor its children's status churn: each of those used to re-apply
//! every child (3–4 server-side applies) for nothing, a cost that grew with the fleet.
//!
//! The filters are kube-runtime's predicates on the watch streams the `Controller` is built
//! from ([`kube::runtime::Controller::for_stream`]); the 5-minute resync
//! ([`super::apply::RESYNC`]) stays the safety net for an event a filter or a lost watch hid.

use std::fmt::Debug;

use futures::{Stream, TryStreamExt, future};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{Predicate, WatchStreamExt, predicates};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use crate::crd::ModelDeployment;

/// The ModelDeployments to reconcile: every object `api` lists or watches goes into the
/// controller's cache (`writer`, status included: the wake relay reads it), but only a new
/// generation (a spec edit, `kubectl scale` included), new labels or new annotations pass on.
pub fn model_deployments(
    api: Api<ModelDeployment>,
    config: watcher::Config,
    writer: Writer<ModelDeployment>,
) -> impl Stream<Item = Result<ModelDeployment, watcher::Error>> + Send + 'static {
    watcher::watcher(api, config)
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(intent, Default::default())
}

/// A hash of what a person or another controller asks of an object: its generation (spec),
/// labels and annotations. An object without a generation (a Service) falls back to its
/// resource version: any change of it counts.
pub fn intent<K: Resource>(object: &K) -> Option<u64> {
    predicates::generation
        .fallback(predicates::resource_version)
        .combine(predicates::labels)
        .combine(predicates::annotations)
        .hash_property(object)
}

/// What of an engine Deployment reconcile acts on: its intent, and its ready count (each
/// replica turning ready is timed as a cold start by the reconcile it triggers). Its other
/// status fields (observed generation, updated or available counts) change nothing.
pub fn deployment_changes(deployment: &Deployment) -> Option<u64> {
    let ready = deployment
        .status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    intent
        .combine(move |_: &Deployment| Some(u64::from(ready.unsigned_abs())))
        .hash_property(deployment)
}

/// The children of kind `K` in `api` (selected by `config`) whose change matters, as
/// `matters` hashes it: an unchanged hash is dropped. A deleted child always passes, so
/// reconcile recreates it at once (a delete event need not change any field a hash reads:
/// it is marked as being deleted first).
pub fn children<K, P>(
    api: Api<K>,
    config: watcher::Config,
    matters: P,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + 'static,
    P: Predicate<K> + Send + 'static,
{
    watcher::watcher(api, config)
        .default_backoff()
        .try_filter_map(|event| future::ready(Ok(touched(event))))
        .predicate_filter(being_deleted.combine(matters), Default::default())
}

/// The object an event is about, a deleted one marked as being deleted; `None` for the
/// markers of a re-list.
fn touched<K: Resource>(event: Event<K>) -> Option<K> {
    match event {
        Event::Apply(object) | Event::InitApply(object) => Some(object),
        Event::Delete(mut object) => {
            object
                .meta_mut()
                .deletion_timestamp
                .get_or_insert_with(|| Time(k8s_openapi::jiff::Timestamp::now()));
            Some(object)
        }
        Event::Init | Event::InitDone => None,
    }
}

/// Whether the object is being (or has been) deleted.
fn being_deleted<K: Resource>(object: &K) -> Option<u64> {
    Some(u64::from(object.meta().deletion_timestamp.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, ready: i32, observed: i64) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "generation": generation, "resourceVersion": "7",
                         "labels": {"a": "b"}},
            "status": {"readyReplicas": ready, "observedGeneration": observed}
        }))
        .expect("deployment")
    }

    #[test]
    fn a_deployment_matters_when_its_spec_or_ready_count_moves_not_its_other_status() {
        let base = deployment_changes(&deployment(1, 1, 1));
        assert_eq!(base, deployment_changes(&deployment(1, 1, 0)));
        assert_ne!(base, deployment_changes(&deployment(2, 1, 1)));
        assert_ne!(base, deployment_changes(&deployment(1, 2, 1)));
    }

    #[test]
    fn a_model_deployment_matters_on_a_new_generation_or_labels_not_status() {
        let md = |generation: i64, label: &str, desired: i32| -> ModelDeployment {
            serde_json::from_value(json!({
                "apiVersion": "tokenscale.dev/v1alpha1", "kind": "ModelDeployment",
                "metadata": {"name": "m", "generation": generation, "labels": {"l": label}},
                "spec": {"model": {"source": "smollm2-135m"}, "replicas": {"max": 2},
                         "slo": {"ttftP95": "1s", "tpotP95": "100ms"}},
                "status": {"desiredReplicas": desired}
            }))
            .expect("md")
        };
        let base = intent(&md(1, "x", 1));
        assert_eq!(base, intent(&md(1, "x", 5)));
        assert_ne!(base, intent(&md(2, "x", 1)));
        assert_ne!(base, intent(&md(1, "y", 1)));
    }

    #[test]
    fn a_deleted_child_is_marked_so_it_passes_the_filter() {
        let before = deployment(1, 1, 1);
        let deleted = touched(Event::Delete(before.clone())).expect("an object");
        assert_ne!(
            being_deleted
                .combine(deployment_changes)
                .hash_property(&before),
            being_deleted
                .combine(deployment_changes)
                .hash_property(&deleted)
        );
        assert!(touched::<Deployment>(Event::InitDone).is_none());
    }
}
