//! Speculative decoding's acceptance counters, under vLLM's `vllm:spec_decode_*` names; they
//! are exported only by an engine that speculates (as vLLM exports them only then).

use std::sync::atomic::{AtomicBool, Ordering};

use tokenscale_common::exposition::{Family, Kind, Series};
use tokenscale_common::metrics::{LABEL_MODEL_NAME, engine as names};

use super::Counter;

/// Draft positions counted per position (the most `--num-speculative-tokens` allows).
const MAX_POSITIONS: usize = 16;

/// The `vllm:spec_decode_*` counters.
#[derive(Debug, Default)]
pub struct SpecDecodeMetrics {
    enabled: AtomicBool,
    pub num_drafts: Counter,
    pub num_draft_tokens: Counter,
    pub num_accepted_tokens: Counter,
    per_pos: [Counter; MAX_POSITIONS],
}

impl SpecDecodeMetrics {
    /// Exports the counters (the engine speculates).
    pub fn enable(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// One verify step: `accepted` of `drafted` draft tokens kept (the first `accepted`
    /// positions).
    pub fn record(&self, drafted: usize, accepted: usize) {
        self.num_drafts.add(1);
        self.num_draft_tokens.add(drafted as u64);
        self.num_accepted_tokens.add(accepted as u64);
        for counter in self.per_pos.iter().take(accepted) {
            counter.add(1);
        }
    }

    /// Draft tokens accepted at `position` (0-based).
    pub fn accepted_at(&self, position: usize) -> u64 {
        self.per_pos.get(position).map_or(0, Counter::get)
    }

    /// The counters' families (none while speculation is off), labelled `model_name`.
    pub(super) fn families(&self, model_name: &str) -> Vec<Family<'static>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let model = || vec![(LABEL_MODEL_NAME, model_name.to_string())];
        let count = |name, help, counter: &Counter| {
            let series = vec![Series::new(model(), counter.get())];
            Family::new(name, Kind::Counter, help, series)
        };
        let per_pos = self
            .per_pos
            .iter()
            .enumerate()
            .map(|(position, counter)| {
                let labels = [model(), vec![("position", position.to_string())]].concat();
                Series::new(labels, counter.get())
            })
            .collect();
        vec![
            count(
                names::SPEC_DECODE_NUM_DRAFTS_TOTAL,
                "Speculative drafts verified.",
                &self.num_drafts,
            ),
            count(
                names::SPEC_DECODE_NUM_DRAFT_TOKENS_TOTAL,
                "Speculative draft tokens verified.",
                &self.num_draft_tokens,
            ),
            count(
                names::SPEC_DECODE_NUM_ACCEPTED_TOKENS_TOTAL,
                "Speculative draft tokens accepted.",
                &self.num_accepted_tokens,
            ),
            Family::new(
                names::SPEC_DECODE_NUM_ACCEPTED_TOKENS_PER_POS_TOTAL,
                Kind::Counter,
                "Speculative draft tokens accepted, by position in the draft.",
                per_pos,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_render_under_vllm_names_only_while_speculating() {
        let m = SpecDecodeMetrics::default();
        assert!(m.families("m").is_empty());
        m.enable(true);
        m.record(4, 2);
        m.record(3, 3);
        let text = tokenscale_common::exposition::render(&m.families("m"));
        assert!(text.contains("vllm:spec_decode_num_drafts_total{model_name=\"m\"} 2\n"));
        assert!(text.contains("vllm:spec_decode_num_draft_tokens_total{model_name=\"m\"} 7\n"));
        assert!(text.contains("vllm:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 5\n"));
        let per_pos = "vllm:spec_decode_num_accepted_tokens_per_pos_total";
        assert!(text.contains(&format!("{per_pos}{{model_name=\"m\",position=\"1\"}} 2\n")));
        assert!(text.contains(&format!("{per_pos}{{model_name=\"m\",position=\"2\"}} 1\n")));
        assert_eq!(m.accepted_at(3), 0);
    }
}
