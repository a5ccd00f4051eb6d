//! Usage per tenant and model (requests, prompt, cached and completion tokens), so a tenant
//! can be shown what it used beside which of its limits refused it (`rate_limited_total`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use hashbrown::HashMap;
use tokenscale_common::metrics::{LABEL_MODEL_NAME as MODEL, gateway as names};

use super::render::{esc, family};
use crate::request::Usage;

/// One tenant's counters on one model.
#[derive(Debug, Default)]
pub struct TenantModelUsage {
    requests: AtomicU64,
    prompt_tokens: AtomicU64,
    cached_tokens: AtomicU64,
    generation_tokens: AtomicU64,
}

impl TenantModelUsage {
    /// Counts a finished request and the engine's usage, when it reported one.
    pub fn finished(&self, usage: Option<Usage>) {
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
}

/// One tenant's counters, by model.
type ByModel = HashMap<String, Arc<TenantModelUsage>>;

/// Every tenant's usage by model.
#[derive(Debug, Default)]
pub struct TenantUsage {
    by_tenant: RwLock<HashMap<Arc<str>, ByModel>>,
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
            .or_default()
            .clone()
    }

    /// Appends the four families.
    pub fn render(&self, out: &mut String) {
        let all = self.by_tenant.read().unwrap_or_else(|p| p.into_inner());
        let mut rows: Vec<(&Arc<str>, &String, &Arc<TenantModelUsage>)> = all
            .iter()
            .flat_map(|(tenant, models)| models.iter().map(move |(m, u)| (tenant, m, u)))
            .collect();
        rows.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        type Read = fn(&TenantModelUsage) -> &AtomicU64;
        let families: [(&str, &str, Read); 4] = [
            (
                names::TENANT_REQUESTS_TOTAL,
                "Requests of a tenant on a model that passed its limits and finished, any status.",
                |u| &u.requests,
            ),
            (
                names::TENANT_PROMPT_TOKENS_TOTAL,
                "Prompt tokens of a tenant on a model, from the engines' usage.",
                |u| &u.prompt_tokens,
            ),
            (
                names::TENANT_CACHED_PROMPT_TOKENS_TOTAL,
                "Prompt tokens of a tenant served from the prefix cache (not charged to its input limit).",
                |u| &u.cached_tokens,
            ),
            (
                names::TENANT_GENERATION_TOKENS_TOTAL,
                "Completion tokens of a tenant on a model, from the engines' usage.",
                |u| &u.generation_tokens,
            ),
        ];
        for (name, help, read) in families {
            family(out, name, "counter", help);
            for (tenant, model, usage) in &rows {
                let _ = writeln!(
                    out,
                    "{name}{{{}=\"{}\",{MODEL}=\"{}\"}} {}",
                    names::LABEL_TENANT,
                    esc(tenant),
                    esc(model),
                    read(usage).load(Ordering::Relaxed)
                );
            }
        }
    }
}

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
        let mut out = String::new();
        usage.render(&mut out);
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
