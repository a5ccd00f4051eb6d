//! Finding scrape targets: ready endpoints of a Service through its EndpointSlices.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, ListParams};

/// One HTTP endpoint to scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Pod name when known, else the address.
    pub name: String,
    /// `http://ip:port/metrics`.
    pub url: String,
}

/// Ready endpoints of `slices` on `port` (pure).
pub fn ready_endpoints(slices: &[EndpointSlice], port: i32) -> Vec<Endpoint> {
    let mut out: Vec<Endpoint> = slices
        .iter()
        .filter(|s| s.address_type == "IPv4" || s.address_type == "IPv6")
        .flat_map(|slice| {
            let ipv6 = slice.address_type == "IPv6";
            slice.endpoints.iter().flatten().filter_map(move |e| {
                let ready = e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                let address = e.addresses.first()?;
                let host = if ipv6 {
                    format!("[{address}]")
                } else {
                    address.clone()
                };
                let name = e
                    .target_ref
                    .as_ref()
                    .and_then(|r| r.name.clone())
                    .unwrap_or_else(|| address.clone());
                ready.then(|| Endpoint {
                    name,
                    url: format!("http://{host}:{port}/metrics"),
                })
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out.dedup_by(|a, b| a.name == b.name);
    out
}

/// How long a listing of a Service's endpoints is reused. The sampler scrapes every model
/// each second, and listing EndpointSlices that often (the gateway's and each model's) would
/// put a steady load of LIST calls on the API server; a pod that comes or goes is seen within
/// this long instead.
pub const ENDPOINTS_TTL: Duration = Duration::from_secs(5);

/// A Service's port: `(namespace, name, port)`.
type ServicePort = (String, String, i32);

/// The ready endpoints of each Service, as last listed, and when.
#[derive(Debug, Default)]
pub struct EndpointCache {
    entries: Mutex<HashMap<ServicePort, (Instant, Vec<Endpoint>)>>,
}

impl EndpointCache {
    /// The ready endpoints of `service` on `port`: the last listing if younger than
    /// [`ENDPOINTS_TTL`], else a new one (a failed listing is not kept).
    pub async fn endpoints(
        &self,
        client: Client,
        namespace: &str,
        service: &str,
        port: i32,
    ) -> Result<Vec<Endpoint>, kube::Error> {
        let key = (namespace.to_string(), service.to_string(), port);
        if let Some(endpoints) = self.fresh(&key, Instant::now()) {
            return Ok(endpoints);
        }
        let endpoints = service_endpoints(client, namespace, service, port).await?;
        self.store(key, Instant::now(), endpoints.clone());
        Ok(endpoints)
    }

    fn fresh(&self, key: &ServicePort, now: Instant) -> Option<Vec<Endpoint>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let (listed, endpoints) = entries.get(key)?;
        (now.saturating_duration_since(*listed) < ENDPOINTS_TTL).then(|| endpoints.clone())
    }

    fn store(&self, key: ServicePort, now: Instant, endpoints: Vec<Endpoint>) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.insert(key, (now, endpoints));
    }
}

/// Lists the EndpointSlices of Service `service` in `namespace` and returns its ready endpoints.
pub async fn service_endpoints(
    client: Client,
    namespace: &str,
    service: &str,
    port: i32,
) -> Result<Vec<Endpoint>, kube::Error> {
    let api: Api<EndpointSlice> = Api::namespaced(client, namespace);
    let params = ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
    let slices = api.list(&params).await?;
    Ok(ready_endpoints(&slices.items, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_reused_until_it_is_older_than_the_ttl() {
        let cache = EndpointCache::default();
        let key = ("ns".to_string(), "llama-engine".to_string(), 8000);
        let listed = vec![Endpoint {
            name: "llama-1".into(),
            url: "http://10.0.0.7:8000/metrics".into(),
        }];
        let t0 = Instant::now();
        assert_eq!(cache.fresh(&key, t0), None, "never listed");
        cache.store(key.clone(), t0, listed.clone());
        assert_eq!(cache.fresh(&key, t0 + Duration::from_secs(4)), Some(listed));
        assert_eq!(
            cache.fresh(&key, t0 + ENDPOINTS_TTL),
            None,
            "stale: list again"
        );
        let other = ("ns".to_string(), "qwen-engine".to_string(), 8000);
        assert_eq!(cache.fresh(&other, t0), None, "per Service");
    }

    #[test]
    fn keeps_ready_endpoints_named_by_pod() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "llama-engine-abc"},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.0.0.7"], "conditions": {"ready": true}, "targetRef": {"kind": "Pod", "name": "llama-1"}},
                {"addresses": ["10.0.0.8"], "conditions": {"ready": false}, "targetRef": {"kind": "Pod", "name": "llama-2"}},
                {"addresses": ["10.0.0.9"]}
            ]
        }))
        .expect("valid slice");
        let got = ready_endpoints(&[slice], 8000);
        assert_eq!(
            got,
            [
                Endpoint {
                    name: "10.0.0.9".into(),
                    url: "http://10.0.0.9:8000/metrics".into()
                },
                Endpoint {
                    name: "llama-1".into(),
                    url: "http://10.0.0.7:8000/metrics".into()
                },
            ]
        );
    }
}
