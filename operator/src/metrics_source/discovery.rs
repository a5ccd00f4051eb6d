//! Finding scrape targets: ready endpoints of a Service through its EndpointSlices.

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
