//! How a server runs: where it listens, which model, and the batching and KV-cache limits.

use std::path::Path;

/// Everything `serve` needs; `Default` gives the documented defaults of
/// `tokenscale-engine serve`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    /// `hf://ORG/REPO[@REVISION][/FILE]`, a `.gguf` path, a checkpoint directory, or the
    /// test alias (`smollm2-135m`).
    pub model: String,
    pub host: String,
    pub port: u16,
    /// KV-cache capacity in tokens (rounded down to whole blocks).
    pub kv_cache_tokens: usize,
    /// Token slots per KV block.
    pub block_size: usize,
    /// Tokens (prefill plus decode) per forward step.
    pub max_batch_tokens: usize,
    /// Sequences per forward step.
    pub max_num_seqs: usize,
    /// Time per output token each running sequence should hold: the running set and each
    /// step's tokens are capped to what the measured step time allows; `None`: no target.
    pub tpot_target: Option<std::time::Duration>,
    /// How long running requests may take to finish after a shutdown signal, in seconds.
    pub drain_timeout_s: f64,
    /// The name clients put in `model`; default: the model alias or the file's stem.
    pub served_model_name: Option<String>,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: usize,
    /// Reuse KV blocks of shared prompt prefixes.
    pub enable_prefix_caching: bool,
    /// Cap on prompt plus completion tokens (default: the model's context).
    pub max_model_len: Option<usize>,
    /// Run the model on the CUDA backend (decided before loading by `--backend`).
    pub use_cuda: bool,
    /// Fraction of GPU memory the CUDA backend may use (weights, activations, KV cache).
    pub gpu_memory_utilization: f64,
    /// The CUDA backend's prefill attention kernel (`--prefill-attention`).
    pub prefill_attention: crate::backend::cuda::PrefillAttention,
    /// Key the OpenAI routes require (`Authorization: Bearer`); `None`: open.
    pub api_key: Option<String>,
    /// Time a connection may take to send a request's headers, the idle wait between
    /// keep-alive requests included; the connection is closed after, in seconds.
    pub header_timeout_s: f64,
    /// Time a request's body may take to arrive after its headers (408 after), in seconds.
    pub body_timeout_s: f64,
    /// Open connections at most; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Tool-call syntax (`hermes`, `llama3_json`, `mistral`); default: read from the template.
    pub tool_call_parser: Option<String>,
    /// Reasoning syntax (`qwen3`, `deepseek_r1`, `none`); default: read from the template.
    pub reasoning_parser: Option<String>,
    /// Speculative decoding (`--speculative`, `--num-speculative-tokens`,
    /// `--prompt-lookup-max`, `--prompt-lookup-min`).
    pub speculative: crate::spec::SpeculativeConfig,
    /// LoRA adapters served beside the model (`--lora`, `--max-loras`, `--max-lora-rank`).
    pub lora: crate::lora::LoraConfig,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            model: "smollm2-135m".into(),
            host: "127.0.0.1".into(),
            port: 8000,
            kv_cache_tokens: 32_768,
            block_size: 16,
            max_batch_tokens: 512,
            max_num_seqs: 128,
            tpot_target: None,
            drain_timeout_s: 30.0,
            served_model_name: None,
            max_body_bytes: 4 * 1024 * 1024,
            enable_prefix_caching: true,
            max_model_len: None,
            use_cuda: false,
            gpu_memory_utilization: 0.9,
            prefill_attention: crate::backend::cuda::PrefillAttention::default(),
            api_key: None,
            header_timeout_s: 30.0,
            body_timeout_s: 30.0,
            max_connections: 2048,
            tool_call_parser: None,
            reasoning_parser: None,
            speculative: crate::spec::SpeculativeConfig::default(),
            lora: crate::lora::LoraConfig::default(),
        }
    }
}

impl ServeConfig {
    /// The name clients use: `served_model_name`, else the Hub repository (`org/repo`, or the
    /// file's stem when one file of it is named), else the alias, else the file stem.
    pub fn served_model_name(&self) -> String {
        if let Some(name) = &self.served_model_name {
            return name.clone();
        }
        if let Some(Ok(source)) = tokenscale_common::hub_source::HubSource::parse(&self.model) {
            return match &source.file {
                Some(file) => Path::new(file)
                    .file_stem()
                    .map_or_else(|| file.clone(), |s| s.to_string_lossy().into_owned()),
                None => source.repo,
            };
        }
        let path = Path::new(&self.model);
        let is_gguf = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        match path.file_stem() {
            Some(stem) if is_gguf => stem.to_string_lossy().into_owned(),
            _ => self.model.clone(),
        }
    }

    /// KV blocks the pool holds.
    pub fn num_kv_blocks(&self) -> usize {
        self.kv_cache_tokens / self.block_size.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_served_name_comes_from_the_flag_the_alias_or_the_file() {
        let mut c = ServeConfig {
            model: "/models/SmolLM2-135M.Q4_1.gguf".into(),
            ..ServeConfig::default()
        };
        assert_eq!(c.served_model_name(), "SmolLM2-135M.Q4_1");
        c.model = "smollm2-135m".into();
        assert_eq!(c.served_model_name(), "smollm2-135m");
        c.model = "hf://Qwen/Qwen3-8B@main".into();
        assert_eq!(c.served_model_name(), "Qwen/Qwen3-8B");
        c.model = "hf://org/repo-GGUF/m.Q4_1.gguf".into();
        assert_eq!(c.served_model_name(), "m.Q4_1");
        c.served_model_name = Some("chat".into());
        assert_eq!(c.served_model_name(), "chat");
    }
}
