//! Usage per tenant and model (requests, prompt, cached and completion tokens), so a tenant
//! can be shown what it used beside which of its limits refused it (`rate_limited_total`):
//! lifetime counters for `/metrics`, and the same counts in rolling windows for `/v1/usage`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use hashbrown::HashMap;
use tokenscale_common::exposition::{Family, Kind, Row, table};
use tokenscale_common::metrics::{LABEL_MODEL_NAME as MODEL, gateway as names};

use crate::usage::{Counts, UsageWindows, WindowedRow};
use crate::vocab::{LimitKind, Usage};

/// One tenant's counters on one model.
#[derive(Debug)]
pub struct TenantModelUsage {
    requests: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    generation_tokens: AtomicU64,
    /// The same counts and the 429s, over the last minute and hour.
    windows: Mutex<UsageWindows>,
    /// Zero of the windows' clock (shared by every tenant, so one `now` reads them all).
    epoch: Instant,
}

impl TenantModelUsage {
    fn new(epoch: Instant) -> Self {
        Self {
            requests: AtomicU64::new(0),
            prompt_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
            generation_tokens: AtomicU64::new(0),
            windows: Mutex::default(),
            epoch,
        }
    }

    /// Counts a finished request and the engine's usage, when it reported one.
    pub fn finished(&self, usage: Option<Usage>) {
        self.window(&Counts::finished(usage));
        self.requests.fetch_add(1, Ordering::Relaxed);
        if let Some(usage) = usage {
            self.prompt_tokens
                .fetch_add(usage.prompt_tokens, Ordering::Relaxed);
            self.cached_tokens
                .fetch_add(usage.cached_tokens, Ordering::Relaxed);
            self.generation_tokens
                .fetch_add(usage.completion_tokens, Ordering::Relaxed);
        }
    }

    /// Counts a 429 by `kind` (the lifetime count is `Metrics::rate_limited`'s).
    pub fn refused(&self, kind: LimitKind) {
        self.window(&Counts::refused(kind));
    }

    fn window(&self, counts: &Counts) {
        let now_s = self.epoch.elapsed().as_secs();
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        windows.add(now_s, counts);
    }

    /// (last minute, last hour) as of `now_s` on the windows' clock.
    fn windowed(&self, now_s: u64) -> (Counts, Counts) {
        let windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        (windows.last_minute(now_s), windows.last_hour(now_s))
    }
}

/// One tenant's counters, by model.
type ByModel = HashMap<String, Arc<TenantModelUsage>>;

/// Every tenant's usage by model.
#[derive(Debug)]
pub struct TenantUsage {
    by_tenant: RwLock<HashMap<Arc<str>, ByModel>>,
    epoch: Instant,
}

impl Default for TenantUsage {
    fn default() -> Self {
        Self {
            by_tenant: RwLock::default(),
            epoch: Instant::now(),
        }
    }
}

impl TenantUsage {
    /// The counters of `tenant` on `model`, created on first use.
    pub fn of(&self, tenant: &Arc<str>, model: &str) -> Arc<TenantModelUsage> {
        if let Some(found) = self
            .by_tenant
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(tenant)
            .and_then(|models| models.get(model))
        {
            return found.clone();
        }
        let mut all = self.by_tenant.write().unwrap_or_else(|p| p.into_inner());
        all.entry(tenant.clone())
            .or_default()
            .entry(model.to_string())
            .or_insert_with(|| Arc::new(TenantModelUsage::new(self.epoch)))
            .clone()
    }

    /// Each tenant's windows on each model it used now, `only` that tenant's when given.
    pub fn windowed(&self, only: Option<&str>) -> Vec<WindowedRow> {
        let now_s = self.epoch.elapsed().as_secs();
        let all = self.by_tenant.read().unwrap_or_else(|p| p.into_inner());
        let tenants = all.iter().filter(|(t, _)| only.is_none_or(|o| o == &***t));
        let mut rows = Vec::new();
        for (tenant, models) in tenants {
            for (model, usage) in models {
                let (minute, hour) = usage.windowed(now_s);
                rows.push((tenant.to_string(), model.clone(), minute, hour));
            }
        }
        rows
    }

    /// The four families, a series per tenant and model.
    pub fn families(&self) -> Vec<Family<'static>> {
        let all = self.by_tenant.read().unwrap_or_else(|p| p.into_inner());
        let mut rows: Vec<(&Arc<str>, &String, &Arc<TenantModelUsage>)> = all
            .iter()
            .flat_map(|(tenant, models)| models.iter().map(move |(m, u)| (tenant, m, u)))
            .collect();
        rows.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        let items: Vec<_> = rows
            .iter()
            .map(|(tenant, model, usage)| {
                let labels = vec![
                    (names::LABEL_TENANT, tenant.to_string()),
                    (MODEL, model.to_string()),
                ];
                (labels, &***usage)
            })
            .collect();
        table(Kind::Counter, &FAMILIES, &items)
    }
}

/// The tenant families: name, help, counter.
const FAMILIES: [Row<'static, TenantModelUsage, u64>; 4] = [
    (
        names::TENANT_REQUESTS_TOTAL,
        "Requests of a tenant on a model that passed its limits and finished, any status.",
        |u| u.requests.load(Ordering::Relaxed),
    ),
    (
        names::TENANT_PROMPT_TOKENS_TOTAL,
        "Prompt tokens of a tenant on a model, from the engines' usage.",
        |u| u.prompt_tokens.load(Ordering::Relaxed),
    ),
    (
        names::TENANT_CACHED_PROMPT_TOKENS_TOTAL,
        "Prompt tokens of a tenant served from the prefix cache (not charged to its input limit).",
        |u| u.cached_tokens.load(Ordering::Relaxed),
    ),
    (
        names::TENANT_GENERATION_TOKENS_TOTAL,
        "Completion tokens of a tenant on a model, from the engines' usage.",
        |u| u.generation_tokens.load(Ordering::Relaxed),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_counted_per_tenant_and_model() {
        let usage = TenantUsage::default();
        let a: Arc<str> = Arc::from("a");
        let counted = Usage {
            prompt_tokens: 10,
            completion_tokens: 4,
            cached_tokens: 6,
        };
        usage.of(&a, "m").finished(Some(counted));
        usage.of(&a, "m").finished(None);
        usage.of(&a, "n").finished(Some(counted));
        let out = tokenscale_common::exposition::render(&usage.families());
        assert!(
            out.contains(
                "tokenscale_gateway_tenant_requests_total{tenant=\"a\",model_name=\"m\"} 2"
            ),
            "{out}"
        );
        assert!(out.contains(
            "tokenscale_gateway_tenant_cached_prompt_tokens_total{tenant=\"a\",model_name=\"n\"} 6"
        ));
    }
}
