//! The registry handle: add, drain and remove replicas of a model at run time.

use std::sync::Arc;

use tokenscale_common::engines::{EngineKind, EnginePriority};

use crate::config::{Config, Discovery, ModelConfig};
use crate::health::{ProbeSettings, watch_replica};
use crate::proxy::UpstreamClient;
use crate::routing::adaptive::Slo;
use crate::routing::{ModelPool, ModelSettings, ReplicaAddr, Router};
use crate::vocab::ColdStart;

/// A replica URL that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("replica `{url}` of model `{model}`: {reason}")]
pub struct RegistryError {
    model: String,
    url: String,
    reason: String,
}

/// Handle to the gateway's replica set; cheap to clone, usable from any task.
#[derive(Clone, Debug)]
pub struct Registry {
    router: Arc<Router>,
    client: UpstreamClient,
    probes: ProbeSettings,
    /// Settings for models first seen at run time (not in the config).
    defaults: ModelSettings,
}

impl Registry {
    /// A registry routing through `router`, probing with `client`.
    pub fn new(router: Arc<Router>, client: UpstreamClient, config: &Config) -> Self {
        let probes = ProbeSettings {
            interval: std::time::Duration::from_millis(config.health.interval_ms),
            timeout: std::time::Duration::from_millis(config.health.timeout_ms),
            scrape_metrics: true,
        };
        let defaults = ModelSettings {
            replica_concurrency: 64,
            affinity_prefix_chars: 256,
            scrape_metrics: true,
            stale_after_ms: config.health.stale_after_ms,
            max_queue: config.queue.max_len,
        };
        Self {
            router,
            client,
            probes,
            defaults,
        }
    }

    /// Declares a configured model (with no replicas yet: requests for it queue).
    pub fn declare(&self, model: &ModelConfig) -> Arc<ModelPool> {
        let settings = ModelSettings {
            replica_concurrency: model.replica_concurrency,
            affinity_prefix_chars: model.affinity_prefix_chars,
            scrape_metrics: model.scrape_metrics,
            ..self.defaults.clone()
        };
        let pool = self.router.model_or_insert(&model.name.value, || settings);
        let priority = EnginePriority::of_args(model.engine, &model.engine_args);
        pool.set_engine(model.engine, priority);
        // A static model opts in with its `slo:`, whatever engine it names.
        pool.set_adaptive_slo(model.slo.map(Slo::of_config));
        if model.discovery == Discovery::Static {
            pool.set_adapters(model.adapters.iter().map(|a| a.value.clone()).collect());
        }
        pool
    }

    /// Declares a model with default settings (Kubernetes discovery, `tokenscale up`).
    pub fn declare_default(&self, model: &str) -> Arc<ModelPool> {
        self.router.model_or_insert(model, || self.defaults.clone())
    }

    /// Adds a replica; it receives work once its first `/health` probe succeeds.
    pub fn add(&self, model: &str, url: &str) -> Result<(), RegistryError> {
        let addr = ReplicaAddr::parse(url).map_err(|reason| RegistryError {
            model: model.to_string(),
            url: url.to_string(),
            reason,
        })?;
        let pool = self.declare_default(model);
        let (replica, fresh) = pool.add(addr);
        if fresh {
            let probes = ProbeSettings {
                scrape_metrics: pool.settings.scrape_metrics,
                ..self.probes.clone()
            };
            let task = watch_replica(
                Arc::downgrade(&replica),
                pool.clone(),
                self.client.clone(),
                probes,
            );
            tokio::spawn(task);
            tracing::info!(model, url, "replica added");
        }
        Ok(())
    }

    /// Records what is known of `model`'s cold start: while it has no ready replica, requests
    /// without their own deadline wait that long plus its TTFT SLO (`None`: the class default).
    pub fn set_cold_start(&self, model: &str, cold_start: Option<ColdStart>) {
        self.declare_default(model).set_cold_start(cold_start);
    }

    /// Serves `adapters` as the LoRA adapters of `model`'s replicas (Kubernetes discovery).
    pub fn set_adapters(&self, model: &str, adapters: Vec<String>) {
        self.declare_default(model).set_adapters(adapters);
    }

    /// Caps `model`'s replicas adaptively to hold `slo` (`None`: no cap); see
    /// [`crate::routing::adaptive`].
    pub fn set_adaptive_slo(&self, model: &str, slo: Option<Slo>) {
        self.declare_default(model).set_adaptive_slo(slo);
    }

    /// Records the engine `model`'s replicas run and how they take a request's class (the
    /// body's `priority` for vLLM and SGLang with their priority scheduling; batch-held slots
    /// counted for interactive work where the engine does not preempt batch work).
    pub fn set_engine(&self, model: &str, kind: EngineKind, priority: EnginePriority) {
        self.declare_default(model).set_engine(kind, priority);
    }

    /// Stops new work to a replica at once; its in-flight requests finish.
    pub fn drain(&self, model: &str, url: &str) -> bool {
        self.router
            .model(model)
            .is_some_and(|pool| pool.drain(url.trim_end_matches('/')))
    }

    /// Removes a replica (drained first; in-flight requests still finish).
    pub fn remove(&self, model: &str, url: &str) -> bool {
        self.router
            .model(model)
            .is_some_and(|pool| pool.remove(url.trim_end_matches('/')))
    }

    /// Makes `model`'s replicas exactly `urls`: adds new ones, removes missing ones.
    pub fn sync(&self, model: &str, urls: &[String]) {
        let pool = self.declare_default(model);
        let current: Vec<String> = pool
            .snapshot()
            .replicas
            .iter()
            .map(|r| r.addr.url.clone())
            .collect();
        for url in urls {
            if let Err(error) = self.add(model, url) {
                tracing::warn!(%error, "ignoring endpoint");
            }
        }
        for url in current.iter().filter(|u| !urls.contains(u)) {
            pool.remove(url);
        }
    }

    /// The models and pools.
    pub fn router(&self) -> &Arc<Router> {
        &self.router
    }
}
