//! Renders `/metrics` in the Prometheus text format (checked with `promtool check metrics`):
//! the gateway's families as tables, written by `tokenscale_common::exposition`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use tokenscale_common::exposition::{self, Family, Kind, Labels, Row, Series, Value, table};
use tokenscale_common::metrics::{LABEL_MODEL_NAME as MODEL, gateway as names};

use super::{Arrival, Metrics, ModelMetrics};
use crate::routing::{PoolSnapshot, Replica, ReplicaState, Router};

/// A mutex's value, whether or not a holder panicked (counters stay readable).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// `model_name="…"`.
pub(crate) fn model(name: &str) -> Labels<'static> {
    vec![(MODEL, name.to_string())]
}

/// A counter family from a map of label values to counts.
pub(crate) fn counted<'a, K>(
    name: &'a str,
    help: &'a str,
    map: &BTreeMap<K, u64>,
    labels: impl Fn(&K) -> Labels<'a>,
) -> Family<'a> {
    let series = map
        .iter()
        .map(|(k, &n)| Series::new(labels(k), n))
        .collect();
    Family::new(name, Kind::Counter, help, series)
}

impl Metrics {
    /// The whole exposition: the gateway's own series plus pool and replica gauges.
    pub fn render(&self, router: &Router) -> String {
        let mut models: Vec<_> = self
            .models
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(name, m)| (name.clone(), m.clone()))
            .collect();
        models.sort_by(|a, b| a.0.cmp(&b.0));
        let items: Vec<_> = models.iter().map(|(n, m)| (model(n), &**m)).collect();
        let mut families = vec![requests_by_status(&models)];
        families.extend(table(Kind::Histogram, &HISTOGRAMS, &items));
        families.push(arrivals(&models, router));
        families.extend(table(Kind::Counter, &COUNTERS, &items));
        families.push(usage_sources(&models));
        families.extend(self.refusals_and_failures());
        families.extend(pools(router));
        families.extend(self.routes.families());
        families.extend(self.tenants.families());
        exposition::render(&families)
    }

    /// 429s by tenant, model and limit; upstream failures; broken streams.
    fn refusals_and_failures(&self) -> [Family<'static>; 3] {
        [
            counted(
                names::RATE_LIMITED_TOTAL,
                "Requests refused with 429, by tenant, model and limit.",
                &lock(&self.rate_limited),
                |(tenant, model, limit)| {
                    let tenant = (names::LABEL_TENANT, tenant.clone());
                    let limit = (names::LABEL_LIMIT, limit.to_string());
                    vec![tenant, (MODEL, model.clone()), limit]
                },
            ),
            counted(
                names::UPSTREAM_ERRORS_TOTAL,
                "Upstream failures by model, replica and kind.",
                &lock(&self.upstream_errors),
                |(model, replica, kind)| {
                    let replica = (names::LABEL_REPLICA, replica.clone());
                    vec![
                        (MODEL, model.clone()),
                        replica,
                        (names::LABEL_KIND, kind.to_string()),
                    ]
                },
            ),
            counted(
                names::STREAM_INTERRUPTIONS_TOTAL,
                "Streams whose replica broke mid-answer, by continuation and result.",
                &lock(&self.stream_interruptions),
                |(model, continuation, result)| {
                    let continuation = (names::LABEL_CONTINUATION, continuation.to_string());
                    let result = (names::LABEL_RESULT, result.to_string());
                    vec![(MODEL, model.clone()), continuation, result]
                },
            ),
        ]
    }
}

/// The per-model latency histograms.
const HISTOGRAMS: [Row<'static, ModelMetrics, Value>; 4] = [
    (
        names::TIME_TO_FIRST_TOKEN_SECONDS,
        "Arrival at the gateway to the first generated text, reasoning or tool call sent to the client (not a chat stream's role chunk), streaming requests, queueing included.",
        |m| Value::Histogram(m.ttft.snapshot()),
    ),
    (
        names::TIME_PER_OUTPUT_TOKEN_SECONDS,
        "Time per output token after the first, as the client sees it (streaming requests).",
        |m| Value::Histogram(m.tpot.snapshot()),
    ),
    (
        names::E2E_REQUEST_LATENCY_SECONDS,
        "Arrival at the gateway to the last byte sent to the client.",
        |m| Value::Histogram(m.e2e.snapshot()),
    ),
    (
        names::QUEUE_TIME_SECONDS,
        "Time spent in the admission queue.",
        |m| Value::Histogram(m.queue_time.snapshot()),
    ),
];

/// The per-model token and retry counters.
const COUNTERS: [Row<'static, ModelMetrics, u64>; 6] = [
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

/// Finished requests by status.
fn requests_by_status(models: &[(String, Arc<ModelMetrics>)]) -> Family<'static> {
    let series = models.iter().flat_map(|(model, m)| {
        let statuses = lock(&m.requests_by_status).clone();
        statuses.into_iter().map(move |(status, n)| {
            let status = (names::LABEL_STATUS, status.to_string());
            Series::new(vec![(MODEL, model.clone()), status], n)
        })
    });
    Family::new(
        names::REQUESTS_TOTAL,
        Kind::Counter,
        "Finished requests by the status the client got (499: client went away).",
        series.collect(),
    )
}

/// Successful answers by where their token counts came from.
fn usage_sources(models: &[(String, Arc<ModelMetrics>)]) -> Family<'static> {
    let series = models.iter().flat_map(|(model, m)| {
        let sources = [
            ("engine", &m.usage_from_engine),
            ("gateway", &m.usage_from_gateway),
        ];
        sources.map(|(source, n)| {
            let source = (names::LABEL_SOURCE, source.to_string());
            Series::new(
                vec![(MODEL, model.clone()), source],
                n.load(Ordering::Relaxed),
            )
        })
    });
    Family::new(
        names::USAGE_SOURCE_TOTAL,
        Kind::Counter,
        "Successful answers by where their token counts came from: the engine's usage, or \
         the gateway's own count when the engine sent none.",
        series.collect(),
    )
}

/// Arrivals by outcome, for every model served (0 before its first request, so a reader
/// can tell a gateway that counts arrivals from one that does not).
fn arrivals(models: &[(String, Arc<ModelMetrics>)], router: &Router) -> Family<'static> {
    let mut counted: BTreeMap<String, Option<&ModelMetrics>> = models
        .iter()
        .map(|(name, m)| (name.clone(), Some(&**m)))
        .collect();
    for pool in router.pools() {
        counted.entry(pool.name.clone()).or_insert(None);
    }
    let series = counted.iter().flat_map(|(model, m)| {
        Arrival::ALL.map(|outcome| {
            let labels = vec![
                (MODEL, model.clone()),
                (names::LABEL_OUTCOME, outcome.as_str().into()),
            ];
            Series::new(labels, m.map_or(0, |m| m.arrivals(outcome)))
        })
    });
    Family::new(
        names::ARRIVALS_TOTAL,
        Kind::Counter,
        "Requests that arrived and passed the tenant's limits, by what admission did with them \
         on arrival (admitted, queued, refused: queue full). Offered load.",
        series.collect(),
    )
}

/// Queue, in-flight and replica gauges, read from the pools now.
fn pools(router: &Router) -> Vec<Family<'static>> {
    let pools: Vec<_> = router
        .pools()
        .into_iter()
        .map(|p| (p.name.clone(), p.snapshot()))
        .collect();
    let items: Vec<_> = pools.iter().map(|(n, s)| (model(n), s)).collect();
    let mut families = table(Kind::Gauge, &PER_MODEL, &items);
    let states = [
        ReplicaState::Starting,
        ReplicaState::Ready,
        ReplicaState::Ejected,
        ReplicaState::Draining,
    ];
    let by_state = pools.iter().flat_map(|(model, snapshot)| {
        states.map(|state| {
            let count = snapshot
                .replicas
                .iter()
                .filter(|r| r.state() == state)
                .count();
            let labels = vec![
                (MODEL, model.clone()),
                (names::LABEL_STATE, state.as_str().into()),
            ];
            Series::new(labels, count as u64)
        })
    });
    let help = "Replicas known to the gateway, by state.";
    families.push(Family::new(
        names::REPLICAS,
        Kind::Gauge,
        help,
        by_state.collect(),
    ));
    families.push(adapter_picks(router));
    for (name, help, read) in PER_REPLICA {
        let series = pools.iter().flat_map(|(model, snapshot)| {
            snapshot.replicas.iter().filter_map(move |replica| {
                let labels = vec![
                    (MODEL, model.clone()),
                    (names::LABEL_REPLICA, replica.addr.url.clone()),
                ];
                read(replica).map(|value| Series::new(labels, value))
            })
        });
        families.push(Family::new(name, Kind::Gauge, help, series.collect()));
    }
    families
}

/// Requests for a LoRA adapter by whether the replica picked held it (`affinity` `hit` or
/// `miss`), for the models that serve adapters. Kept here, beside the pools it reads.
const ADAPTER_REQUESTS_TOTAL: &str = "tokenscale_gateway_adapter_requests_total";

/// [`ADAPTER_REQUESTS_TOTAL`], read from the pools now.
fn adapter_picks(router: &Router) -> Family<'static> {
    let series = router
        .pools()
        .into_iter()
        .filter(|pool| !pool.adapters().is_empty())
        .flat_map(|pool| {
            let (hits, misses) = pool.adapter_picks();
            [("hit", hits), ("miss", misses)].map(|(affinity, n)| {
                let labels = vec![(MODEL, pool.name.clone()), ("affinity", affinity.into())];
                Series::new(labels, n)
            })
        });
    Family::new(
        ADAPTER_REQUESTS_TOTAL,
        Kind::Counter,
        "Requests for a LoRA adapter sent to a replica that held it (hit) or not (miss: it \
         loads the adapter first).",
        series.collect(),
    )
}

/// Gauges of each model's pool.
const PER_MODEL: [Row<'static, PoolSnapshot, u64>; 3] = [
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

/// Gauges of each replica (a replica not scraped yet has no scraped series).
const PER_REPLICA: [Row<'static, Replica, Option<f64>>; 5] = [
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
    (
        names::REPLICA_CONCURRENCY_LIMIT,
        "Adaptive cap on requests in flight on a replica through this gateway, from the TPOT and TTFT it measures (engines that do not hold the SLO themselves).",
        |r| r.cap().map(f64::from),
    ),
];
