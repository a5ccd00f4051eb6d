//! A replica's own start by phase, read from its engine's start-phase gauges: tokenscale's
//! engine exports them once it serves; vLLM, SGLang and llama.cpp export none.

use tokenscale_common::metrics::engine::{
    LABEL_PHASE, START_PHASE_FETCH, START_PHASE_LOAD, START_PHASE_READY, START_PHASE_SECONDS,
    START_PHASE_WARMUP,
};

use super::text_format::Sample;

/// How long each phase of an engine's start took, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct EngineStart {
    /// Process start to the weights on disk (from the Hub or the cache).
    pub fetch_s: f64,
    /// Weights parsed, quantised or uploaded, the backend built.
    pub load_s: f64,
    /// The first forward pass.
    pub warmup_s: f64,
    /// Warmed up to serving.
    pub ready_s: f64,
}

/// The start phases among one replica's `samples`; `None` unless both `fetch` and `load` are
/// there as finite, non-negative seconds (an engine that exports no such family, or one that
/// does not serve yet). A missing `warmup` or `ready` reads as zero.
pub fn engine_start(samples: &[Sample]) -> Option<EngineStart> {
    let phase = |name: &str| {
        samples
            .iter()
            .find(|s| s.name == START_PHASE_SECONDS && s.label(LABEL_PHASE) == Some(name))
            .map(|s| s.value)
            .filter(|v| v.is_finite() && *v >= 0.0)
    };
    Some(EngineStart {
        fetch_s: phase(START_PHASE_FETCH)?,
        load_s: phase(START_PHASE_LOAD)?,
        warmup_s: phase(START_PHASE_WARMUP).unwrap_or(0.0),
        ready_s: phase(START_PHASE_READY).unwrap_or(0.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics_source::text_format::parse;

    #[test]
    fn the_phases_are_read_by_label_and_a_partial_family_is_none() {
        let text = format!(
            "{n}{{model_name=\"m\",phase=\"fetch\"}} 42.5\n{n}{{model_name=\"m\",phase=\"load\"}} 7\n\
             {n}{{model_name=\"m\",phase=\"warmup\"}} 1.25\n{n}{{model_name=\"m\",phase=\"ready\"}} 0.01\n",
            n = START_PHASE_SECONDS
        );
        let start = engine_start(&parse(&text).samples);
        assert_eq!(
            start,
            Some(EngineStart {
                fetch_s: 42.5,
                load_s: 7.0,
                warmup_s: 1.25,
                ready_s: 0.01
            })
        );
        let fetch_only = format!("{START_PHASE_SECONDS}{{phase=\"fetch\"}} 3\n");
        assert_eq!(engine_start(&parse(&fetch_only).samples), None);
        let vllm = "vllm:num_requests_running{model_name=\"m\"} 1\n";
        assert_eq!(engine_start(&parse(vllm).samples), None);
    }
}
