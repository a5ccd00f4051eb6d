//! Kubernetes discovery: `ModelDeployment` objects give served model names, their engine
//! `EndpointSlice`s give ready replica addresses; both are watched through reflectors.
//!
//! The join: the operator labels every child of a `ModelDeployment` (so its Service, whose
//! labels the EndpointSlice controller copies onto the slices) with
//! `tokenscale.dev/model-deployment: <name>`. The served name is `spec.model.servedName`,
//! else the object's name. One deployment owns a served name: the oldest (the rule the
//! operator applies too, `tokenscale_common::served_name`); the endpoints of the others, and
//! of any deployment the operator marked `Conflict`, get no traffic. Endpoints not `ready` or
//! `terminating` get no new work at once.
//! `ModelRoute` objects give routes (see [`super::routes`]).
//! The CRDs are read as `DynamicObject`s, so this crate does not depend on the operator.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use tokenscale_common::engines::{EngineKind, EnginePriority};
use tokenscale_common::served_name::{self, Claim, ServedNames};

use super::adapters::adapters_of;
use super::cold_start::cold_start_of;
use super::engine::engine_of;
use super::routes::{MODEL_ROUTE, routes_of};
use super::slo::adaptive_slo_of;
use super::{DiscoveryHealth, Registry};
use crate::config::KubernetesConfig;
use crate::routing::adaptive::Slo;
use crate::vocab::ColdStart;

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
    let served: BTreeMap<(String, String), String> = owners(deployments)
        .into_iter()
        .map(|(key, (served_name, _))| (key, served_name))
        .collect();
    let mut desired: BTreeMap<String, Vec<String>> = served
        .values()
        .map(|served_name| (served_name.clone(), Vec::new()))
        .collect();
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

/// The deployment serving each served name: `(namespace, name)` → (served name, object),
/// the oldest claim of a name winning; deployments the operator refused are left out.
fn owners(
    deployments: &[Arc<DynamicObject>],
) -> BTreeMap<(String, String), (String, &Arc<DynamicObject>)> {
    // (namespace, name, served name, creation time, object) of each deployment.
    let claimed: Vec<_> = deployments
        .iter()
        .filter(|md| !refused_by_operator(md))
        .map(|md| {
            let name = md.name_any();
            let served_name = served_name_of(md);
            let created_s = md.creation_timestamp().map(|t| t.0.as_second());
            let namespace = md.namespace().unwrap_or_default();
            (namespace, name, served_name, created_s, md)
        })
        .collect();
    let claims: Vec<Claim<'_>> = claimed
        .iter()
        .map(|(namespace, name, served_name, created_s, _)| Claim {
            namespace,
            name,
            served_name,
            created_s: *created_s,
        })
        .collect();
    served_name::owners(&claims)
        .into_iter()
        .filter_map(|(served_name, (namespace, name))| {
            let (_, _, _, _, md) = claimed.iter().find(|c| c.0 == namespace && c.1 == name)?;
            let key = (namespace.to_string(), name.to_string());
            Some((key, (served_name.to_string(), *md)))
        })
        .collect()
}

/// The served name `md` claims: `spec.model.servedName`, else its name.
fn served_name_of(md: &DynamicObject) -> String {
    md.data["spec"]["model"]["servedName"]
        .as_str()
        .map_or_else(|| md.name_any(), str::to_string)
}

/// The deployments whose namespace may claim their served name (`kubernetes.served_names`);
/// the others get no traffic, even before the operator marks them refused.
pub fn allowed(
    deployments: Vec<Arc<DynamicObject>>,
    names: &ServedNames,
) -> Vec<Arc<DynamicObject>> {
    deployments
        .into_iter()
        .filter(|md| names.allows(&md.namespace().unwrap_or_default(), &served_name_of(md)))
        .collect()
}

/// Served model name → what its deployment says of its cold start (see [`cold_start_of`]);
/// a served name whose deployment does not say maps to `None`.
pub fn cold_starts(deployments: &[Arc<DynamicObject>]) -> BTreeMap<String, Option<ColdStart>> {
    owners(deployments)
        .into_values()
        .map(|(served_name, md)| (served_name, cold_start_of(md)))
        .collect()
}

/// Served model name → the SLO its replicas' adaptive caps hold (see [`adaptive_slo_of`]).
pub fn adaptive_slos(deployments: &[Arc<DynamicObject>]) -> BTreeMap<String, Option<Slo>> {
    owners(deployments)
        .into_values()
        .map(|(served_name, md)| (served_name, adaptive_slo_of(md)))
        .collect()
}

/// Served model name → the engine its deployment runs and how that takes a request's class
/// (see [`engine_of`]).
pub fn engines(
    deployments: &[Arc<DynamicObject>],
) -> BTreeMap<String, (EngineKind, EnginePriority)> {
    owners(deployments)
        .into_values()
        .map(|(served_name, md)| (served_name, engine_of(md)))
        .collect()
}

/// Served model name → the LoRA adapters its replicas serve (see [`adapters_of`]).
pub fn adapters(deployments: &[Arc<DynamicObject>]) -> BTreeMap<String, Vec<String>> {
    owners(deployments)
        .into_values()
        .map(|(served_name, md)| (served_name, adapters_of(md)))
        .collect()
}

/// Whether the operator refused `md` (a `Conflict` condition that is `True`).
fn refused_by_operator(md: &DynamicObject) -> bool {
    md.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Conflict" && c["status"] == "True")
}

/// Runs [`run`] until the process ends: a failure (no cluster credentials yet, the API
/// server down at start) is logged and retried with backoff (1 s doubling to 30 s), and
/// `health` says discovery is down meanwhile, so `/health` answers 503 instead of serving
/// with no replicas while looking healthy.
pub async fn run_forever(
    registry: Registry,
    config: KubernetesConfig,
    health: Arc<DiscoveryHealth>,
) {
    let mut backoff = Duration::from_secs(1);
    loop {
        let started = tokio::time::Instant::now();
        let error = match run(registry.clone(), config.clone(), &health).await {
            Ok(()) => "the watch streams ended".to_string(),
            Err(error) => error.to_string(),
        };
        health.set_failing();
        if started.elapsed() > Duration::from_secs(60) {
            backoff = Duration::from_secs(1);
        }
        tracing::error!(%error, retry_in_s = backoff.as_secs(), "kubernetes discovery stopped; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

/// Watches the cluster and keeps `registry` in step until the watch streams end.
pub async fn run(
    registry: Registry,
    config: KubernetesConfig,
    health: &DiscoveryHealth,
) -> Result<(), kube::Error> {
    let client = Client::try_default().await?;
    let (group, version, kind) = MODEL_DEPLOYMENT;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let (group, version, kind) = MODEL_ROUTE;
    let route_resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let namespaces = config.watched_namespaces();
    // One reflector pair per namespace (a store's initial listing replaces its whole
    // content, so namespaces cannot share one); `None` watches every namespace.
    let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|ns| Some(ns.as_str())).collect()
    };
    let mut stores = Vec::new();
    let mut route_stores = Vec::new();
    let mut streams = Vec::new();
    for scope in scopes {
        let (mds, slices, routes): (Api<DynamicObject>, Api<EndpointSlice>, Api<DynamicObject>) =
            match scope {
                Some(ns) => (
                    Api::namespaced_with(client.clone(), ns, &resource),
                    Api::namespaced(client.clone(), ns),
                    Api::namespaced_with(client.clone(), ns, &route_resource),
                ),
                None => (
                    Api::all_with(client.clone(), &resource),
                    Api::all(client.clone()),
                    Api::all_with(client.clone(), &route_resource),
                ),
            };
        if routes_served(&routes, scope).await {
            let route_writer =
                reflector::store::Writer::<DynamicObject>::new(route_resource.clone());
            route_stores.push(route_writer.as_reader());
            let route_events = reflector(
                route_writer,
                watcher(routes, watcher::Config::default()).default_backoff(),
            )
            .map(|_| ())
            .boxed();
            streams.push(route_events);
        }
        let md_writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
        let md_store = md_writer.as_reader();
        let (slice_store, slice_writer) = reflector::store::<EndpointSlice>();
        let md_events = reflector(
            md_writer,
            watcher(mds, watcher::Config::default()).default_backoff(),
        )
        // Every event, the initial listing's end included: an empty cluster is synced too.
        .map(|_| ())
        .boxed();
        let slice_config = watcher::Config::default().labels(LABEL_MODEL_DEPLOYMENT);
        let slice_events = reflector(
            slice_writer,
            watcher(slices, slice_config).default_backoff(),
        )
        .map(|_| ())
        .boxed();
        stores.push((md_store, slice_store));
        streams.extend([md_events, slice_events]);
    }
    let mut events = futures::stream::select_all(streams);
    let port_name = config
        .port_name
        .clone()
        .unwrap_or_else(|| "http".to_string());
    if config.served_names.is_open() {
        tracing::warn!(
            "no kubernetes.served_names list: any watched namespace may claim any served name, first come, first served"
        );
    }
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
        let deployments = allowed(deployments, &config.served_names);
        let desired = desired_replicas(&deployments, &slices, &port_name);
        for (model, urls) in &desired {
            registry.sync(model, urls);
        }
        for (model, cold_start) in cold_starts(&deployments) {
            registry.set_cold_start(&model, cold_start);
        }
        for (model, (kind, priority)) in engines(&deployments) {
            registry.set_engine(&model, kind, priority);
        }
        for (model, slo) in adaptive_slos(&deployments) {
            registry.set_adaptive_slo(&model, slo);
        }
        for (model, names) in adapters(&deployments) {
            registry.set_adapters(&model, names);
        }
        for gone in known.iter().filter(|m| !desired.contains_key(*m)) {
            registry.router().remove_model(gone);
        }
        known = desired.into_keys().collect();
        let routes: Vec<_> = route_stores
            .iter()
            .flat_map(|store| store.state())
            .collect();
        registry
            .router()
            .set_discovered_routes(routes_of(&routes, &config.served_names));
        let listed = stores.iter().all(|(mds, slices)| {
            mds.wait_until_ready().now_or_never().is_some()
                && slices.wait_until_ready().now_or_never().is_some()
        }) && route_stores
            .iter()
            .all(|routes| routes.wait_until_ready().now_or_never().is_some());
        if listed {
            health.set_synced();
        }
    }
    Ok(())
}

use futures::FutureExt;

/// Whether `ModelRoute`s can be watched in `scope`: not when the API server does not know the
/// kind (its CRD is not installed: an older chart) or the gateway may not list it (an older
/// role). Then routes come from the static configuration only, and discovery of models is
/// not held up waiting for a list that cannot succeed.
async fn routes_served(routes: &Api<DynamicObject>, scope: Option<&str>) -> bool {
    match routes
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Err(kube::Error::Api(status)) if [403, 404].contains(&status.code) => {
            tracing::warn!(
                namespace = scope.unwrap_or("*"),
                code = status.code,
                "ModelRoute objects cannot be listed (CRD not installed, or no permission): routes come from the static configuration only"
            );
            false
        }
        // Anything else (the API server briefly away) is the watcher's to retry.
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};

    fn md(name: &str, served: Option<&str>) -> Arc<DynamicObject> {
        md_in("ml", name, served, 100)
    }

    fn md_in(
        namespace: &str,
        name: &str,
        served: Option<&str>,
        created_s: i64,
    ) -> Arc<DynamicObject> {
        let (group, version, kind) = MODEL_DEPLOYMENT;
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let mut object = DynamicObject::new(name, &resource).within(namespace);
        object.data = serde_json::json!({"spec": {"model": {"servedName": served}}});
        let created = k8s_openapi::jiff::Timestamp::from_second(created_s).expect("valid time");
        object.metadata.creation_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(created),
        );
        Arc::new(object)
    }

    fn slice_of(namespace: &str, md: &str, ip: &str) -> Arc<EndpointSlice> {
        let mut slice = EndpointSlice {
            address_type: "IPv4".into(),
            endpoints: Some(vec![endpoint(ip, Some(true), None)]),
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                port: Some(8000),
                ..Default::default()
            }]),
            ..Default::default()
        };
        slice.metadata.namespace = Some(namespace.into());
        slice.metadata.labels = Some([(LABEL_MODEL_DEPLOYMENT.to_string(), md.to_string())].into());
        Arc::new(slice)
    }

    #[test]
    fn a_claim_the_served_names_list_does_not_give_gets_no_traffic() {
        let mut names = ServedNames::default();
        names.add_flag("team-a=llama-*").expect("parses");
        let listed = md_in("team-a", "llama", Some("llama-3"), 100);
        let squatter = md_in("team-b", "gpt", Some("gpt-4o"), 50);
        let unlisted_ns = md_in("team-b", "copy", Some("llama-3"), 10);
        let kept = allowed(vec![listed, squatter, unlisted_ns], &names);
        let kept: Vec<String> = kept.iter().map(|md| md.name_any()).collect();
        assert_eq!(kept, ["llama"]);
        let open = allowed(vec![md("a", None), md("b", None)], &ServedNames::default());
        assert_eq!(open.len(), 2, "no list: first come, first served");
    }

    #[test]
    fn a_served_name_reused_in_another_namespace_gets_no_traffic() {
        let owner = md_in("team-a", "llama", Some("llama-3"), 100);
        let copy = md_in("team-b", "mine", Some("llama-3"), 200);
        let slices = [
            slice_of("team-a", "llama", "10.0.0.1"),
            slice_of("team-b", "mine", "10.9.9.9"),
        ];
        let desired = desired_replicas(&[copy.clone(), owner.clone()], &slices, "http");
        assert_eq!(desired["llama-3"], ["http://10.0.0.1:8000"]);
        // A deployment the operator marked `Conflict` gets nothing, even alone (the operator
        // may see a deployment this gateway does not watch).
        let mut marked = (*copy).clone();
        marked.data["status"] =
            serde_json::json!({"conditions": [{"type": "Conflict", "status": "True"}]});
        let desired = desired_replicas(&[Arc::new(marked)], &slices, "http");
        assert!(desired.is_empty(), "{desired:?}");
    }

    #[test]
    fn each_served_name_takes_the_ttft_slo_of_the_deployment_serving_it() {
        let with_slo = |md: Arc<DynamicObject>, ttft: &str| {
            let mut md = (*md).clone();
            md.data["spec"]["slo"] = serde_json::json!({"ttftP95": ttft, "tpotP95": "50ms"});
            Arc::new(md)
        };
        let owner = with_slo(md_in("team-a", "llama", Some("llama-3"), 100), "2s");
        let copy = with_slo(md_in("team-b", "mine", Some("llama-3"), 200), "9s");
        let bare = md("idle", None);
        let cold = cold_starts(&[copy, bare, owner]);
        let slo = |name: &str| cold[name].map(|c| c.ttft_slo);
        assert_eq!(slo("llama-3"), Some(Duration::from_secs(2)));
        assert_eq!(slo("idle"), None);
        assert_eq!(cold.len(), 2);
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
