//! The weights of a Llama-family model for the CPU backend, read from any [`TensorSource`]
//! with every shape checked: quantised GGUF tensors repacked into kernel blocks, safetensors
//! f32/f16/bf16 tensors used in place from the mapped files (see `quant::FloatRows`).

use super::config::ModelConfig;
use super::tensors::{DType, LayerWeight, TensorSource, TensorView, Weight};
use crate::gguf::GgmlType;
use crate::quant::{FloatRows, QMatrix};
use crate::{Error, Result};

/// One transformer block.
#[derive(Debug)]
pub struct Layer {
    /// `[hidden]`
    pub attn_norm: Vec<f32>,
    /// Q, K and V stacked: `[q_dim + 2 * kv_dim, hidden]` (one matmul instead of three).
    pub wqkv: QMatrix,
    /// Q, K, V biases stacked (Qwen2): `[q_dim + 2 * kv_dim]`.
    pub bqkv: Option<Vec<f32>>,
    /// Per-head RMSNorm weights of Q and K (Qwen3): `[head_dim]` each.
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    /// `[hidden, q_dim]`
    pub wo: QMatrix,
    /// `[hidden]`
    pub ffn_norm: Vec<f32>,
    /// Gate and up stacked: `[2 * ffn, hidden]`.
    pub w_gate_up: QMatrix,
    /// `[hidden, ffn]`
    pub w_down: QMatrix,
}

/// A loaded model: configuration and weights (owning, or sharing the checkpoint's mapping, so
/// the checkpoint may be dropped).
#[derive(Debug)]
pub struct Model {
    pub config: ModelConfig,
    /// `[vocab, hidden]`
    pub token_embd: QMatrix,
    /// `[hidden]`
    pub output_norm: Vec<f32>,
    /// `[vocab, hidden]`; `None` when the head is tied to `token_embd`.
    pub output: Option<QMatrix>,
    pub layers: Vec<Layer>,
    /// RoPE's inverse frequency per rotated pair, scaling applied: `[head_dim / 2]`.
    pub rope_inv_freqs: Vec<f64>,
}

impl Model {
    /// Loads every weight `config` calls for from `source`.
    pub fn load(config: ModelConfig, source: &dyn TensorSource) -> Result<Self> {
        let c = &config;
        let (h, q_dim, kv_dim) = (c.hidden_size, c.q_dim(), c.kv_dim());
        let token_embd = matrix(source, Weight::Embed, c.vocab_size, h)?;
        let output = match c.tied_embeddings {
            true => None,
            false => Some(matrix(source, Weight::Head, c.vocab_size, h)?),
        };
        let output_norm = vector(source, Weight::FinalNorm, h)?;
        let mut layers = Vec::with_capacity(c.num_layers);
        for l in 0..c.num_layers {
            use LayerWeight::*;
            let w = |lw| Weight::Layer(l, lw);
            let bqkv = match c.qkv_bias {
                false => None,
                true => Some(
                    [
                        vector(source, w(QBias), q_dim)?,
                        vector(source, w(KBias), kv_dim)?,
                        vector(source, w(VBias), kv_dim)?,
                    ]
                    .concat(),
                ),
            };
            let (q_norm, k_norm) = match c.qk_norm {
                false => (None, None),
                true => (
                    Some(vector(source, w(QNorm), c.head_dim)?),
                    Some(vector(source, w(KNorm), c.head_dim)?),
                ),
            };
            layers.push(Layer {
                attn_norm: vector(source, w(AttnNorm), h)?,
                wqkv: stacked(source, &[(w(Q), q_dim), (w(K), kv_dim), (w(V), kv_dim)], h)?,
                bqkv,
                q_norm,
                k_norm,
                wo: matrix(source, w(O), h, q_dim)?,
                ffn_norm: vector(source, w(FfnNorm), h)?,
                w_gate_up: stacked(source, &[(w(Gate), c.ffn_size), (w(Up), c.ffn_size)], h)?,
                w_down: matrix(source, w(Down), h, c.ffn_size)?,
            });
        }
        Ok(Self {
            rope_inv_freqs: config.rope_inv_freqs(),
            config,
            token_embd,
            output_norm,
            output,
            layers,
        })
    }

    /// The output head: `output.weight`, or `token_embd` when tied. `[vocab, hidden]`
    pub fn head(&self) -> &QMatrix {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}

/// The `[rows, cols]` matrix of `weight`: used in place when the checkpoint shares its
/// mapping and stores a float type, else repacked (quantised GGUF blocks) or widened.
fn matrix(source: &dyn TensorSource, weight: Weight, rows: usize, cols: usize) -> Result<QMatrix> {
    let t = source.require(weight)?;
    t.expect_dims(&[rows, cols])?;
    let tensor_error = |t: &TensorView<'_>, source| Error::Tensor {
        tensor: t.name.clone(),
        source,
    };
    let float = match t.dtype {
        DType::F32 => Some(GgmlType::F32),
        DType::F16 => Some(GgmlType::F16),
        DType::BF16 => Some(GgmlType::BF16),
        DType::Ggml(_) => None,
    };
    if let (Some(ty), Some((bytes, range))) = (float, t.shared.clone()) {
        let rows = FloatRows::new(ty, rows, cols, bytes, range).map_err(|e| tensor_error(&t, e))?;
        return Ok(QMatrix::from_float(rows));
    }
    let ty = match t.dtype {
        DType::Ggml(ty) => ty,
        _ => float.unwrap_or(GgmlType::F32),
    };
    QMatrix::from_ggml(ty, t.bytes, rows, cols).map_err(|e| tensor_error(&t, e))
}

/// Several matrices with the same input width and type, stacked along rows.
fn stacked(source: &dyn TensorSource, parts: &[(Weight, usize)], cols: usize) -> Result<QMatrix> {
    let mats: Vec<QMatrix> = parts
        .iter()
        .map(|&(w, rows)| matrix(source, w, rows, cols))
        .collect::<Result<_>>()?;
    QMatrix::stack(&mats).ok_or_else(|| {
        let names: Vec<String> = parts.iter().map(|&(w, _)| source.name_of(w)).collect();
        Error::Model(format!(
            "tensors {names:?} have different widths and cannot be stacked"
        ))
    })
}

/// A `[len]` f32 vector (norm weights, biases) of any float type.
fn vector(source: &dyn TensorSource, weight: Weight, len: usize) -> Result<Vec<f32>> {
    let t = source.require(weight)?;
    t.expect_dims(&[len])?;
    t.to_f32()
}
