//! Renders `/metrics` in the Prometheus text format (checked with `promtool check metrics`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokenscale_common::metrics::{LABEL_MODEL_NAME as MODEL, gateway as names};

use super::{Arrival, Metrics, ModelMetrics};
use crate::routing::{ReplicaState, Router};

/// A family: name, help, and how to read its value from `T`.
type Family<T, V> = (&'static str, &'static str, fn(&T) -> V);

/// Reads one histogram of a model's metrics.
type HistogramOf = for<'a> fn(&'a super::ModelMetrics) -> &'a super::Histogram;

/// A family header.
pub(crate) fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A label value with `\`, `"` and newlines escaped.
pub(crate) fn esc(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// The whole exposition: the gateway's own series plus pool and replica gauges.
    pub fn render(&self, router: &Router) -> String {
        let mut out = String::with_capacity(16 << 10);
        let mut models: Vec<_> = self
            .models
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(name, m)| (name.clone(), m.clone()))
            .collect();
        models.sort_by(|a, b| a.0.cmp(&b.0));

        family(
            &mut out,
            names::REQUESTS_TOTAL,
            "counter",
            "Finished requests by the status the client got (499: client went away).",
        );
        for (model, m) in &models {
            for (status, count) in m
                .requests_by_status
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
            {
                let _ = writeln!(
                    out,
                    "{}{{{MODEL}=\"{}\",{}=\"{status}\"}} {count}",
                    names::REQUESTS_TOTAL,
                    esc(model),
                    names::LABEL_STATUS
                );
            }
        }
        let histograms: [(&str, &str, HistogramOf); 4] = [
            (
                names::TIME_TO_FIRST_TOKEN_SECONDS,
                "Arrival at the gateway to the first generated text, reasoning or tool call sent to the client (not a chat stream's role chunk), streaming requests, queueing included.",
                |m| &m.ttft,
            ),
            (
                names::TIME_PER_OUTPUT_TOKEN_SECONDS,
                "Time per output token after the first, as the client sees it (streaming requests).",
                |m| &m.tpot,
            ),
            (
                names::E2E_REQUEST_LATENCY_SECONDS,
                "Arrival at the gateway to the last byte sent to the client.",
                |m| &m.e2e,
            ),
            (
                names::QUEUE_TIME_SECONDS,
                "Time spent in the admission queue.",
                |m| &m.queue_time,
            ),
        ];
        for (name, help, get) in histograms {
            family(&mut out, name, "histogram", help);
            for (model, m) in &models {
                get(m).render(&mut out, name, &format!("{MODEL}=\"{}\"", esc(model)));
            }
        }
        render_arrivals(&mut out, &models, router);
        let counters: [Family<super::ModelMetrics, u64>; 6] = [
            (
                names::ARRIVAL_PROMPT_TOKENS_TOTAL,
                "Estimated prompt tokens of the requests counted by the arrivals counter.",
                |m| m.arrival_prompt_tokens.load(Ordering::Relaxed),
            ),
            (
                names::ARRIVAL_OUTPUT_TOKENS_TOTAL,
                "Output tokens the arrived requests may generate (max_tokens or the default, times n).",
                |m| m.arrival_output_tokens.load(Ordering::Relaxed),
            ),
            (
                names::PROMPT_TOKENS_TOTAL,
                "Prompt tokens, from the engines' usage.",
                |m| m.prompt_tokens.load(Ordering::Relaxed),
            ),
            (
                names::CACHED_PROMPT_TOKENS_TOTAL,
                "Prompt tokens served from the engines' prefix cache.",
                |m| m.cached_tokens.load(Ordering::Relaxed),
            ),
            (
                names::GENERATION_TOKENS_TOTAL,
                "Completion tokens, from the engines' usage.",
                |m| m.generation_tokens.load(Ordering::Relaxed),
            ),
            (
                names::RETRIES_TOTAL,
                "Requests re-sent to another replica.",
                |m| m.retries.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, get) in counters {
            family(&mut out, name, "counter", help);
            for (model, m) in &models {
                let _ = writeln!(out, "{name}{{{MODEL}=\"{}\"}} {}", esc(model), get(m));
            }
        }
        family(
            &mut out,
            names::USAGE_SOURCE_TOTAL,
            "counter",
            "Successful answers by where their token counts came from: the engine's usage, or \
             the gateway's own count when the engine sent none.",
        );
        for (model, m) in &models {
            for (source, count) in [
                ("engine", &m.usage_from_engine),
                ("gateway", &m.usage_from_gateway),
            ] {
                let _ = writeln!(
                    out,
                    "{}{{{MODEL}=\"{}\",{}=\"{source}\"}} {}",
                    names::USAGE_SOURCE_TOTAL,
                    esc(model),
                    names::LABEL_SOURCE,
                    count.load(Ordering::Relaxed)
                );
            }
        }
        family(
            &mut out,
            names::RATE_LIMITED_TOTAL,
            "counter",
            "Requests refused with 429, by tenant, model and limit.",
        );
        for ((tenant, model, limit), count) in self
            .rate_limited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "{}{{{}=\"{}\",{MODEL}=\"{}\",{}=\"{limit}\"}} {count}",
                names::RATE_LIMITED_TOTAL,
                names::LABEL_TENANT,
                esc(tenant),
                esc(model),
                names::LABEL_LIMIT
            );
        }
        family(
            &mut out,
            names::UPSTREAM_ERRORS_TOTAL,
            "counter",
            "Upstream failures by model, replica and kind.",
        );
        for ((model, replica, kind), count) in self
            .upstream_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "{}{{{MODEL}=\"{}\",{}=\"{}\",{}=\"{kind}\"}} {count}",
                names::UPSTREAM_ERRORS_TOTAL,
                esc(model),
                names::LABEL_REPLICA,
                esc(replica),
                names::LABEL_KIND
            );
        }
        family(
            &mut out,
            names::STREAM_INTERRUPTIONS_TOTAL,
            "counter",
            "Streams whose replica broke mid-answer, by continuation and result.",
        );
        for ((model, continuation, result), count) in self
            .stream_interruptions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "{}{{{MODEL}=\"{}\",{}=\"{continuation}\",{}=\"{result}\"}} {count}",
                names::STREAM_INTERRUPTIONS_TOTAL,
                esc(model),
                names::LABEL_CONTINUATION,
                names::LABEL_RESULT
            );
        }
        render_pools(&mut out, router);
        self.routes.render(&mut out);
        self.tenants.render(&mut out);
        out
    }
}

/// Arrivals by outcome, for every model served (0 before its first request, so a reader
/// can tell a gateway that counts arrivals from one that does not).
fn render_arrivals(out: &mut String, models: &[(String, Arc<ModelMetrics>)], router: &Router) {
    family(
        out,
        names::ARRIVALS_TOTAL,
        "counter",
        "Requests that arrived and passed the tenant's limits, by what admission did with them \
         on arrival (admitted, queued, refused: queue full). Offered load.",
    );
    let mut counted: BTreeMap<String, Option<&ModelMetrics>> = models
        .iter()
        .map(|(name, m)| (name.clone(), Some(&**m)))
        .collect();
    for pool in router.pools() {
        counted.entry(pool.name.clone()).or_insert(None);
    }
    for (model, m) in &counted {
        for outcome in Arrival::ALL {
            let _ = writeln!(
                out,
                "{}{{{MODEL}=\"{}\",{}=\"{}\"}} {}",
                names::ARRIVALS_TOTAL,
                esc(model),
                names::LABEL_OUTCOME,
                outcome.as_str(),
                m.map_or(0, |m| m.arrivals(outcome))
            );
        }
    }
}

/// Queue, in-flight and replica gauges, read from the pools now.
fn render_pools(out: &mut String, router: &Router) {
    let pools: Vec<_> = router
        .pools()
        .into_iter()
        .map(|p| (p.name.clone(), p.snapshot()))
        .collect();
    let per_model: [Family<crate::routing::PoolSnapshot, u64>; 3] = [
        (
            names::QUEUE_DEPTH,
            "Requests waiting in the admission queue.",
            |s| s.queue_depth as u64,
        ),
        (
            names::QUEUED_TOKENS,
            "Estimated prompt plus max output tokens of the queued requests.",
            |s| s.queued_tokens,
        ),
        (
            names::IN_FLIGHT_REQUESTS,
            "Requests admitted and not finished.",
            |s| s.admitted as u64,
        ),
    ];
    for (name, help, get) in per_model {
        family(out, name, "gauge", help);
        for (model, snapshot) in &pools {
            let _ = writeln!(
                out,
                "{name}{{{MODEL}=\"{}\"}} {}",
                esc(model),
                get(snapshot)
            );
        }
    }
    family(
        out,
        names::REPLICAS,
        "gauge",
        "Replicas known to the gateway, by state.",
    );
    for (model, snapshot) in &pools {
        for state in [
            ReplicaState::Starting,
            ReplicaState::Ready,
            ReplicaState::Ejected,
            ReplicaState::Draining,
        ] {
            let count = snapshot
                .replicas
                .iter()
                .filter(|r| r.state() == state)
                .count();
            let _ = writeln!(
                out,
                "{}{{{MODEL}=\"{}\",{}=\"{}\"}} {count}",
                names::REPLICAS,
                esc(model),
                names::LABEL_STATE,
                state.as_str()
            );
        }
    }
    let per_replica: [Family<crate::routing::Replica, Option<f64>>; 4] = [
        (
            names::REPLICA_IN_FLIGHT_REQUESTS,
            "Requests in flight on a replica through this gateway.",
            |r| Some(r.in_flight_requests() as f64),
        ),
        (
            names::REPLICA_IN_FLIGHT_TOKENS,
            "Estimated prompt plus max output tokens in flight on a replica.",
            |r| Some(r.in_flight_tokens() as f64),
        ),
        (
            names::REPLICA_REQUESTS_WAITING,
            "Last scraped vllm:num_requests_waiting of a replica.",
            |r| r.scraped_load(u64::MAX).map(|l| l.0),
        ),
        (
            names::REPLICA_KV_CACHE_USAGE,
            "Last scraped vllm:kv_cache_usage_perc of a replica.",
            |r| r.scraped_load(u64::MAX).map(|l| l.1),
        ),
    ];
    for (name, help, get) in per_replica {
        family(out, name, "gauge", help);
        for (model, snapshot) in &pools {
            for replica in &snapshot.replicas {
                if let Some(value) = get(replica) {
                    let _ = writeln!(
                        out,
                        "{name}{{{MODEL}=\"{}\",{}=\"{}\"}} {value}",
                        esc(model),
                        names::LABEL_REPLICA,
                        esc(&replica.addr.url)
                    );
                }
            }
        }
    }
}
