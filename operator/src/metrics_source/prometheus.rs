//! Prometheus-server mode: instead of scraping, ask a Prometheus server (`--prometheus-url`)
//! for the same windowed rates and p95s with PromQL over the gateway's series.

use serde::Deserialize;
use tokenscale_common::metrics::{LABEL_MODEL_NAME, gateway};

use super::model::MetricsView;
use super::scrape::{ScrapeError, fetch_text};
use crate::autoscaler::{
    BatchDemand, CapSource, ConcurrencyCap, Demand, DemandSource, WindowedRate, knee::AT_CAP_SHARE,
};

/// The PromQL queries for one model (pure, so they can be read and tested).
#[derive(Debug, Clone, PartialEq)]
pub struct Queries {
    /// Output tokens/s over the stable and panic windows.
    pub tokens: [String; 2],
    /// Finished requests/s over the stable and panic windows.
    pub requests: [String; 2],
    /// Arriving requests/s (admitted, queued, or refused for capacity) over the stable and
    /// panic windows.
    pub arrivals: [String; 2],
    /// p95 TTFT and TPOT over the stable window.
    pub p95: [String; 2],
    /// Requests queued and in flight now.
    pub queue: String,
    /// Requests in flight now.
    pub running: String,
    /// Batch output tokens/s over the stable and panic windows.
    pub batch_tokens: [String; 2],
    /// Output tokens/s that finish every running batch by its deadline (every gateway pod
    /// reports the same shared figure: the most of them, not their sum).
    pub batch_required: String,
    /// Output tokens batches have left (shared, like `batch_required`).
    pub batch_backlog: String,
    /// Batch lines in flight now, over the gateway pods.
    pub batch_in_flight: String,
    /// The gateway's per-replica in-flight caps (summed over gateway pods per replica): how
    /// many replicas have one, their mean cap, their mean requests in flight, how many run
    /// at it.
    pub cap: [String; 4],
}

/// Builds the queries for `served_name` with windows in whole seconds.
pub fn queries(served_name: &str, stable_s: u64, panic_s: u64) -> Queries {
    let sel = format!(
        "{{{LABEL_MODEL_NAME}=\"{}\"}}",
        served_name.replace('\\', "\\\\").replace('"', "\\\"")
    );
    let rate = |metric: &str, w: u64| format!("sum(rate({metric}{sel}[{w}s]))");
    let p95 = |metric: &str| {
        format!("histogram_quantile(0.95, sum by (le) (rate({metric}_bucket{sel}[{stable_s}s])))")
    };
    Queries {
        tokens: [
            rate(gateway::GENERATION_TOKENS_TOTAL, stable_s),
            rate(gateway::GENERATION_TOKENS_TOTAL, panic_s),
        ],
        requests: [
            rate(gateway::REQUESTS_TOTAL, stable_s),
            rate(gateway::REQUESTS_TOTAL, panic_s),
        ],
        arrivals: [
            rate(gateway::ARRIVALS_TOTAL, stable_s),
            rate(gateway::ARRIVALS_TOTAL, panic_s),
        ],
        p95: [
            p95(gateway::TIME_TO_FIRST_TOKEN_SECONDS),
            p95(gateway::TIME_PER_OUTPUT_TOKEN_SECONDS),
        ],
        queue: format!("sum({}{sel})", gateway::QUEUE_DEPTH),
        running: format!("sum({}{sel})", gateway::IN_FLIGHT_REQUESTS),
        batch_tokens: [
            rate(gateway::BATCH_GENERATION_TOKENS_TOTAL, stable_s),
            rate(gateway::BATCH_GENERATION_TOKENS_TOTAL, panic_s),
        ],
        batch_required: format!(
            "max({}{sel})",
            gateway::BATCH_REQUIRED_OUTPUT_TOKENS_PER_SECOND
        ),
        batch_backlog: format!("max({}{sel})", gateway::BATCH_BACKLOG_OUTPUT_TOKENS),
        batch_in_flight: format!("sum({}{sel})", gateway::BATCH_IN_FLIGHT_REQUESTS),
        cap: cap_queries(&sel),
    }
}

/// The queries of [`Queries::cap`] for the series selector `sel`.
fn cap_queries(sel: &str) -> [String; 4] {
    let limit = format!(
        "sum by (replica) ({}{sel})",
        gateway::REPLICA_CONCURRENCY_LIMIT
    );
    let in_flight = format!(
        "sum by (replica) ({}{sel})",
        gateway::REPLICA_IN_FLIGHT_REQUESTS
    );
    [
        format!("count({limit})"),
        format!("avg({limit})"),
        format!("avg({in_flight} and on (replica) {limit})"),
        format!("count({in_flight} >= {AT_CAP_SHARE} * {limit})"),
    ]
}

#[derive(Deserialize)]
struct Response {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    result: Vec<VectorSample>,
}

#[derive(Deserialize)]
struct VectorSample {
    value: (f64, String),
}

/// Why a Prometheus query failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The HTTP request failed.
    #[error(transparent)]
    Http(#[from] ScrapeError),
    /// The answer is not Prometheus' JSON.
    #[error("unexpected Prometheus response: {0}")]
    Format(String),
    /// Prometheus reported an error.
    #[error("Prometheus query failed: {0}")]
    Query(String),
}

/// The first sample of an instant-vector response; `Ok(None)` for an empty vector or NaN.
pub fn parse_scalar(body: &str) -> Result<Option<f64>, QueryError> {
    let response: Response =
        serde_json::from_str(body).map_err(|e| QueryError::Format(e.to_string()))?;
    if response.status != "success" {
        return Err(QueryError::Query(response.error.unwrap_or(response.status)));
    }
    let Some(sample) = response.data.and_then(|d| d.result.into_iter().next()) else {
        return Ok(None);
    };
    let value: f64 = sample
        .value
        .1
        .parse()
        .map_err(|_| QueryError::Format(sample.value.1.clone()))?;
    Ok(value.is_finite().then_some(value))
}

/// Percent-encodes a query parameter value (RFC 3986 unreserved characters stay).
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn scalar(base_url: &str, query: &str) -> Result<Option<f64>, QueryError> {
    let url = format!(
        "{}/api/v1/query?query={}",
        base_url.trim_end_matches('/'),
        encode(query)
    );
    parse_scalar(&fetch_text(&url).await?)
}

/// What Prometheus answered for one model: each query's value, `None` when it has no series.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Answers {
    /// Output tokens/s, stable and panic windows.
    pub tokens: [Option<f64>; 2],
    /// Finished requests/s, stable and panic windows.
    pub requests: [Option<f64>; 2],
    /// Arriving requests/s, stable and panic windows (`None`: the gateway counts no arrivals).
    pub arrivals: [Option<f64>; 2],
    /// Requests queued now.
    pub queue: Option<f64>,
    /// Requests in flight now.
    pub running: Option<f64>,
    /// Batch output tokens/s, stable and panic windows (`None`: no batch series).
    pub batch_tokens: [Option<f64>; 2],
    /// Batch output tokens/s required by the deadlines.
    pub batch_required: Option<f64>,
    /// Batch output tokens left.
    pub batch_backlog: Option<f64>,
    /// Batch lines in flight.
    pub batch_in_flight: Option<f64>,
    /// The answers to [`Queries::cap`].
    pub cap: [Option<f64>; 4],
}

/// Asks the server at `base_url` for one model's view.
pub async fn view(base_url: &str, q: &Queries) -> Result<MetricsView, QueryError> {
    let mut answers = Answers::default();
    for (slot, query) in [
        (&mut answers.tokens, &q.tokens),
        (&mut answers.requests, &q.requests),
        (&mut answers.arrivals, &q.arrivals),
        (&mut answers.batch_tokens, &q.batch_tokens),
    ] {
        for (value, query) in slot.iter_mut().zip(query) {
            *value = scalar(base_url, query).await?;
        }
    }
    for (value, query) in answers.cap.iter_mut().zip(&q.cap) {
        *value = scalar(base_url, query).await?;
    }
    answers.queue = scalar(base_url, &q.queue).await?;
    answers.running = scalar(base_url, &q.running).await?;
    answers.batch_required = scalar(base_url, &q.batch_required).await?;
    answers.batch_backlog = scalar(base_url, &q.batch_backlog).await?;
    answers.batch_in_flight = scalar(base_url, &q.batch_in_flight).await?;
    Ok(MetricsView {
        demand: demand(&answers),
        ttft_p95_s: scalar(base_url, &q.p95[0]).await?,
        tpot_p95_s: scalar(base_url, &q.p95[1]).await?,
        replica_loads: Vec::new(),
        revisions: Vec::new(),
        missing: Vec::new(),
        engine_starts: Default::default(),
        concurrency_cap: concurrency_cap(&answers),
    })
}

/// The gateway's caps in `answers`; `None` when no replica has one.
pub fn concurrency_cap(answers: &Answers) -> Option<ConcurrencyCap> {
    let [replicas, per_replica, in_use, at_cap] = answers.cap;
    let count = |v: Option<f64>| v.unwrap_or(0.0).max(0.0) as u32;
    let replicas = count(replicas);
    (replicas > 0).then(|| ConcurrencyCap {
        source: CapSource::Gateway,
        replicas,
        per_replica: per_replica.unwrap_or(0.0),
        in_use_per_replica: in_use.unwrap_or(0.0),
        at_cap: count(at_cap).min(replicas),
    })
}

/// The demand in `answers`; `None` when Prometheus has no token series for the model (it
/// has not seen it: missing, not zero).
pub fn demand(answers: &Answers) -> Option<Demand> {
    let windowed = |v: [Option<f64>; 2]| WindowedRate {
        stable: v[0].unwrap_or(0.0),
        panic: v[1].unwrap_or(0.0),
    };
    // Arrivals when the gateway counts them; else completions (capped by capacity).
    let (arrival_requests_per_s, source) = if answers.arrivals[0].is_some() {
        (windowed(answers.arrivals), DemandSource::GatewayArrivals)
    } else {
        (windowed(answers.requests), DemandSource::EngineCompletions)
    };
    answers.tokens[0]?;
    Some(Demand {
        output_tokens_per_s: windowed(answers.tokens),
        arrival_requests_per_s,
        mean_output_tokens_per_request: match (answers.tokens[0], answers.requests[0]) {
            (Some(t), Some(r)) if r > 0.0 => Some(t / r),
            _ => None,
        },
        // The gateway's queue and in-flight gauges are interactive requests: batch lines are
        // reported apart, below (zero from a gateway without the Batch API).
        queued_requests: answers.queue.unwrap_or(0.0).max(0.0) as u64,
        running_requests: answers.running.unwrap_or(0.0).max(0.0) as u64,
        completed_requests: 0,
        source,
        batch: BatchDemand {
            required_output_tokens_per_s: answers.batch_required.unwrap_or(0.0).max(0.0),
            backlog_output_tokens: answers.batch_backlog.unwrap_or(0.0).max(0.0),
            output_tokens_per_s: windowed(answers.batch_tokens),
            in_flight_requests: answers.batch_in_flight.unwrap_or(0.0).max(0.0) as u64,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateways_caps_are_asked_per_replica_and_read_back() {
        let q = queries("m", 60, 6);
        let limit = format!(
            "sum by (replica) ({}{{model_name=\"m\"}})",
            gateway::REPLICA_CONCURRENCY_LIMIT
        );
        assert_eq!(q.cap[0], format!("count({limit})"));
        assert!(
            q.cap[3].contains(&format!(">= 0.9 * {limit}")),
            "{}",
            q.cap[3]
        );
        let answers = Answers {
            cap: [Some(3.0), Some(8.0), Some(7.5), Some(2.0)],
            ..Answers::default()
        };
        let cap = concurrency_cap(&answers).unwrap_or_default();
        assert_eq!(
            (cap.source, cap.replicas, cap.per_replica, cap.at_cap),
            (CapSource::Gateway, 3, 8.0, 2)
        );
        assert_eq!(
            concurrency_cap(&Answers::default()),
            None,
            "no replica capped"
        );
    }

    #[test]
    fn queries_select_the_model_and_windows() {
        let q = queries("llama \"3\"", 60, 6);
        assert_eq!(
            q.tokens[1],
            format!(
                "sum(rate({}{{model_name=\"llama \\\"3\\\"\"}}[6s]))",
                gateway::GENERATION_TOKENS_TOTAL
            )
        );
        assert!(q.p95[0].starts_with("histogram_quantile(0.95, sum by (le) (rate("));
        assert!(q.p95[0].contains("_bucket{model_name="));
        assert!(q.p95[0].ends_with("[60s])))"));
    }

    #[test]
    fn arrivals_are_the_demand_when_the_gateway_counts_them() {
        let q = queries("m", 60, 6);
        assert_eq!(
            q.arrivals[0],
            format!(
                "sum(rate({}{{model_name=\"m\"}}[60s]))",
                gateway::ARRIVALS_TOTAL
            )
        );
        // Saturated: 2 finished/s while 5/s arrive.
        let mut answers = Answers {
            tokens: [Some(200.0), Some(210.0)],
            requests: [Some(2.0), Some(2.1)],
            arrivals: [Some(5.0), Some(6.0)],
            queue: Some(30.0),
            running: Some(8.0),
            ..Answers::default()
        };
        let demand = demand(&answers).expect("series present");
        assert_eq!(demand.source, DemandSource::GatewayArrivals);
        assert_eq!(
            demand.arrival_requests_per_s,
            WindowedRate {
                stable: 5.0,
                panic: 6.0
            }
        );
        assert_eq!(demand.mean_output_tokens_per_request, Some(100.0));
        assert_eq!((demand.queued_requests, demand.running_requests), (30, 8));
        // A gateway that counts no arrivals: completions stand in, and say so.
        answers.arrivals = [None, None];
        let demand = super::demand(&answers).expect("series present");
        assert_eq!(demand.source, DemandSource::EngineCompletions);
        assert_eq!(demand.arrival_requests_per_s.stable, 2.0);
        answers.tokens = [None, None];
        assert_eq!(
            super::demand(&answers),
            None,
            "no series: missing, not zero"
        );
    }

    #[test]
    fn batch_figures_are_read_and_default_to_zero() {
        let q = queries("m", 60, 6);
        let sel = "{model_name=\"m\"}";
        assert_eq!(
            q.batch_required,
            format!(
                "max({}{sel})",
                gateway::BATCH_REQUIRED_OUTPUT_TOKENS_PER_SECOND
            )
        );
        assert_eq!(
            q.batch_in_flight,
            format!("sum({}{sel})", gateway::BATCH_IN_FLIGHT_REQUESTS)
        );
        assert!(q.batch_tokens[0].contains(gateway::BATCH_GENERATION_TOKENS_TOTAL));
        let mut answers = Answers {
            tokens: [Some(200.0), Some(210.0)],
            requests: [Some(2.0), Some(2.1)],
            arrivals: [Some(2.0), Some(2.0)],
            batch_tokens: [Some(900.0), Some(1000.0)],
            batch_required: Some(1200.0),
            batch_backlog: Some(5e7),
            batch_in_flight: Some(40.0),
            ..Answers::default()
        };
        let batch = demand(&answers).expect("series present").batch;
        assert_eq!(
            batch,
            BatchDemand {
                required_output_tokens_per_s: 1200.0,
                backlog_output_tokens: 5e7,
                output_tokens_per_s: WindowedRate {
                    stable: 900.0,
                    panic: 1000.0
                },
                in_flight_requests: 40,
            }
        );
        // A gateway without the Batch API: no series, zero batch work.
        answers.batch_tokens = [None, None];
        (
            answers.batch_required,
            answers.batch_backlog,
            answers.batch_in_flight,
        ) = (None, None, None);
        assert_eq!(
            demand(&answers).expect("series present").batch,
            BatchDemand::default()
        );
    }

    #[test]
    fn parses_vectors_empty_results_and_errors() {
        let ok = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.1,"12.5"]}]}}"#;
        assert_eq!(parse_scalar(ok).ok().flatten(), Some(12.5));
        let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(parse_scalar(empty).ok().flatten(), None);
        let nan = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"NaN"]}]}}"#;
        assert_eq!(parse_scalar(nan).ok().flatten(), None);
        let err = r#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        assert!(matches!(parse_scalar(err), Err(QueryError::Query(m)) if m == "parse error"));
        assert!(matches!(parse_scalar("<html>"), Err(QueryError::Format(_))));
    }

    #[test]
    fn encodes_promql_for_a_url() {
        assert_eq!(
            encode("sum(a{b=\"c\"}[6s])"),
            "sum%28a%7Bb%3D%22c%22%7D%5B6s%5D%29"
        );
    }
}
