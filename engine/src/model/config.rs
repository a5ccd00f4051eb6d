//! The shape of a Llama-family model, whatever file it came from: GGUF metadata
//! (`super::gguf`) and Hugging Face `config.json` (`super::hf`) both end in this description,
//! and every backend runs from it.

use super::rope::RopeScaling;
use crate::{Error, Result};

/// How RoPE pairs the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Rotate adjacent pairs `(2i, 2i+1)`: GGUF `llama` tensors (the converter permuted Q/K).
    Adjacent,
    /// Rotate `(i, i + head_dim/2)`: Hugging Face safetensors and GGUF `qwen2`/`qwen3`.
    HalfSplit,
}

/// Everything about a model's shape the forward pass needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// The family (`llama`, `mistral`, `qwen2`, `qwen3`), as GGUF names it.
    pub architecture: String,
    pub num_layers: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU hidden layer.
    pub ffn_size: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    /// Width of one attention head (Qwen3: not `hidden_size / num_heads`).
    pub head_dim: usize,
    pub rope_base: f32,
    pub rope_layout: RopeLayout,
    /// Context extension of RoPE (Llama 3.1's `llama3`, `linear`, `yarn`).
    pub rope_scaling: RopeScaling,
    pub rms_norm_eps: f32,
    /// Longest sequence the model serves, in tokens.
    pub context_length: usize,
    pub vocab_size: usize,
    /// The output head reuses `token_embd` (no `output.weight` tensor).
    pub tied_embeddings: bool,
    /// Q, K and V projections have biases (Qwen2).
    pub qkv_bias: bool,
    /// Each head of Q and K is RMS-normalised before RoPE (Qwen3).
    pub qk_norm: bool,
}

impl ModelConfig {
    /// A Llama-shaped config with the optional features off (tests, simulated and random
    /// models); callers set the sizes that matter to them.
    pub fn llama(num_layers: usize, hidden_size: usize, ffn_size: usize, heads: usize) -> Self {
        Self {
            architecture: "llama".into(),
            num_layers,
            hidden_size,
            ffn_size,
            num_heads: heads,
            num_kv_heads: heads,
            head_dim: hidden_size.checked_div(heads).unwrap_or(0),
            rope_base: 10_000.0,
            rope_layout: RopeLayout::HalfSplit,
            rope_scaling: RopeScaling::None,
            rms_norm_eps: 1e-5,
            context_length: 2048,
            vocab_size: 32_000,
            tied_embeddings: false,
            qkv_bias: false,
            qk_norm: false,
        }
    }

    /// Checks the shape is one the forward can run (all sizes non-zero, heads divide evenly,
    /// blocks of 32 along every quantised row, an even head size for RoPE).
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Model(what));
        let sizes = [
            ("layers", self.num_layers),
            ("hidden size", self.hidden_size),
            ("FFN size", self.ffn_size),
            ("attention heads", self.num_heads),
            ("KV heads", self.num_kv_heads),
            ("head size", self.head_dim),
            ("context length", self.context_length),
            ("vocabulary size", self.vocab_size),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{}: the {name} is zero", self.architecture));
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return bad(format!(
                "{} attention heads are not a multiple of {} KV heads",
                self.num_heads, self.num_kv_heads
            ));
        }
        let q_dim = self.num_heads * self.head_dim;
        if !self.head_dim.is_multiple_of(2)
            || !self.hidden_size.is_multiple_of(32)
            || !self.ffn_size.is_multiple_of(32)
            || !q_dim.is_multiple_of(32)
        {
            return bad(format!(
                "width {}, FFN {} and heads × head size {q_dim} must be multiples of 32, and the \
                 head size {} even",
                self.hidden_size, self.ffn_size, self.head_dim
            ));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return bad(format!(
                "rms_norm_eps must be a positive number, got {}",
                self.rms_norm_eps
            ));
        }
        // A base of 1 or less gives every pair the same (or a rising) frequency, and YaRN's
        // correction range divides by ln(base): no real checkpoint has one.
        if !(self.rope_base.is_finite() && self.rope_base > 1.0) {
            return bad(format!(
                "rope base (rope_theta) must be a number greater than 1, got {}",
                self.rope_base
            ));
        }
        self.rope_scaling
            .validate(self.head_dim)
            .map_err(Error::Model)
    }

    /// Width of the keys (and values) of one token: `num_kv_heads * head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// Width of the queries of one token: `num_heads * head_dim`.
    pub fn q_dim(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// RoPE's inverse frequency per rotated pair, scaling applied: `[head_dim / 2]`.
    pub fn rope_inv_freqs(&self) -> Vec<f64> {
        self.rope_scaling
            .inv_freqs(self.head_dim, f64::from(self.rope_base))
    }
}
