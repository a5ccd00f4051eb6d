//! What the server says about itself: `/v1/models` and, where it has one, `/metrics`
//! (backend, simulated or not, KV block size and count, generated-token counter).

use http_body_util::{BodyExt, Full};

use super::client::HttpClient;
use super::report::{Hardware, ServerInfo};
use tokenscale_common::metrics::engine as names;
use tokenscale_common::metrics::gateway;
use tokenscale_scaling::metrics_source::text_format;

/// GETs `path` and returns the body, or `None` on any failure (servers need not have it).
pub async fn get_text(client: &HttpClient, base_url: &str, path: &str) -> Option<String> {
    let request = http::Request::get(format!("{base_url}{path}"))
        .body(Full::default())
        .ok()?;
    let response =
        tokio::time::timeout(std::time::Duration::from_secs(10), client.request(request))
            .await
            .ok()?
            .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let bytes = response.into_body().collect().await.ok()?.to_bytes();
    String::from_utf8(bytes.to_vec()).ok()
}

/// Reads `/v1/models` from `base_url` and the Prometheus text at `metrics_url`.
pub async fn read(client: &HttpClient, base_url: &str, metrics_url: &str) -> ServerInfo {
    let mut info = ServerInfo {
        metrics_url: metrics_url.to_string(),
        ..ServerInfo::default()
    };
    if let Some(text) = get_text(client, base_url, "/v1/models").await
        && let Ok(list) = serde_json::from_str::<serde_json::Value>(&text)
    {
        let cards = list["data"].as_array().cloned().unwrap_or_default();
        info.models = cards
            .iter()
            .filter_map(|c| c["id"].as_str().map(String::from))
            .collect();
        info.max_model_len = cards.first().and_then(|c| c["max_model_len"].as_u64());
    }
    if let Some(text) = get_text(client, metrics_url, "").await {
        apply_metrics(&mut info, &text);
    }
    info
}

/// Fills what the exposition `text` tells.
pub fn apply_metrics(info: &mut ServerInfo, text: &str) {
    for sample in text_format::parse(text).samples {
        if sample.name == names::BACKEND_INFO {
            info.backend = sample.label("backend").map(String::from);
            info.simulated = sample.label("simulated").map(|s| s == "true");
        } else if sample.name == names::CACHE_CONFIG_INFO {
            info.block_size = sample.label("block_size").and_then(|v| v.parse().ok());
            info.kv_blocks = sample.label("num_gpu_blocks").and_then(|v| v.parse().ok());
        }
    }
}

/// Sum of `vllm:generation_tokens_total` over all its series (an engine), else of
/// `tokenscale_gateway_generation_tokens_total` (a gateway's admin listener).
pub fn generation_tokens(text: &str) -> Option<f64> {
    let samples = text_format::parse(text).samples;
    [
        names::GENERATION_TOKENS_TOTAL,
        gateway::GENERATION_TOKENS_TOTAL,
    ]
    .into_iter()
    .find_map(|name| {
        let values: Vec<f64> = samples
            .iter()
            .filter(|s| s.name == name)
            .map(|s| s.value)
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    })
}

/// The client machine: CPU model (from `/proc/cpuinfo` where there is one) and cores.
pub fn hardware() -> Hardware {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cpu_cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Hardware {
        cpu_model,
        cpu_cores,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn backend_blocks_and_tokens_come_from_the_metrics() {
        let text = "# TYPE x gauge\ntokenscale_engine_backend_info{model_name=\"m\",backend=\"sim\",simulated=\"true\"} 1\nvllm:cache_config_info{model_name=\"m\",block_size=\"16\",num_gpu_blocks=\"2048\"} 1\nvllm:generation_tokens_total{model_name=\"m\"} 42\n";
        let mut info = ServerInfo::default();
        apply_metrics(&mut info, text);
        assert_eq!(info.backend.as_deref(), Some("sim"));
        assert_eq!(info.simulated, Some(true));
        assert_eq!((info.block_size, info.kv_blocks), (Some(16), Some(2048)));
        assert_eq!(generation_tokens(text), Some(42.0));
        assert_eq!(generation_tokens("other 1\n"), None);
    }

    #[test]
    fn a_gateways_admin_port_gives_its_generated_tokens() {
        let text = "tokenscale_gateway_generation_tokens_total{model_name=\"a\"} 40\ntokenscale_gateway_generation_tokens_total{model_name=\"b\"} 2\n";
        assert_eq!(generation_tokens(text), Some(42.0));
    }
}
