//! Which namespaces the operator acts in (`--watch-namespaces`): every list and watch goes
//! through namespaced `Api`s there, so namespaced Roles suffice; all namespaces when empty.

use kube::api::ListParams;
use kube::{Api, Client, Resource};

use crate::crd::ModelDeployment;
use crate::error::{Error, Result};

/// The namespaces the controllers watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchScope {
    /// Every namespace (needs cluster-wide list/watch).
    All,
    /// Only these namespaces, each listed and watched on its own.
    Namespaces(Vec<String>),
}

impl WatchScope {
    /// The scope of `--watch-namespaces a,b`: blanks dropped, duplicates removed, order
    /// kept; all namespaces when nothing is left.
    pub fn from_flag(namespaces: &[String]) -> Self {
        let mut kept: Vec<String> = Vec::new();
        for ns in namespaces
            .iter()
            .map(|n| n.trim())
            .filter(|n| !n.is_empty())
        {
            if !kept.iter().any(|k| k == ns) {
                kept.push(ns.to_string());
            }
        }
        if kept.is_empty() {
            Self::All
        } else {
            Self::Namespaces(kept)
        }
    }

    /// One controller's namespace per entry: `None` is all namespaces.
    pub fn controllers(&self) -> Vec<Option<String>> {
        match self {
            Self::All => vec![None],
            Self::Namespaces(list) => list.iter().cloned().map(Some).collect(),
        }
    }

    /// An `Api` of `K` per watched namespace (one cluster-wide `Api` for [`WatchScope::All`]).
    pub fn apis<K>(&self, client: &Client) -> Vec<(Option<String>, Api<K>)>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        self.controllers()
            .into_iter()
            .map(|ns| {
                let api = match &ns {
                    Some(ns) => Api::namespaced(client.clone(), ns),
                    None => Api::all(client.clone()),
                };
                (ns, api)
            })
            .collect()
    }
}

/// Lists ModelDeployments once in every watched namespace: fails early, naming the
/// namespace, when the CRD is missing or the operator's RBAC does not reach it.
pub async fn check_access(client: &Client, scope: &WatchScope) -> Result<()> {
    for (ns, api) in scope.apis::<ModelDeployment>(client) {
        let place = ns.map_or_else(
            || "all namespaces".to_string(),
            |n| format!("namespace {n}"),
        );
        api.list(&ListParams::default().limit(1))
            .await
            .map_err(|e| {
                Error::kube(
                    format!(
                        "listing ModelDeployments in {place} (is the CRD installed, and may the \
                         operator list them there?)"
                    ),
                    e,
                )
            })?;
    }
    Ok(())
}
