//! The gateway's metrics (names in `tokenscale_common::metrics::gateway`) and `/metrics`.

mod bounds;
#[cfg(test)]
mod golden_tests;
mod layer;
pub(crate) mod render;
mod routes;
mod tenants;

pub use bounds::render_bounds;
pub use layer::{MetricsLayer, Observe};
pub use routes::RouteCounts;
pub use tenants::{TenantModelUsage, TenantUsage};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use hashbrown::HashMap;
pub use tokenscale_common::exposition::Histogram;
use tokenscale_common::exposition::LeFormat;
use tokenscale_common::metrics::gateway as names;

use crate::vocab::Usage;

/// Per-model request metrics.
#[derive(Debug)]
pub struct ModelMetrics {
    requests_by_status: Mutex<BTreeMap<u16, u64>>,
    /// Arrival to first byte to the client (streaming requests).
    pub ttft: Histogram,
    /// Time per output token after the first (streaming requests).
    pub tpot: Histogram,
    /// Arrival to last byte.
    pub e2e: Histogram,
    /// Time in the admission queue.
    pub queue_time: Histogram,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    retries: AtomicU64,
    /// Answers counted from the engine's usage, and from the gateway's own count.
    usage_from_engine: AtomicU64,
    usage_from_gateway: AtomicU64,
    /// Arrivals by outcome, indexed by `Arrival as usize`.
    arrivals: [AtomicU64; 3],
    arrival_prompt_tokens: AtomicU64,
    arrival_output_tokens: AtomicU64,
}

/// What admission did with a request when it arrived (the `outcome` label of
/// `tokenscale_gateway_arrivals_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// A slot was free and nobody waited: admitted at once.
    Admitted = 0,
    /// It waited in the admission queue (replicas full, or none ready).
    Queued = 1,
    /// The queue was full: 503 at once.
    Refused = 2,
}

impl Arrival {
    /// Every outcome, in label order.
    pub const ALL: [Arrival; 3] = [Arrival::Admitted, Arrival::Queued, Arrival::Refused];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Arrival::Admitted => "admitted",
            Arrival::Queued => "queued",
            Arrival::Refused => "refused",
        }
    }
}

impl Default for ModelMetrics {
    fn default() -> Self {
        Self {
            requests_by_status: Mutex::default(),
            ttft: Histogram::new(names::TTFT_BUCKETS_S, LeFormat::Shortest),
            tpot: Histogram::new(names::TPOT_BUCKETS_S, LeFormat::Shortest),
            e2e: Histogram::new(names::E2E_BUCKETS_S, LeFormat::Shortest),
            queue_time: Histogram::new(names::E2E_BUCKETS_S, LeFormat::Shortest),
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            usage_from_engine: AtomicU64::new(0),
            usage_from_gateway: AtomicU64::new(0),
            arrivals: Default::default(),
            arrival_prompt_tokens: AtomicU64::new(0),
            arrival_output_tokens: AtomicU64::new(0),
        }
    }
}

impl ModelMetrics {
    /// Counts a finished request by the status the client got (499: client went away).
    pub fn finished(&self, status: u16) {
        *self
            .requests_by_status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(status)
            .or_default() += 1;
    }

    /// Adds the engine's usage to the token counters.
    pub fn tokens(&self, usage: Usage) {
        self.prompt_tokens
            .fetch_add(usage.prompt_tokens, Ordering::Relaxed);
        self.cached_tokens
            .fetch_add(usage.cached_tokens, Ordering::Relaxed);
        self.generation_tokens
            .fetch_add(usage.completion_tokens, Ordering::Relaxed);
    }

    /// Counts where an answer's usage came from (`estimated`: the gateway's own count).
    pub fn usage_source(&self, estimated: bool) {
        let counter = if estimated {
            &self.usage_from_gateway
        } else {
            &self.usage_from_engine
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request that arrived and passed its tenant's limits: demand as offered, with
    /// its estimated prompt tokens and the output tokens it may generate.
    pub fn arrived(&self, outcome: Arrival, prompt_tokens: u64, output_tokens: u64) {
        self.arrivals[outcome as usize].fetch_add(1, Ordering::Relaxed);
        self.arrival_prompt_tokens
            .fetch_add(prompt_tokens, Ordering::Relaxed);
        self.arrival_output_tokens
            .fetch_add(output_tokens, Ordering::Relaxed);
    }

    /// Arrivals counted with `outcome` so far.
    pub fn arrivals(&self, outcome: Arrival) -> u64 {
        self.arrivals[outcome as usize].load(Ordering::Relaxed)
    }

    /// Counts a retry on another replica.
    pub fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests finished with `status` so far.
    pub fn requests_with_status(&self, status: u16) -> u64 {
        self.requests_by_status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&status)
            .copied()
            .unwrap_or(0)
    }
}

/// All metrics the gateway keeps itself (replica and queue gauges are read from the pools
/// when rendering).
#[derive(Debug, Default)]
pub struct Metrics {
    models: RwLock<HashMap<String, Arc<ModelMetrics>>>,
    rate_limited: Mutex<BTreeMap<(String, String, &'static str), u64>>,
    upstream_errors: Mutex<BTreeMap<(String, String, &'static str), u64>>,
    stream_interruptions: Mutex<BTreeMap<(String, &'static str, &'static str), u64>>,
    /// Usage per tenant and model.
    pub tenants: TenantUsage,
    /// Routes' answers and fallbacks.
    pub routes: RouteCounts,
}

impl Metrics {
    /// The metrics of `model`, created on first use.
    pub fn model(&self, model: &str) -> Arc<ModelMetrics> {
        if let Some(found) = self
            .models
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(model)
        {
            return found.clone();
        }
        let mut models = self.models.write().unwrap_or_else(|p| p.into_inner());
        models.entry(model.to_string()).or_default().clone()
    }

    /// Counts a 429 by tenant, model and limit (a refusal's label: a kind, `total_` before a
    /// tenant-wide one, or `in_flight`). Refusals on a model also go into the tenant's usage
    /// windows by kind; those before the model is known (tenant-wide requests, in-flight caps)
    /// are counted here only.
    pub fn rate_limited(&self, tenant: &Arc<str>, model: &str, limit: &'static str) {
        {
            let mut map = self.rate_limited.lock().unwrap_or_else(|p| p.into_inner());
            *map.entry((tenant.to_string(), model.to_string(), limit))
                .or_default() += 1;
        }
        let kind = crate::usage::KINDS
            .into_iter()
            .find(|k| limit.strip_prefix("total_").unwrap_or(limit) == k.as_str());
        if let Some(kind) = kind.filter(|_| !model.is_empty()) {
            self.tenants.of(tenant, model).refused(kind);
        }
    }

    /// Counts a stream whose replica broke mid-answer, by how it was continued (`exact`,
    /// `textual`, `restart`, or `none`) and how that went (`resumed`, `ended`: the answer
    /// was complete, `failed`: the client got an error event).
    pub fn stream_interrupted(
        &self,
        model: &str,
        continuation: &'static str,
        result: &'static str,
    ) {
        let mut map = self
            .stream_interruptions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *map.entry((model.to_string(), continuation, result))
            .or_default() += 1;
    }

    /// Counts a route's request answered by `model`.
    pub fn route_served(&self, route: &str, model: &str) {
        self.routes.served(route, model);
    }

    /// Counts a route's request moving from `from` to `to` for `reason`.
    pub fn route_fallback(&self, route: &str, from: &str, to: &str, reason: &'static str) {
        self.routes.fallback(route, from, to, reason);
    }

    /// Counts an upstream failure by model, replica and kind.
    pub fn upstream_error(&self, model: &str, replica: &str, kind: &'static str) {
        let mut map = self
            .upstream_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *map.entry((model.to_string(), replica.to_string(), kind))
            .or_default() += 1;
    }
}
