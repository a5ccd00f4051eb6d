//! The engine's metrics: counters, gauges and histograms kept in atomics (the engine loop
//! writes, `/metrics` reads) and rendered in the Prometheus text format under the names in
//! `tokenscale_common::metrics::engine`, each labelled with `model_name`.

pub use tokenscale_common::exposition::{Counter, Gauge};
use tokenscale_common::exposition::{
    Family, Histogram, Kind, LeFormat, Row, Series, Value, render, table,
};
use tokenscale_common::metrics::{LABEL_MODEL_NAME, engine as names};

#[path = "spec_metrics.rs"]
mod spec_metrics;
pub use spec_metrics::SpecDecodeMetrics;

/// Bucket bounds of latency histograms, in seconds (vLLM's, so dashboards line up).
const TTFT_BUCKETS_S: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS_S: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const REQUEST_BUCKETS_S: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
const STEP_BUCKETS_S: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// Every metric one engine exports.
#[derive(Debug)]
pub struct EngineMetrics {
    model_name: String,
    backend: String,
    simulated: bool,
    block_size: usize,
    num_blocks: usize,
    /// `(source, format, revision)` of the loaded model, once known.
    model_info: std::sync::OnceLock<(String, String, String)>,
    pub num_requests_running: Gauge,
    pub num_requests_waiting: Gauge,
    pub kv_cache_usage_perc: Gauge,
    /// The running set's size limit in force: `--max-num-seqs`, or the lower one a TPOT
    /// target's measured step time allows.
    pub max_num_seqs: Gauge,
    pub prompt_tokens: Counter,
    pub generation_tokens: Counter,
    pub num_preemptions: Counter,
    pub prefix_cache_queries: Counter,
    pub prefix_cache_hits: Counter,
    pub time_to_first_token_s: Histogram,
    pub inter_token_latency_s: Histogram,
    pub e2e_request_latency_s: Histogram,
    pub request_queue_time_s: Histogram,
    pub step_duration_s: Histogram,
    pub batch_size: Histogram,
    /// Speculative decoding's acceptance (exported only while the engine speculates).
    pub spec_decode: SpecDecodeMetrics,
    /// The LoRA adapters in use (exported only by a backend that computes adapters).
    pub lora: super::lora_metrics::LoraMetrics,
    /// How long each phase of the start took (exported once the engine serves).
    pub start: super::start_metrics::StartMetrics,
}

impl EngineMetrics {
    /// Zeroed metrics for a model served under `model_name` on `backend`.
    pub fn new(
        model_name: &str,
        backend: &str,
        simulated: bool,
        block_size: usize,
        num_blocks: usize,
    ) -> Self {
        Self {
            model_name: model_name.to_string(),
            backend: backend.to_string(),
            simulated,
            block_size,
            num_blocks,
            model_info: std::sync::OnceLock::new(),
            num_requests_running: Gauge::default(),
            num_requests_waiting: Gauge::default(),
            kv_cache_usage_perc: Gauge::default(),
            max_num_seqs: Gauge::default(),
            prompt_tokens: Counter::default(),
            generation_tokens: Counter::default(),
            num_preemptions: Counter::default(),
            prefix_cache_queries: Counter::default(),
            prefix_cache_hits: Counter::default(),
            time_to_first_token_s: Histogram::new(TTFT_BUCKETS_S, LeFormat::Decimal),
            inter_token_latency_s: Histogram::new(ITL_BUCKETS_S, LeFormat::Decimal),
            e2e_request_latency_s: Histogram::new(REQUEST_BUCKETS_S, LeFormat::Decimal),
            request_queue_time_s: Histogram::new(REQUEST_BUCKETS_S, LeFormat::Decimal),
            step_duration_s: Histogram::new(STEP_BUCKETS_S, LeFormat::Decimal),
            batch_size: Histogram::new(BATCH_BUCKETS, LeFormat::Decimal),
            spec_decode: SpecDecodeMetrics::default(),
            lora: Default::default(),
            start: Default::default(),
        }
    }

    /// The compute backend's name (`cpu`, `cuda`, `sim`).
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// Whether the backend models a replica instead of running one.
    pub fn simulated(&self) -> bool {
        self.simulated
    }

    /// Records where the model came from (exported as the model info gauge); the first call
    /// wins.
    pub fn set_model_info(&self, source: &str, format: &str, revision: Option<&str>) {
        let info = (
            source.to_string(),
            format.to_string(),
            revision.unwrap_or("").to_string(),
        );
        let _ = self.model_info.set(info);
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric.
    pub fn render(&self) -> String {
        let items = [(vec![(LABEL_MODEL_NAME, self.model_name.clone())], self)];
        let mut families = table(Kind::Gauge, &GAUGES, &items);
        families.extend(self.info_families());
        families.extend(table(Kind::Counter, &COUNTERS, &items));
        families.extend(table(Kind::Histogram, &HISTOGRAMS, &items));
        families.extend(self.spec_decode.families(&self.model_name));
        families.extend(self.lora.families());
        families.extend(self.start.families(&self.model_name));
        render(&families)
    }

    /// The info gauges (value 1, the facts in labels); the model's only once it is known.
    fn info_families(&self) -> Vec<Family<'_>> {
        let info = |name, help, extra: [(&'static str, String); 2]| {
            let labels = [
                vec![(LABEL_MODEL_NAME, self.model_name.clone())],
                extra.to_vec(),
            ];
            Family::new(
                name,
                Kind::Gauge,
                help,
                vec![Series::new(labels.concat(), 1u64)],
            )
        };
        let cache = [
            ("block_size", self.block_size.to_string()),
            ("num_gpu_blocks", self.num_blocks.to_string()),
        ];
        let backend = [
            ("backend", self.backend.clone()),
            ("simulated", self.simulated.to_string()),
        ];
        let mut families = vec![
            info(names::CACHE_CONFIG_INFO, "KV-cache configuration.", cache),
            info(
                names::BACKEND_INFO,
                "Compute backend of this engine.",
                backend,
            ),
        ];
        if let Some((source, format, revision)) = self.model_info.get() {
            let labels = vec![
                (LABEL_MODEL_NAME, self.model_name.clone()),
                ("source", source.clone()),
                ("format", format.clone()),
                ("revision", revision.clone()),
            ];
            let series = vec![Series::new(labels, 1u64)];
            families.push(Family::new(
                names::MODEL_INFO,
                Kind::Gauge,
                "Where the served model came from.",
                series,
            ));
        }
        families
    }
}

/// The gauges: name, help, value.
const GAUGES: [Row<'static, EngineMetrics, f64>; 4] = [
    (
        names::NUM_REQUESTS_RUNNING,
        "Requests in the running batch.",
        |m| m.num_requests_running.get(),
    ),
    (
        names::NUM_REQUESTS_WAITING,
        "Requests waiting to be scheduled.",
        |m| m.num_requests_waiting.get(),
    ),
    (
        names::KV_CACHE_USAGE_PERC,
        "Fraction (0-1) of KV-cache blocks in use.",
        |m| m.kv_cache_usage_perc.get(),
    ),
    (
        names::MAX_NUM_SEQS,
        "Running sequences allowed now: --max-num-seqs, or the lower number the TPOT target's measured step time allows.",
        |m| m.max_num_seqs.get(),
    ),
];

/// The counters: name, help, value.
const COUNTERS: [Row<'static, EngineMetrics, u64>; 5] = [
    (
        names::PROMPT_TOKENS_TOTAL,
        "Prompt tokens processed.",
        |m| m.prompt_tokens.get(),
    ),
    (names::GENERATION_TOKENS_TOTAL, "Tokens generated.", |m| {
        m.generation_tokens.get()
    }),
    (
        names::NUM_PREEMPTIONS_TOTAL,
        "Requests preempted to free KV blocks.",
        |m| m.num_preemptions.get(),
    ),
    (
        names::PREFIX_CACHE_QUERIES_TOTAL,
        "Prompt tokens looked up in the prefix cache.",
        |m| m.prefix_cache_queries.get(),
    ),
    (
        names::PREFIX_CACHE_HITS_TOTAL,
        "Prompt tokens found in the prefix cache.",
        |m| m.prefix_cache_hits.get(),
    ),
];

/// The histograms: name, help, buckets.
const HISTOGRAMS: [Row<'static, EngineMetrics, Value>; 6] = [
    (
        names::TIME_TO_FIRST_TOKEN_SECONDS,
        "Arrival to first token, seconds.",
        |m| Value::Histogram(m.time_to_first_token_s.snapshot()),
    ),
    (
        names::INTER_TOKEN_LATENCY_SECONDS,
        "Between consecutive output tokens, seconds.",
        |m| Value::Histogram(m.inter_token_latency_s.snapshot()),
    ),
    (
        names::E2E_REQUEST_LATENCY_SECONDS,
        "Arrival to last token, seconds.",
        |m| Value::Histogram(m.e2e_request_latency_s.snapshot()),
    ),
    (
        names::REQUEST_QUEUE_TIME_SECONDS,
        "Arrival to first scheduling, seconds.",
        |m| Value::Histogram(m.request_queue_time_s.snapshot()),
    ),
    (
        names::STEP_DURATION_SECONDS,
        "One engine step, seconds.",
        |m| Value::Histogram(m.step_duration_s.snapshot()),
    ),
    (names::BATCH_SIZE, "Sequences in one engine step.", |m| {
        Value::Histogram(m.batch_size.snapshot())
    }),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_render_cumulative_buckets_sum_and_count() {
        let m = EngineMetrics::new("m", "cpu", false, 16, 64);
        m.batch_size.observe(3.0);
        m.batch_size.observe(1.0);
        m.batch_size.observe(1000.0);
        let text = m.render();
        assert!(
            text.contains("tokenscale_engine_batch_size_bucket{model_name=\"m\",le=\"1.0\"} 1\n")
        );
        assert!(
            text.contains("tokenscale_engine_batch_size_bucket{model_name=\"m\",le=\"4.0\"} 2\n")
        );
        assert!(
            text.contains("tokenscale_engine_batch_size_bucket{model_name=\"m\",le=\"+Inf\"} 3\n")
        );
        assert!(text.contains("tokenscale_engine_batch_size_sum{model_name=\"m\"} 1004\n"));
        assert!(text.contains("tokenscale_engine_batch_size_count{model_name=\"m\"} 3\n"));
    }

    /// The whole exposition of metrics touched everywhere, byte for byte as captured
    /// (`TOKENSCALE_BLESS=1` rewrites the file after a deliberate change).
    #[test]
    fn the_exposition_is_unchanged_byte_for_byte() {
        let m = EngineMetrics::new("m\\x", "cpu", false, 16, 64);
        m.set_model_info("hf:org/model", "gguf", Some("abc"));
        m.num_requests_running.set(3.0);
        m.kv_cache_usage_perc.set(0.125);
        m.max_num_seqs.set(64.0);
        m.prompt_tokens.add(1234);
        m.generation_tokens.add(56);
        for v in [0.0005, 0.01, 0.3, 7.0, 5000.0] {
            m.time_to_first_token_s.observe(v);
            m.inter_token_latency_s.observe(v);
            m.e2e_request_latency_s.observe(v);
            m.step_duration_s.observe(v);
        }
        m.batch_size.observe(5.0);
        m.start.set(&[
            ("fetch", 12.5),
            ("load", 3.25),
            ("warmup", 0.5),
            ("ready", 0.001),
        ]);
        let text = m.render();
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/metrics_golden.txt"
        );
        assert_eq!(tokenscale_scratch::golden(path, &text), text);
    }

    #[test]
    fn labels_are_escaped_and_info_gauges_carry_the_cache_shape() {
        let m = EngineMetrics::new("a\"b", "cpu", false, 16, 64);
        let text = m.render();
        assert!(text.contains(
            r#"vllm:cache_config_info{model_name="a\"b",block_size="16",num_gpu_blocks="64"} 1"#
        ));
        m.num_preemptions.add(2);
        assert!(
            m.render()
                .contains(r#"vllm:num_preemptions_total{model_name="a\"b"} 2"#)
        );
    }
}
