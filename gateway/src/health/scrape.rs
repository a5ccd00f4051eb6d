//! Reads an engine's own load from its Prometheus text: waiting requests and KV-cache usage.

use tokenscale_common::metrics::engine;

/// `(num_requests_waiting summed over series, kv_cache_usage_perc max over series)`, or
/// `None` when the text has neither (then the replica's load stays stale).
pub fn parse_engine_load(text: &[u8]) -> Option<(f64, f64)> {
    let text = std::str::from_utf8(text).ok()?;
    let (mut waiting, mut kv) = (None::<f64>, None::<f64>);
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        let value = || {
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite())
        };
        if name == engine::NUM_REQUESTS_WAITING {
            if let Some(v) = value() {
                waiting = Some(waiting.unwrap_or(0.0) + v);
            }
        } else if name == engine::KV_CACHE_USAGE_PERC
            && let Some(v) = value()
        {
            kv = Some(kv.unwrap_or(0.0).max(v));
        }
    }
    if waiting.is_none() && kv.is_none() {
        return None;
    }
    Some((waiting.unwrap_or(0.0), kv.unwrap_or(0.0)))
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
}
