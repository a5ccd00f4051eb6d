//! Reads an engine's own load from its Prometheus text, whichever engine it is (tokenscale,
//! vLLM, SGLang, llama.cpp): waiting requests and KV-cache use, through the engine's metric
//! adapter (`tokenscale_common::engines`), the same reading the autoscaler makes.

use tokenscale_common::engines::{self, EngineKind};
use tokenscale_common::prom_text;

use super::lora::lora_info;
use crate::routing::adapters::LoraInfo;

/// What one scrape of a replica's `/metrics` tells.
#[derive(Debug, Clone, PartialEq)]
pub struct Scraped {
    /// The engine that exported the metrics.
    pub kind: EngineKind,
    /// `(waiting requests, KV-cache use 0–1)`, as [`parse_engine_load`] reads them.
    pub load: Option<(f64, f64)>,
    /// The LoRA adapters in use and the engine's bound, when it exports them.
    pub lora: Option<LoraInfo>,
}

/// The engine and its load, or `None` when the text is no engine's.
pub fn parse_scrape(text: &[u8]) -> Option<Scraped> {
    let text = std::str::from_utf8(text).ok()?;
    let samples = prom_text::parse(text).samples;
    let (kind, reading) = engines::read_samples(&samples)?;
    let (waiting, kv) = (reading.waiting_requests.ok(), reading.kv_cache_usage.ok());
    let load =
        (waiting.is_some() || kv.is_some()).then(|| (waiting.unwrap_or(0.0), kv.unwrap_or(0.0)));
    Some(Scraped {
        kind,
        load,
        lora: lora_info(&samples),
    })
}

/// `(waiting requests, KV-cache use 0–1)`, or `None` when the text is no engine's or has
/// neither (then the replica's load stays stale and the picker goes by in-flight counts).
/// A signal the engine does not export counts as 0 when the other is there (llama.cpp has
/// dropped its KV-cache gauge).
pub fn parse_engine_load(text: &[u8]) -> Option<(f64, f64)> {
    parse_scrape(text)?.load
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_waiting_and_takes_the_highest_kv_usage() {
        let text = b"# HELP vllm:num_requests_waiting x\n# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{model_name=\"a\"} 2\nvllm:num_requests_waiting{model_name=\"b\"} 3\n\
vllm:kv_cache_usage_perc{model_name=\"a\"} 0.25\nvllm:num_requests_running{model_name=\"a\"} 9\n";
        assert_eq!(parse_engine_load(text), Some((5.0, 0.25)));
        assert_eq!(parse_engine_load(b"other_metric 1\n"), None);
    }

    /// Real `/metrics` texts of SGLang and llama.cpp (the adapters' fixtures; their sources are
    /// in their headers): each engine's own names, not vLLM's.
    #[test]
    fn reads_sglang_and_llama_cpp_names() {
        let fixture = |path: &str| {
            let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../common/fixtures/engines/");
            std::fs::read(format!("{root}{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
        };
        assert_eq!(
            parse_engine_load(&fixture("sglang/docs-production-metrics.prom")),
            Some((2826.0, 0.28))
        );
        // llama-server exports no KV-cache gauge any more: waiting requests alone.
        assert_eq!(
            parse_engine_load(&fixture("llamacpp/llama-server-busy.prom")),
            Some((1.0, 0.0))
        );
        // The kind a scrape names decides which engine-only request fields a replica gets.
        let kinds = [
            "sglang/docs-production-metrics.prom",
            "llamacpp/llama-server-busy.prom",
        ]
        .map(|path| parse_scrape(&fixture(path)).map(|s| s.kind));
        assert_eq!(
            kinds,
            [Some(EngineKind::Sglang), Some(EngineKind::Llamacpp)]
        );
    }
}
