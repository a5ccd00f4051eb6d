//! Kubernetes discovery: `ModelDeployment` objects give served model names, their engine
//! `EndpointSlice`s give ready replica addresses; both are watched through reflectors.
//!
//! The join: the operator labels every child of a `ModelDeployment` (so its Service, whose
//! labels the EndpointSlice controller copies onto the slices) with
//! `tokenscale.dev/model-deployment: <name>`. The served name is `spec.model.servedName`,
//! else the object's name. Endpoints not `ready` or `terminating` get no new work at once.
//! The CRD is read as a `DynamicObject`, so this crate does not depend on the operator.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};

use super::Registry;
use crate::config::KubernetesConfig;

/// Label on EndpointSlices (copied from the operator's Service) naming the `ModelDeployment`.
pub const LABEL_MODEL_DEPLOYMENT: &str = "tokenscale.dev/model-deployment";
/// Group, version and kind of the custom resource.
pub const MODEL_DEPLOYMENT: (&str, &str, &str) = ("tokenscale.dev", "v1alpha1", "ModelDeployment");

/// Served model name → replica base URLs, from the two watched object sets.
pub fn desired_replicas(
    deployments: &[Arc<DynamicObject>],
    slices: &[Arc<EndpointSlice>],
    port_name: &str,
) -> BTreeMap<String, Vec<String>> {
    let mut served: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut desired: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for md in deployments {
        let name = md.name_any();
        let served_name = md.data["spec"]["model"]["servedName"]
            .as_str()
            .map_or(name.clone(), str::to_string);
        served.insert(
            (md.namespace().unwrap_or_default(), name),
            served_name.clone(),
        );
        desired.entry(served_name).or_default();
    }
    for slice in slices {
        let Some(md) = slice.labels().get(LABEL_MODEL_DEPLOYMENT) else {
            continue;
        };
        let Some(model) = served.get(&(slice.namespace().unwrap_or_default(), md.clone())) else {
            continue;
        };
        let port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(port_name))
            .and_then(|p| p.port);
        let Some(port) = port else { continue };
        let urls = desired.entry(model.clone()).or_default();
        for endpoint in slice.endpoints.iter().flatten() {
            let conditions = endpoint.conditions.as_ref();
            // `ready: null` means ready (API semantics); terminating endpoints get no new work.
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
            let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
            if !ready || terminating {
                continue;
            }
            if let Some(address) = endpoint.addresses.first() {
                let host = if address.contains(':') {
                    format!("[{address}]")
                } else {
                    address.clone()
                };
                urls.push(format!("http://{host}:{port}"));
            }
        }
    }
    for urls in desired.values_mut() {
        urls.sort();
        urls.dedup();
    }
    desired
}

/// Watches the cluster and keeps `registry` in step until the process ends.
pub async fn run(registry: Registry, config: KubernetesConfig) -> Result<(), kube::Error> {
    let client = Client::try_default().await?;
    let (group, version, kind) = MODEL_DEPLOYMENT;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let namespaces = config.watched_namespaces();
    // One reflector pair per namespace (a store's initial listing replaces its whole
    // content, so namespaces cannot share one); `None` watches every namespace.
    let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|ns| Some(ns.as_str())).collect()
    };
    let mut stores = Vec::new();
    let mut streams = Vec::new();
    for scope in scopes {
        let (mds, slices): (Api<DynamicObject>, Api<EndpointSlice>) = match scope {
            Some(ns) => (
                Api::namespaced_with(client.clone(), ns, &resource),
                Api::namespaced(client.clone(), ns),
            ),
            None => (
                Api::all_with(client.clone(), &resource),
                Api::all(client.clone()),
            ),
        };
        let md_writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
        let md_store = md_writer.as_reader();
        let (slice_store, slice_writer) = reflector::store::<EndpointSlice>();
        let md_events = reflector(
            md_writer,
            watcher(mds, watcher::Config::default()).default_backoff(),
        )
        .touched_objects()
        .map(|_| ())
        .boxed();
        let slice_config = watcher::Config::default().labels(LABEL_MODEL_DEPLOYMENT);
        let slice_events = reflector(
            slice_writer,
            watcher(slices, slice_config).default_backoff(),
        )
        .touched_objects()
        .map(|_| ())
        .boxed();
        stores.push((md_store, slice_store));
        streams.extend([md_events, slice_events]);
    }
    let mut events = futures::stream::select_all(streams);
    let port_name = config.port_name.unwrap_or_else(|| "http".to_string());
    let mut known: BTreeSet<String> = BTreeSet::new();
    while events.next().await.is_some() {
        // Coalesce bursts (a rollout touches many objects) into one resync.
        tokio::time::sleep(Duration::from_millis(100)).await;
        while let Some(Some(_)) = events.next().now_or_never() {}
        let (mut deployments, mut slices) = (Vec::new(), Vec::new());
        for (md_store, slice_store) in &stores {
            deployments.extend(md_store.state());
            slices.extend(slice_store.state());
        }
        let desired = desired_replicas(&deployments, &slices, &port_name);
        for (model, urls) in &desired {
            registry.sync(model, urls);
        }
        for gone in known.iter().filter(|m| !desired.contains_key(*m)) {
            registry.router().remove_model(gone);
        }
        known = desired.into_keys().collect();
    }
    Ok(())
}

use futures::FutureExt;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

    fn md(name: &str, served: Option<&str>) -> Arc<DynamicObject> {
        let (group, version, kind) = MODEL_DEPLOYMENT;
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let mut object = DynamicObject::new(name, &resource).within("ml");
        object.data = serde_json::json!({"spec": {"model": {"servedName": served}}});
        Arc::new(object)
    }

    fn endpoint(ip: &str, ready: Option<bool>, terminating: Option<bool>) -> Endpoint {
        Endpoint {
            addresses: vec![ip.to_string()],
            conditions: Some(EndpointConditions {
                ready,
                terminating,
                serving: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn ready_endpoints_of_labelled_slices_map_to_served_names() {
        let mut slice = EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: Some(vec![
                endpoint("10.0.0.1", Some(true), None),
                endpoint("10.0.0.2", Some(false), None),
                endpoint("10.0.0.3", Some(true), Some(true)),
                endpoint("10.0.0.4", None, None),
            ]),
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                port: Some(8000),
                ..Default::default()
            }]),
            ..Default::default()
        };
        slice.metadata.namespace = Some("ml".into());
        slice.metadata.labels =
            Some([(LABEL_MODEL_DEPLOYMENT.to_string(), "llama".to_string())].into());
        let mut foreign = slice.clone();
        foreign.metadata.namespace = Some("other".into());
        let desired = desired_replicas(
            &[md("llama", Some("meta-llama/Llama-3-8B")), md("idle", None)],
            &[Arc::new(slice), Arc::new(foreign)],
            "http",
        );
        assert_eq!(
            desired["meta-llama/Llama-3-8B"],
            ["http://10.0.0.1:8000", "http://10.0.0.4:8000"]
        );
        assert_eq!(desired["idle"], Vec::<String>::new());
        assert_eq!(desired.len(), 2);
    }
}
