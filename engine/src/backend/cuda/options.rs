//! How the CUDA backend is set up, and the per-row parameters of its on-device sampler.

use super::prefill::PrefillAttention;

/// How the backend is set up (`serve`/`generate` flags map onto these).
#[derive(Debug, Clone)]
pub struct CudaOptions {
    /// GPU ordinal.
    pub device: usize,
    /// Token slots per KV block.
    pub block_size: usize,
    /// Fraction of the device's memory this process may use (`--gpu-memory-utilization`).
    pub gpu_memory_utilization: f64,
    /// Longest sequence served; default and upper bound: the model's context length.
    pub max_model_len: Option<usize>,
    /// Most sequences in one step (the largest decode graph).
    pub max_num_seqs: usize,
    /// Most tokens in one step (prefill chunks included).
    pub max_batch_tokens: usize,
    /// Capture decode steps into CUDA graphs.
    pub cuda_graphs: bool,
    /// Upper bound on KV blocks (default: as many as fit).
    pub max_kv_blocks: Option<usize>,
    /// The prefill attention kernel (`--prefill-attention`).
    pub prefill_attention: PrefillAttention,
}

impl Default for CudaOptions {
    fn default() -> Self {
        Self {
            device: 0,
            block_size: 16,
            gpu_memory_utilization: 0.9,
            max_model_len: None,
            max_num_seqs: 256,
            max_batch_tokens: 4096,
            cuda_graphs: true,
            max_kv_blocks: None,
            prefill_attention: PrefillAttention::default(),
        }
    }
}

/// Per-row parameters of the speed check's sampler (`sample_top_k_top_p`, with a grammar mask
/// when given). Served requests go through the shared specification instead
/// (`sampling::spec`, `device_sampler.rs`): the same draws as the host sampler's.
#[derive(Debug, Clone, Copy)]
pub struct DeviceSampling {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 means no top-k cut.
    pub top_k: u32,
    /// 1 means no top-p cut.
    pub top_p: f32,
    /// A uniform number in [0, 1) drawn by the caller's seeded generator.
    pub uniform: f32,
}
