//! How a server runs: where it listens, which model, and the batching and KV-cache limits.

use std::path::Path;

/// Everything `serve` needs; `Default` gives the documented defaults of
/// `tokenscale-engine serve`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    /// A `.gguf` path or a model alias (`smollm2-135m`).
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
            drain_timeout_s: 30.0,
            served_model_name: None,
            max_body_bytes: 4 * 1024 * 1024,
            enable_prefix_caching: true,
            max_model_len: None,
            use_cuda: false,
            gpu_memory_utilization: 0.9,
        }
    }
}

impl ServeConfig {
    /// The name clients use: `served_model_name`, else the alias, else the file stem.
    pub fn served_model_name(&self) -> String {
        if let Some(name) = &self.served_model_name {
            return name.clone();
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
        c.served_model_name = Some("chat".into());
        assert_eq!(c.served_model_name(), "chat");
    }
}
