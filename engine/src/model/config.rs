//! The shape of a Llama-family model, read from GGUF metadata.

/// How RoPE pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Rotate adjacent pairs `(2i, 2i+1)`: GGUF `llama` tensors (the converter permuted Q/K).
    Adjacent,
    /// Rotate `(i, i + head_dim/2)`: Hugging Face safetensors and GGUF `qwen2`.
    HalfSplit,
}

/// Everything about a model's shape the forward pass needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// `general.architecture` (`llama`, `qwen2`, …).
    pub architecture: String,
    pub num_layers: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU hidden layer.
    pub ffn_size: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rope_base: f32,
    pub rope_layout: RopeLayout,
    pub rms_norm_eps: f32,
    /// Longest sequence the model was trained for, in tokens.
    pub context_length: usize,
    pub vocab_size: usize,
    /// The output head reuses `token_embd` (no `output.weight` tensor).
    pub tied_embeddings: bool,
}
