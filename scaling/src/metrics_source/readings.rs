//! From one target's samples to the numbers the autoscaler needs: counters and buckets to
//! accumulate (under logical keys, so gateway and engine series never mix) and gauges.

use std::collections::BTreeMap;

use tokenscale_common::engines::{self, Absent, EngineKind, SampleRef};
use tokenscale_common::metrics::{LABEL_MODEL_NAME, engine, gateway};

use super::caps;
use super::text_format::Sample;
use super::window::{SeriesKey, bucket_key};
use crate::autoscaler::ConcurrencyCap;

/// Logical series names. Gateway ones measure latency as users feel it, queue included.
pub mod keys {
    /// Output tokens (gateway).
    pub const GW_TOKENS: &str = "gateway.generation_tokens";
    /// Finished requests (gateway).
    pub const GW_REQUESTS: &str = "gateway.requests";
    /// Requests that arrived and passed their tenant's limits, whatever admission did with
    /// them (gateway): offered load, not capped by capacity.
    pub const GW_ARRIVALS: &str = "gateway.arrivals";
    /// Estimated prompt tokens of those arrivals (gateway): with them, demand in both
    /// dimensions (see `autoscaler::work`).
    pub const GW_ARRIVAL_PROMPT_TOKENS: &str = "gateway.arrival_prompt_tokens";
    /// TTFT histogram (gateway).
    pub const GW_TTFT: &str = "gateway.ttft";
    /// Time-per-output-token histogram (gateway).
    pub const GW_TPOT: &str = "gateway.tpot";
    /// Output tokens of Batch API lines (gateway; not in `GW_TOKENS`).
    pub const GW_BATCH_TOKENS: &str = "gateway.batch_generation_tokens";
    /// Output tokens (engines).
    pub const ENGINE_TOKENS: &str = "engine.generation_tokens";
    /// Finished requests (engines: the e2e histogram's count).
    pub const ENGINE_REQUESTS: &str = "engine.requests";
    /// TTFT histogram (engines).
    pub const ENGINE_TTFT: &str = "engine.ttft";
    /// Inter-token latency histogram (engines).
    pub const ENGINE_TPOT: &str = "engine.tpot";
}

/// Which kind of process a target is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// A tokenscale gateway: per-model series, filtered by `model_name`.
    Gateway,
    /// One engine replica of the model.
    Engine,
}

/// Instantaneous values of one target.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Gauges {
    /// Requests waiting (gateway admission queue, or the engine's waiting queue).
    pub waiting: f64,
    /// Requests running (engine batch) or in flight (gateway).
    pub running: f64,
    /// KV-cache use, 0–1 (engines only).
    pub kv_cache_usage: f64,
}

/// A gateway's Batch API gauges for one model (zero when it exports none).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchGauges {
    /// Output tokens/s that finish every running batch by its deadline (shared state: every
    /// gateway pod reports the same figure).
    pub required_output_tokens_per_s: f64,
    /// Output tokens the unfinished batch lines may still generate (shared state).
    pub backlog_output_tokens: f64,
    /// Batch lines this pod has in flight.
    pub in_flight_requests: f64,
}

impl BatchGauges {
    /// Folds another gateway pod's gauges in: the shared figures once, the pods' own summed.
    pub fn merge(&mut self, other: &BatchGauges) {
        self.required_output_tokens_per_s = self
            .required_output_tokens_per_s
            .max(other.required_output_tokens_per_s);
        self.backlog_output_tokens = self.backlog_output_tokens.max(other.backlog_output_tokens);
        self.in_flight_requests += other.in_flight_requests;
    }
}

/// What one scrape of one target contributes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// Counter and bucket values under logical keys.
    pub counters: BTreeMap<SeriesKey, f64>,
    /// Gauges.
    pub gauges: Gauges,
    /// Batch API gauges (gateways only).
    pub batch: BatchGauges,
    /// The Hub commit the engine's model resolved to (its model info gauge), if any.
    pub revision: Option<String>,
    /// Signals the engine's `/metrics` did not carry (engines only).
    pub absent: Vec<Absent>,
    /// The engine's own start by phase, when it exports one (engines only).
    pub start: Option<super::EngineStart>,
    /// The concurrency cap: the engine's running-sequence limit against its running
    /// sequences, or the gateway's per-replica in-flight caps against their in-flight
    /// requests, reduced over its replicas; `None` when the target reports none.
    pub cap: Option<ConcurrencyCap>,
}

/// Extracts a reading. Gateway samples are kept only for `served_name`; an engine target
/// belongs to the model already, so all its samples count.
pub fn read(kind: TargetKind, samples: &[Sample], served_name: &str) -> Reading {
    match kind {
        TargetKind::Gateway => read_gateway(samples, served_name),
        TargetKind::Engine => read_engine(samples),
    }
}

/// A gateway's series for `served_name`.
fn read_gateway(samples: &[Sample], served_name: &str) -> Reading {
    let mut reading = Reading::default();
    for sample in samples
        .iter()
        .filter(|s| s.label(LABEL_MODEL_NAME) == Some(served_name))
    {
        let (key, value) = (sample.name.as_str(), sample.value);
        let mut add = |k: &str| *reading.counters.entry(k.to_string()).or_insert(0.0) += value;
        match key {
            k if k == gateway::GENERATION_TOKENS_TOTAL => add(keys::GW_TOKENS),
            k if k == gateway::REQUESTS_TOTAL => add(keys::GW_REQUESTS),
            k if k == gateway::ARRIVALS_TOTAL => add(keys::GW_ARRIVALS),
            k if k == gateway::ARRIVAL_PROMPT_TOKENS_TOTAL => add(keys::GW_ARRIVAL_PROMPT_TOKENS),
            k if k == gateway::QUEUE_DEPTH => reading.gauges.waiting += value,
            k if k == gateway::IN_FLIGHT_REQUESTS => reading.gauges.running += value,
            // Batch lines are reported apart from the interactive series above.
            k if k == gateway::BATCH_GENERATION_TOKENS_TOTAL => add(keys::GW_BATCH_TOKENS),
            k if k == gateway::BATCH_REQUIRED_OUTPUT_TOKENS_PER_SECOND => {
                reading.batch.required_output_tokens_per_s += value;
            }
            k if k == gateway::BATCH_BACKLOG_OUTPUT_TOKENS => {
                reading.batch.backlog_output_tokens += value;
            }
            k if k == gateway::BATCH_IN_FLIGHT_REQUESTS => {
                reading.batch.in_flight_requests += value;
            }
            _ => bucket(
                sample,
                &mut reading,
                &[
                    (gateway::TIME_TO_FIRST_TOKEN_SECONDS, keys::GW_TTFT),
                    (gateway::TIME_PER_OUTPUT_TOKEN_SECONDS, keys::GW_TPOT),
                ],
            ),
        }
    }
    reading.cap = caps::gateway(samples, served_name);
    reading
}

/// One engine replica's reading, through the adapter of the engine its metric names tell
/// (tokenscale, vLLM under its current and older names, SGLang, llama.cpp): what the engine
/// does not export is listed in `absent`, never read as zero demand.
fn read_engine(samples: &[Sample]) -> Reading {
    let mut reading = Reading {
        revision: samples
            .iter()
            .find(|s| s.name == engine::MODEL_INFO)
            .and_then(|s| s.label("revision"))
            .filter(|r| !r.is_empty())
            .map(str::to_string),
        start: super::start::engine_start(samples),
        ..Reading::default()
    };
    let refs = || {
        samples.iter().map(|s| SampleRef {
            name: &s.name,
            labels: &s.labels,
            value: s.value,
        })
    };
    let Some(kind) = EngineKind::detect(refs()) else {
        return reading;
    };
    let read = engines::read(kind, refs());
    let mut counter = |key: &str, value: &Result<f64, Absent>| {
        if let Ok(value) = value {
            reading.counters.insert(key.to_string(), *value);
        }
    };
    counter(keys::ENGINE_TOKENS, &read.generated_tokens);
    counter(keys::ENGINE_REQUESTS, &read.finished_requests);
    for (histogram, logical) in [
        (&read.time_to_first_token, keys::ENGINE_TTFT),
        (&read.inter_token_latency, keys::ENGINE_TPOT),
    ] {
        for (le, count) in histogram.iter().flatten() {
            reading.counters.insert(bucket_key(logical, *le), *count);
        }
    }
    reading.gauges = Gauges {
        waiting: read.waiting_requests.clone().unwrap_or(0.0),
        running: read.running_requests.clone().unwrap_or(0.0),
        kv_cache_usage: read.kv_cache_usage.clone().unwrap_or(0.0),
    };
    reading.absent = read.absent().into_iter().cloned().collect();
    reading.cap = caps::engine(samples, reading.gauges.running);
    reading
}

/// Adds a `_bucket` sample of one of `histograms` (exposed name → logical key).
fn bucket(sample: &Sample, reading: &mut Reading, histograms: &[(&str, &str)]) {
    let Some(base) = sample.name.strip_suffix("_bucket") else {
        return;
    };
    let Some(&(_, logical)) = histograms.iter().find(|(name, _)| *name == base) else {
        return;
    };
    let le = match sample.label("le") {
        Some("+Inf") => f64::INFINITY,
        Some(text) => match text.parse::<f64>() {
            Ok(le) => le,
            Err(_) => return,
        },
        None => return,
    };
    *reading
        .counters
        .entry(bucket_key(logical, le))
        .or_insert(0.0) += sample.value;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics_source::text_format::parse;
    use tokenscale_common::engines::Signal;

    #[test]
    fn gateway_samples_are_filtered_by_model_and_summed_over_labels() {
        let text = format!(
            "{t}{{model_name=\"a\"}} 100\n{t}{{model_name=\"b\"}} 999\n\
             {r}{{model_name=\"a\",status=\"200\"}} 9\n{r}{{model_name=\"a\",status=\"429\"}} 1\n\
             {q}{{model_name=\"a\"}} 4\n{h}_bucket{{model_name=\"a\",le=\"0.5\"}} 7\n\
             {h}_bucket{{model_name=\"a\",le=\"+Inf\"}} 10\n\
             {a}{{model_name=\"a\",outcome=\"admitted\"}} 12\n{a}{{model_name=\"a\",outcome=\"refused\"}} 3\n",
            t = gateway::GENERATION_TOKENS_TOTAL,
            r = gateway::REQUESTS_TOTAL,
            a = gateway::ARRIVALS_TOTAL,
            q = gateway::QUEUE_DEPTH,
            h = gateway::TIME_TO_FIRST_TOKEN_SECONDS,
        );
        let reading = read(TargetKind::Gateway, &parse(&text).samples, "a");
        assert_eq!(reading.counters[keys::GW_TOKENS], 100.0);
        assert_eq!(reading.counters[keys::GW_REQUESTS], 10.0);
        assert_eq!(
            reading.counters[keys::GW_ARRIVALS],
            15.0,
            "every outcome arrived"
        );
        assert_eq!(reading.counters[&bucket_key(keys::GW_TTFT, 0.5)], 7.0);
        assert_eq!(
            reading.counters[&bucket_key(keys::GW_TTFT, f64::INFINITY)],
            10.0
        );
        assert_eq!(reading.gauges.waiting, 4.0);
    }

    #[test]
    fn gateway_batch_series_are_read_apart_from_the_interactive_ones() {
        let text = format!(
            "{t}{{model_name=\"a\"}} 100\n{bt}{{model_name=\"a\",tenant=\"x\"}} 700\n\
             {bt}{{model_name=\"a\",tenant=\"y\"}} 300\n{bt}{{model_name=\"b\",tenant=\"x\"}} 5\n\
             {req}{{model_name=\"a\"}} 2500.5\n{bl}{{model_name=\"a\"}} 9e6\n{inf}{{model_name=\"a\"}} 12\n",
            t = gateway::GENERATION_TOKENS_TOTAL,
            bt = gateway::BATCH_GENERATION_TOKENS_TOTAL,
            req = gateway::BATCH_REQUIRED_OUTPUT_TOKENS_PER_SECOND,
            bl = gateway::BATCH_BACKLOG_OUTPUT_TOKENS,
            inf = gateway::BATCH_IN_FLIGHT_REQUESTS,
        );
        let reading = read(TargetKind::Gateway, &parse(&text).samples, "a");
        assert_eq!(reading.counters[keys::GW_TOKENS], 100.0, "batch not in it");
        assert_eq!(reading.counters[keys::GW_BATCH_TOKENS], 1000.0);
        assert_eq!(
            reading.batch,
            BatchGauges {
                required_output_tokens_per_s: 2500.5,
                backlog_output_tokens: 9e6,
                in_flight_requests: 12.0,
            }
        );
        // A second pod reports the same shared figures and its own lines in flight.
        let mut both = reading.batch;
        both.merge(&BatchGauges {
            in_flight_requests: 3.0,
            ..reading.batch
        });
        assert_eq!(
            (
                both.required_output_tokens_per_s,
                both.backlog_output_tokens
            ),
            (2500.5, 9e6)
        );
        assert_eq!(both.in_flight_requests, 15.0);
    }

    #[test]
    fn engine_samples_map_to_engine_keys() {
        let text = format!(
            "{t}{{model_name=\"x\"}} 50\n{e}_count{{model_name=\"x\"}} 3\n{w} 2\n{run} 5\n{kv} 0.4\n\
             {itl}_bucket{{le=\"0.05\"}} 20\n",
            t = engine::GENERATION_TOKENS_TOTAL,
            e = engine::E2E_REQUEST_LATENCY_SECONDS,
            w = engine::NUM_REQUESTS_WAITING,
            run = engine::NUM_REQUESTS_RUNNING,
            kv = engine::KV_CACHE_USAGE_PERC,
            itl = engine::INTER_TOKEN_LATENCY_SECONDS,
        );
        let reading = read(TargetKind::Engine, &parse(&text).samples, "ignored");
        assert_eq!(reading.counters[keys::ENGINE_TOKENS], 50.0);
        assert_eq!(reading.counters[keys::ENGINE_REQUESTS], 3.0);
        assert_eq!(reading.counters[&bucket_key(keys::ENGINE_TPOT, 0.05)], 20.0);
        assert_eq!(
            reading.gauges,
            Gauges {
                waiting: 2.0,
                running: 5.0,
                kv_cache_usage: 0.4
            }
        );
    }

    fn fixture(path: &str) -> Vec<Sample> {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../common/fixtures/engines/");
        let text = std::fs::read_to_string(format!("{root}{path}"))
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        parse(&text).samples
    }

    /// Real `/metrics` of SGLang and llama.cpp (sources in the fixtures' headers): read by
    /// their own adapters, and what an engine lacks is named, not read as zero.
    #[test]
    fn sglang_and_llama_cpp_replicas_are_read_by_their_adapters() {
        let sglang = read(
            TargetKind::Engine,
            &fixture("sglang/docs-production-metrics.prom"),
            "x",
        );
        assert_eq!(
            sglang.gauges,
            Gauges {
                waiting: 2826.0,
                running: 162.0,
                kv_cache_usage: 0.28
            }
        );
        assert_eq!(sglang.counters[keys::ENGINE_TOKENS], 7.557572e6);
        let llama = read(
            TargetKind::Engine,
            &fixture("llamacpp/llama-server-busy.prom"),
            "x",
        );
        assert_eq!((llama.gauges.waiting, llama.gauges.running), (1.0, 2.0));
        assert_eq!(llama.counters[keys::ENGINE_TOKENS], 28.0);
        let absent: Vec<Signal> = llama.absent.iter().map(|a| a.signal).collect();
        for signal in [
            Signal::KvCacheUsage,
            Signal::TimeToFirstToken,
            Signal::InterTokenLatency,
        ] {
            assert!(absent.contains(&signal), "{signal:?} not named: {absent:?}");
        }
        assert!(
            !llama
                .counters
                .keys()
                .any(|k| k.starts_with(keys::ENGINE_TTFT))
        );
    }

    #[test]
    fn the_engine_model_info_gives_the_served_revision() {
        let text = format!(
            "{i}{{model_name=\"x\",source=\"hf://org/m\",format=\"safetensors\",revision=\"abc\"}} 1\n",
            i = engine::MODEL_INFO
        );
        let reading = read(TargetKind::Engine, &parse(&text).samples, "x");
        assert_eq!(reading.revision.as_deref(), Some("abc"));
        let local = text.replace("revision=\"abc\"", "revision=\"\"");
        assert_eq!(
            read(TargetKind::Engine, &parse(&local).samples, "x").revision,
            None
        );
    }
}
