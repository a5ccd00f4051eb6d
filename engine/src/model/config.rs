//! The shape of a Llama-family model, read from GGUF metadata.

use crate::gguf::GgufFile;
use crate::{Error, Result};

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

impl ModelConfig {
    /// Reads the shape of a Llama-family model (`llama`, `mistral`, `qwen2`) from GGUF
    /// metadata; every missing or inconsistent key is an error naming it.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let arch = file.get_str("general.architecture")?.to_string();
        let rope_layout = match arch.as_str() {
            "llama" | "mistral" => RopeLayout::Adjacent,
            "qwen2" => RopeLayout::HalfSplit,
            other => {
                return Err(Error::Model(format!(
                    "architecture {other:?} is not supported (supported: llama, mistral, qwen2)"
                )));
            }
        };
        let key = |k: &str| format!("{arch}.{k}");
        let usize_of = |k: &str| -> Result<usize> { Ok(file.get_u64(&key(k))? as usize) };
        let num_heads = usize_of("attention.head_count")?;
        let hidden_size = usize_of("embedding_length")?;
        let num_kv_heads = match file.get(&key("attention.head_count_kv")) {
            Some(_) => usize_of("attention.head_count_kv")?,
            None => num_heads,
        };
        let vocab_size = match file.get_array("tokenizer.ggml.tokens") {
            Ok(tokens) => tokens.len(),
            Err(_) => file
                .tensor("token_embd.weight")
                .and_then(|t| t.matrix_shape())
                .map_or(0, |s| s.0),
        };
        let rope_base = match file.get(&key("rope.freq_base")) {
            Some(_) => file.get_f32(&key("rope.freq_base"))?,
            None => 10000.0,
        };
        let config = Self {
            num_layers: usize_of("block_count")?,
            hidden_size,
            ffn_size: usize_of("feed_forward_length")?,
            num_heads,
            num_kv_heads,
            head_dim: hidden_size.checked_div(num_heads).unwrap_or(0),
            rope_base,
            rope_layout,
            rms_norm_eps: file.get_f32(&key("attention.layer_norm_rms_epsilon"))?,
            context_length: usize_of("context_length")?,
            vocab_size,
            tied_embeddings: file.tensor("output.weight").is_none(),
            architecture: arch,
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks the shape is one the forward can run (all sizes non-zero, heads divide evenly,
    /// blocks of 32 along every quantised row, an even head size for RoPE).
    pub fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::Model(what));
        let sizes = [
            ("block_count", self.num_layers),
            ("embedding_length", self.hidden_size),
            ("feed_forward_length", self.ffn_size),
            ("attention.head_count", self.num_heads),
            ("attention.head_count_kv", self.num_kv_heads),
            ("context_length", self.context_length),
            ("vocabulary size", self.vocab_size),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return bad(format!("{}.{name} is zero", self.architecture));
        }
        if !self.hidden_size.is_multiple_of(self.num_heads)
            || !self.num_heads.is_multiple_of(self.num_kv_heads)
        {
            return bad(format!(
                "{} heads and {} KV heads do not divide a width of {}",
                self.num_heads, self.num_kv_heads, self.hidden_size
            ));
        }
        if !self.head_dim.is_multiple_of(2)
            || !self.hidden_size.is_multiple_of(32)
            || !self.ffn_size.is_multiple_of(32)
        {
            return bad(format!(
                "width {}, FFN {} and head size {} must be multiples of 32, 32 and 2",
                self.hidden_size, self.ffn_size, self.head_dim
            ));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0 && self.rope_base > 0.0) {
            return bad(format!(
                "bad rms_norm_eps {} or rope base {}",
                self.rms_norm_eps, self.rope_base
            ));
        }
        Ok(())
    }

    /// Width of the keys (and values) of one token: `num_kv_heads * head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }
}
