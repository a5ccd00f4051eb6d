//! The engine's metrics: counters, gauges and histograms kept in atomics (the engine loop
//! writes, `/metrics` reads) and rendered in the Prometheus text format under the names in
//! `tokenscale_common::metrics::engine`, each labelled with `model_name`.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokenscale_common::metrics::{LABEL_MODEL_NAME, engine as names};

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

/// A histogram with fixed bucket bounds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    state: Mutex<HistogramState>,
}

#[derive(Debug, Clone, Default)]
struct HistogramState {
    /// Per bucket (not cumulative), plus one for `+Inf`.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            state: Mutex::new(HistogramState {
                counts: vec![0; bounds.len() + 1],
                sum: 0.0,
            }),
        }
    }

    /// Records one observation.
    pub fn observe(&self, value: f64) {
        let bucket = self.bounds.partition_point(|&b| b < value);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.counts[bucket] += 1;
        state.sum += value;
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .counts
            .iter()
            .sum()
    }
}

/// A float gauge in an atomic.
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    /// Sets the value.
    pub fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
    /// The value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// A monotonically increasing counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`.
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    /// The value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

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
            time_to_first_token_s: Histogram::new(TTFT_BUCKETS_S),
            inter_token_latency_s: Histogram::new(ITL_BUCKETS_S),
            e2e_request_latency_s: Histogram::new(REQUEST_BUCKETS_S),
            request_queue_time_s: Histogram::new(REQUEST_BUCKETS_S),
            step_duration_s: Histogram::new(STEP_BUCKETS_S),
            batch_size: Histogram::new(BATCH_BUCKETS),
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
        let model = format!("{LABEL_MODEL_NAME}=\"{}\"", escape_label(&self.model_name));
        let mut out = String::with_capacity(8192);
        let gauges = [
            (
                names::NUM_REQUESTS_RUNNING,
                "Requests in the running batch.",
                self.num_requests_running.get(),
            ),
            (
                names::NUM_REQUESTS_WAITING,
                "Requests waiting to be scheduled.",
                self.num_requests_waiting.get(),
            ),
            (
                names::KV_CACHE_USAGE_PERC,
                "Fraction (0-1) of KV-cache blocks in use.",
                self.kv_cache_usage_perc.get(),
            ),
            (
                names::MAX_NUM_SEQS,
                "Running sequences allowed now: --max-num-seqs, or the lower number the TPOT target's measured step time allows.",
                self.max_num_seqs.get(),
            ),
        ];
        for (name, help, value) in gauges {
            family(&mut out, name, help, "gauge");
            let _ = writeln!(out, "{name}{{{model}}} {value}");
        }
        let info = format!(
            "{model},block_size=\"{}\",num_gpu_blocks=\"{}\"",
            self.block_size, self.num_blocks
        );
        family(
            &mut out,
            names::CACHE_CONFIG_INFO,
            "KV-cache configuration.",
            "gauge",
        );
        let _ = writeln!(out, "{}{{{info}}} 1", names::CACHE_CONFIG_INFO);
        let backend = format!(
            "{model},backend=\"{}\",simulated=\"{}\"",
            escape_label(&self.backend),
            self.simulated
        );
        family(
            &mut out,
            names::BACKEND_INFO,
            "Compute backend of this engine.",
            "gauge",
        );
        let _ = writeln!(out, "{}{{{backend}}} 1", names::BACKEND_INFO);
        if let Some((source, format, revision)) = self.model_info.get() {
            let labels = format!(
                "{model},source=\"{}\",format=\"{}\",revision=\"{}\"",
                escape_label(source),
                escape_label(format),
                escape_label(revision)
            );
            family(
                &mut out,
                names::MODEL_INFO,
                "Where the served model came from.",
                "gauge",
            );
            let _ = writeln!(out, "{}{{{labels}}} 1", names::MODEL_INFO);
        }
        let counters = [
            (
                names::PROMPT_TOKENS_TOTAL,
                "Prompt tokens processed.",
                &self.prompt_tokens,
            ),
            (
                names::GENERATION_TOKENS_TOTAL,
                "Tokens generated.",
                &self.generation_tokens,
            ),
            (
                names::NUM_PREEMPTIONS_TOTAL,
                "Requests preempted to free KV blocks.",
                &self.num_preemptions,
            ),
            (
                names::PREFIX_CACHE_QUERIES_TOTAL,
                "Prompt tokens looked up in the prefix cache.",
                &self.prefix_cache_queries,
            ),
            (
                names::PREFIX_CACHE_HITS_TOTAL,
                "Prompt tokens found in the prefix cache.",
                &self.prefix_cache_hits,
            ),
        ];
        for (name, help, counter) in counters {
            family(&mut out, name, help, "counter");
            let _ = writeln!(out, "{name}{{{model}}} {}", counter.get());
        }
        let histograms = [
            (
                names::TIME_TO_FIRST_TOKEN_SECONDS,
                "Arrival to first token, seconds.",
                &self.time_to_first_token_s,
            ),
            (
                names::INTER_TOKEN_LATENCY_SECONDS,
                "Between consecutive output tokens, seconds.",
                &self.inter_token_latency_s,
            ),
            (
                names::E2E_REQUEST_LATENCY_SECONDS,
                "Arrival to last token, seconds.",
                &self.e2e_request_latency_s,
            ),
            (
                names::REQUEST_QUEUE_TIME_SECONDS,
                "Arrival to first scheduling, seconds.",
                &self.request_queue_time_s,
            ),
            (
                names::STEP_DURATION_SECONDS,
                "One engine step, seconds.",
                &self.step_duration_s,
            ),
            (
                names::BATCH_SIZE,
                "Sequences in one engine step.",
                &self.batch_size,
            ),
        ];
        for (name, help, histogram) in histograms {
            family(&mut out, name, help, "histogram");
            render_histogram(&mut out, name, &model, histogram);
        }
        out
    }
}

fn family(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn render_histogram(out: &mut String, name: &str, labels: &str, histogram: &Histogram) {
    let state = histogram
        .state
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut cumulative = 0u64;
    for (bound, count) in histogram.bounds.iter().zip(&state.counts) {
        cumulative += count;
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"{bound:?}\"}} {cumulative}"
        );
    }
    cumulative += state.counts.last().copied().unwrap_or(0);
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}");
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", state.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
}

/// Escapes a label value (backslash, double quote, newline), as the text format requires.
fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

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
        let text = m.render();
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/metrics_golden.txt");
        if std::env::var_os("TOKENSCALE_BLESS").is_some() {
            let _ = std::fs::write(path, &text);
        }
        assert_eq!(std::fs::read_to_string(path).unwrap_or_default(), text);
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
