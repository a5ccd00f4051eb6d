//! The weights of a Llama-family model named once ([`Weight`]), with each format's spelling,
//! and [`TensorSource`]: what a checkpoint (GGUF file, safetensors shards) offers the weight
//! loaders of the backends, so no loader knows which format it reads.

use crate::gguf::GgmlType;
use crate::{Error, Result};

/// One weight of one transformer block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerWeight {
    AttnNorm,
    Q,
    K,
    V,
    QBias,
    KBias,
    VBias,
    /// Qwen3's per-head RMSNorm weights on queries and keys, `[head_dim]`.
    QNorm,
    KNorm,
    O,
    FfnNorm,
    Gate,
    Up,
    Down,
}

/// One weight of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    /// Token embeddings, `[vocab, hidden]`.
    Embed,
    /// The output head, `[vocab, hidden]` (absent when tied to the embeddings).
    Head,
    /// The norm before the head, `[hidden]`.
    FinalNorm,
    /// Rotary frequency factors (GGUF `rope_freqs`, `[head_dim / 2]`).
    RopeFreqs,
    Layer(usize, LayerWeight),
}

impl Weight {
    /// The tensor's name in a GGUF file (llama.cpp's naming).
    pub fn gguf_name(self) -> String {
        use LayerWeight::*;
        let layer = |l: usize, t: &str| format!("blk.{l}.{t}");
        match self {
            Self::Embed => "token_embd.weight".into(),
            Self::Head => "output.weight".into(),
            Self::FinalNorm => "output_norm.weight".into(),
            Self::RopeFreqs => "rope_freqs.weight".into(),
            Self::Layer(l, w) => layer(
                l,
                match w {
                    AttnNorm => "attn_norm.weight",
                    Q => "attn_q.weight",
                    K => "attn_k.weight",
                    V => "attn_v.weight",
                    QBias => "attn_q.bias",
                    KBias => "attn_k.bias",
                    VBias => "attn_v.bias",
                    QNorm => "attn_q_norm.weight",
                    KNorm => "attn_k_norm.weight",
                    O => "attn_output.weight",
                    FfnNorm => "ffn_norm.weight",
                    Gate => "ffn_gate.weight",
                    Up => "ffn_up.weight",
                    Down => "ffn_down.weight",
                },
            ),
        }
    }

    /// The tensor's name in a Hugging Face checkpoint (`transformers`' naming).
    pub fn hf_name(self) -> String {
        use LayerWeight::*;
        match self {
            Self::Embed => "model.embed_tokens.weight".into(),
            Self::Head => "lm_head.weight".into(),
            Self::FinalNorm => "model.norm.weight".into(),
            // Hugging Face checkpoints carry the scaling in config.json, never as a tensor.
            Self::RopeFreqs => "rope_freqs".into(),
            Self::Layer(l, w) => {
                let t = match w {
                    AttnNorm => "input_layernorm.weight",
                    Q => "self_attn.q_proj.weight",
                    K => "self_attn.k_proj.weight",
                    V => "self_attn.v_proj.weight",
                    QBias => "self_attn.q_proj.bias",
                    KBias => "self_attn.k_proj.bias",
                    VBias => "self_attn.v_proj.bias",
                    QNorm => "self_attn.q_norm.weight",
                    KNorm => "self_attn.k_norm.weight",
                    O => "self_attn.o_proj.weight",
                    FfnNorm => "post_attention_layernorm.weight",
                    Gate => "mlp.gate_proj.weight",
                    Up => "mlp.up_proj.weight",
                    Down => "mlp.down_proj.weight",
                };
                format!("model.layers.{l}.{t}")
            }
        }
    }
}

/// How a stored tensor's elements are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DType {
    F32,
    F16,
    BF16,
    /// A GGUF block format (quantised or not).
    Ggml(GgmlType),
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::F32 => f.write_str("F32"),
            Self::F16 => f.write_str("F16"),
            Self::BF16 => f.write_str("BF16"),
            Self::Ggml(t) => write!(f, "{t}"),
        }
    }
}

pub use crate::quant::SharedBytes;

/// A tensor as a checkpoint stores it.
#[derive(Clone)]
pub struct TensorView<'a> {
    /// Its name in the file (for messages).
    pub name: String,
    pub dtype: DType,
    /// Row-major shape: `[rows, cols]` for a matrix, `[len]` for a vector.
    pub dims: Vec<usize>,
    /// The raw little-endian bytes.
    pub bytes: &'a [u8],
    /// The same bytes as a shareable range of a mapping that outlives the checkpoint, when the
    /// format allows weights to be used in place (safetensors): `(mapping, byte range)`.
    pub shared: Option<(SharedBytes, std::ops::Range<usize>)>,
}

impl std::fmt::Debug for TensorView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorView")
            .field("name", &self.name)
            .field("dtype", &self.dtype)
            .field("dims", &self.dims)
            .finish_non_exhaustive()
    }
}

impl TensorView<'_> {
    /// Checks the shape is `want` (row-major), naming the tensor otherwise.
    pub fn expect_dims(&self, want: &[usize]) -> Result<()> {
        if self.dims != want {
            return Err(Error::Model(format!(
                "tensor {}: expected shape {want:?}, found {:?}",
                self.name, self.dims
            )));
        }
        Ok(())
    }

    /// The elements as f32 (norm weights, biases, small tensors), any float or block type.
    pub fn to_f32(&self) -> Result<Vec<f32>> {
        let len = self.dims.iter().product();
        let mut out = vec![0f32; len];
        let ty = match self.dtype {
            DType::F32 => GgmlType::F32,
            DType::F16 => GgmlType::F16,
            DType::BF16 => GgmlType::BF16,
            DType::Ggml(t) => t,
        };
        crate::quant::dequantize(ty, self.bytes, &mut out).map_err(|source| Error::Tensor {
            tensor: self.name.clone(),
            source,
        })?;
        Ok(out)
    }
}

/// A checkpoint's tensors, looked up by [`Weight`].
pub trait TensorSource {
    /// The tensor of `weight`, or `None` when the checkpoint has none (a missing *required*
    /// weight is the loader's error to report, since only it knows what is required).
    fn tensor(&self, weight: Weight) -> Result<Option<TensorView<'_>>>;

    /// The name of `weight` in this format (for messages).
    fn name_of(&self, weight: Weight) -> String;

    /// The tensor of `weight`, or an error naming it.
    fn require(&self, weight: Weight) -> Result<TensorView<'_>> {
        self.tensor(weight)?
            .ok_or_else(|| Error::Model(format!("tensor {} is missing", self.name_of(weight))))
    }
}

impl<T: TensorSource + ?Sized> TensorSource for &T {
    fn tensor(&self, weight: Weight) -> Result<Option<TensorView<'_>>> {
        (**self).tensor(weight)
    }

    fn name_of(&self, weight: Weight) -> String {
        (**self).name_of(weight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_each_format() {
        let q = Weight::Layer(3, LayerWeight::Q);
        assert_eq!(q.gguf_name(), "blk.3.attn_q.weight");
        assert_eq!(q.hf_name(), "model.layers.3.self_attn.q_proj.weight");
        let n = Weight::Layer(0, LayerWeight::KNorm);
        assert_eq!(n.gguf_name(), "blk.0.attn_k_norm.weight");
        assert_eq!(n.hf_name(), "model.layers.0.self_attn.k_norm.weight");
        assert_eq!(Weight::Head.hf_name(), "lm_head.weight");
        assert_eq!(Weight::FinalNorm.gguf_name(), "output_norm.weight");
    }
}
