//! Which replica serves a request: model pools (with their admission permits, taken under
//! the pool's lock by the rules of `admission/`), the pure picker, and the layers using them.

pub mod adapters;
pub mod adaptive;
mod admit;
mod layer;
mod permit;
pub mod picker;
mod pool;
mod replica;
pub mod route;
mod section;

/// Kept here too: `ColdStart` is how discovery tells a pool about scale from zero.
pub use crate::vocab::{ColdStart, ReplicaAddr};
pub use admit::{Admission, AdmissionLayer};
pub use layer::{Pick, PickLayer, Routed, missing as layer_missing};
pub use permit::{AdmissionPermit, Entry, Queued, Waiter, arrive, dispatch};
pub use pool::{ModelPool, ModelSettings, PoolSnapshot};
pub use replica::{Replica, ReplicaLease, ReplicaState};
pub use route::{Fallbacks, Route, RouteSpec, RouteTarget};
pub use section::{validate_routes, validate_section};

use std::sync::{Arc, Mutex, RwLock};

use hashbrown::HashMap;

use crate::vocab::GatewayShare;

/// All models the gateway routes, by served name.
#[derive(Debug, Default)]
pub struct Router {
    models: RwLock<HashMap<String, Arc<ModelPool>>>,
    /// Routes by name: names that stand for several models.
    routes: RwLock<HashMap<String, Arc<Route>>>,
    /// The routes as declared: the static configuration's, and those discovered.
    declared_routes: Mutex<(Vec<RouteSpec>, Vec<RouteSpec>)>,
    /// This pod's share of every model's capacity (all of it with one gateway pod).
    share: Arc<GatewayShare>,
}

impl Router {
    /// A router whose pools take `share` of their replicas' concurrency.
    pub fn new(share: Arc<GatewayShare>) -> Self {
        Self {
            models: RwLock::default(),
            routes: RwLock::default(),
            declared_routes: Mutex::default(),
            share,
        }
    }

    /// This pod's share of what gateway pods split.
    pub fn share(&self) -> &Arc<GatewayShare> {
        &self.share
    }

    /// Gateway pods came or went: every pool re-admits with its new capacity.
    pub fn shares_changed(&self) {
        for pool in self.pools() {
            pool.capacity_changed();
        }
    }

    /// The pool of `model`, if the gateway serves it.
    pub fn model(&self, model: &str) -> Option<Arc<ModelPool>> {
        self.models
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(model)
            .cloned()
    }

    /// The pool whose replicas serve the LoRA adapter `name` beside their model (the first
    /// by model name, should two declare it: configuration and discovery refuse that).
    pub fn adapter_parent(&self, name: &str) -> Option<Arc<ModelPool>> {
        self.pools().into_iter().find(|p| p.serves_adapter(name))
    }

    /// The pool of `model`, created with `settings` if new.
    pub fn model_or_insert(
        &self,
        model: &str,
        settings: impl FnOnce() -> ModelSettings,
    ) -> Arc<ModelPool> {
        if let Some(pool) = self.model(model) {
            return pool;
        }
        let mut models = self.models.write().unwrap_or_else(|p| p.into_inner());
        models
            .entry(model.to_string())
            .or_insert_with(|| {
                let pool = ModelPool::new(model.to_string(), settings());
                Arc::new(pool.with_share(self.share.clone()))
            })
            .clone()
    }

    /// Stops serving `model` (its replicas drain); returns whether it existed.
    pub fn remove_model(&self, model: &str) -> bool {
        let removed = self
            .models
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(model);
        if let Some(pool) = &removed {
            for replica in pool.snapshot().replicas {
                replica.drain();
            }
        }
        removed.is_some()
    }

    /// Serves `specs` as the routes of the static configuration (checked at load, see
    /// [`route::check_routes`]), beside those discovered.
    pub fn set_routes(&self, specs: Vec<RouteSpec>) {
        self.declare_routes(|declared| declared.0 = specs);
    }

    /// Serves `specs` as the routes discovered in the cluster, beside the static ones. One
    /// that cannot work with the rest (a name already served, a loop) is left out and
    /// logged; a target not served yet is skipped at request time.
    pub fn set_discovered_routes(&self, specs: Vec<RouteSpec>) {
        self.declare_routes(|declared| declared.1 = specs);
    }

    fn declare_routes(&self, change: impl FnOnce(&mut (Vec<RouteSpec>, Vec<RouteSpec>))) {
        let mut declared = self
            .declared_routes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        change(&mut declared);
        self.install_routes(&declared.0, &declared.1);
    }

    /// Makes `fixed` and what of `discovered` fits with them the routes served; a route
    /// declared as before keeps its place in the weighted spread.
    fn install_routes(&self, fixed: &[RouteSpec], discovered: &[RouteSpec]) {
        let mut specs: Vec<RouteSpec> = fixed.to_vec();
        for spec in discovered {
            if specs.iter().any(|s| s.name == spec.name) {
                tracing::warn!(route = %spec.name, "a route of this name is already served; the ModelRoute is ignored");
                continue;
            }
            specs.push(spec.clone());
            let known = route::KnownModels {
                is_model: &|name: &str| self.model(name).is_some(),
                complete: false,
            };
            if let Err(error) = route::check_routes(&specs, known) {
                tracing::warn!(%error, "the ModelRoute is ignored");
                specs.pop();
            }
        }
        let mut routes = self.routes.write().unwrap_or_else(|p| p.into_inner());
        let kept: HashMap<String, Arc<Route>> = specs
            .into_iter()
            .map(|spec| {
                let route = match routes.get(&spec.name) {
                    Some(old) if *old.spec() == spec => old.clone(),
                    _ => Arc::new(Route::new(spec)),
                };
                (route.name().to_string(), route)
            })
            .collect();
        *routes = kept;
    }

    /// The models a request for `name` tries, in order, when `name` is a route.
    pub fn route_order(&self, name: &str) -> Option<Vec<String>> {
        let routes = self.routes.read().unwrap_or_else(|p| p.into_inner());
        routes
            .contains_key(name)
            .then(|| route::expand(name, &|n: &str| routes.get(n).map(|r| &**r)))
    }

    /// Every route's name, sorted.
    pub fn route_names(&self) -> Vec<String> {
        let routes = self.routes.read().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<String> = routes.keys().cloned().collect();
        names.sort();
        names
    }

    /// Every pool, sorted by model name.
    pub fn pools(&self) -> Vec<Arc<ModelPool>> {
        let mut pools: Vec<_> = self
            .models
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        pools.sort_by(|a, b| a.name.cmp(&b.name));
        pools
    }
}
