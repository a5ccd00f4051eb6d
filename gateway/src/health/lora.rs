//! Reads `vllm:lora_requests_info` (vLLM's, and our engine's): the adapters of a replica's
//! running and waiting requests and its `max_lora`, from the newest series.

use tokenscale_common::metrics::engine::LORA_REQUESTS_INFO;
use tokenscale_common::prom_text::Sample;

use crate::routing::adapters::LoraInfo;

/// What the newest `vllm:lora_requests_info` series says, or `None` without one. vLLM keeps
/// a series per label set it ever had, each valued with when it was set: the largest value
/// is the state now.
pub fn lora_info(samples: &[Sample]) -> Option<LoraInfo> {
    let newest = samples
        .iter()
        .filter(|s| s.name == LORA_REQUESTS_INFO)
        .max_by(|a, b| a.value.total_cmp(&b.value))?;
    let names = |label: &str| -> Vec<String> {
        newest
            .label(label)
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect()
    };
    Some(LoraInfo {
        running: names("running_lora_adapters"),
        waiting: names("waiting_lora_adapters"),
        max_lora: newest.label("max_lora").and_then(|m| m.trim().parse().ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_series_names_the_adapters_in_use_and_the_bound() {
        let text = "\
vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"old\",waiting_lora_adapters=\"\"} 100.5
vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"sql,legal\",waiting_lora_adapters=\"chat\"} 200.25
vllm:num_requests_waiting{model_name=\"m\"} 1
";
        let samples = tokenscale_common::prom_text::parse(text).samples;
        let info = lora_info(&samples).expect("a series");
        assert_eq!(info.running, ["sql", "legal"]);
        assert_eq!(info.waiting, ["chat"]);
        assert_eq!(info.max_lora, Some(2));
        let none = tokenscale_common::prom_text::parse("vllm:num_requests_waiting 1\n");
        assert_eq!(lora_info(&none.samples), None);
    }
}
