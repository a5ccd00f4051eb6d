//! The weights of a Llama-family model, repacked from GGUF tensors with every shape checked.

use super::config::ModelConfig;
use crate::gguf::GgufFile;
use crate::quant::QMatrix;
use crate::{Error, Result};

/// One transformer block.
#[derive(Debug)]
pub struct Layer {
    /// `[hidden]`
    pub attn_norm: Vec<f32>,
    /// Q, K and V stacked: `[q_dim + 2 * kv_dim, hidden]` (one matmul instead of three).
    pub wqkv: QMatrix,
    /// Q, K, V biases stacked (`qwen2`): `[q_dim + 2 * kv_dim]`.
    pub bqkv: Option<Vec<f32>>,
    /// `[hidden, q_dim]`
    pub wo: QMatrix,
    /// `[hidden]`
    pub ffn_norm: Vec<f32>,
    /// Gate and up stacked: `[2 * ffn, hidden]`.
    pub w_gate_up: QMatrix,
    /// `[hidden, ffn]`
    pub w_down: QMatrix,
}

/// A loaded model: configuration and weights (copied out of the file, which may be closed).
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
}

impl Model {
    /// Loads every weight the config calls for from `file`.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let config = ModelConfig::from_gguf(file)?;
        let c = &config;
        let (h, q_dim, kv_dim) = (c.hidden_size, c.num_heads * c.head_dim, c.kv_dim());
        let token_embd = matrix(file, "token_embd.weight", c.vocab_size, h)?;
        let output = match c.tied_embeddings {
            true => None,
            false => Some(matrix(file, "output.weight", c.vocab_size, h)?),
        };
        let output_norm = vector(file, "output_norm.weight", h)?;
        let mut layers = Vec::new();
        for i in 0..c.num_layers {
            let name = |t: &str| format!("blk.{i}.{t}");
            let rows = [q_dim, kv_dim, kv_dim];
            let qkv = ["attn_q.weight", "attn_k.weight", "attn_v.weight"].map(&name);
            let bias = ["attn_q.bias", "attn_k.bias", "attn_v.bias"].map(&name);
            let bqkv = match file.tensor(&bias[0]) {
                None => None,
                Some(_) => {
                    let parts = [(&bias[0], q_dim), (&bias[1], kv_dim), (&bias[2], kv_dim)];
                    let parts: Result<Vec<_>> =
                        parts.iter().map(|(n, len)| vector(file, n, *len)).collect();
                    Some(parts?.concat())
                }
            };
            layers.push(Layer {
                attn_norm: vector(file, &name("attn_norm.weight"), h)?,
                wqkv: stacked(file, &qkv, &rows, h)?,
                bqkv,
                wo: matrix(file, &name("attn_output.weight"), h, q_dim)?,
                ffn_norm: vector(file, &name("ffn_norm.weight"), h)?,
                w_gate_up: stacked(
                    file,
                    &[name("ffn_gate.weight"), name("ffn_up.weight")],
                    &[c.ffn_size, c.ffn_size],
                    h,
                )?,
                w_down: matrix(file, &name("ffn_down.weight"), h, c.ffn_size)?,
            });
        }
        Ok(Self {
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

fn shape_error(name: &str, want: String, info_dims: &[u64]) -> Error {
    Error::Model(format!(
        "tensor {name}: expected shape {want}, found dims {info_dims:?}"
    ))
}

/// A `[rows, cols]` matrix (GGUF dims `[cols, rows]`).
fn matrix(file: &GgufFile, name: &str, rows: usize, cols: usize) -> Result<QMatrix> {
    let info = file
        .tensor(name)
        .ok_or_else(|| Error::Model(format!("tensor {name} is missing")))?;
    if info.dims != [cols as u64, rows as u64] {
        return Err(shape_error(name, format!("[{rows}, {cols}]"), &info.dims));
    }
    let bytes = file.tensor_data(name)?;
    QMatrix::from_ggml(info.ggml_type, bytes, rows, cols).map_err(|source| Error::Tensor {
        tensor: name.to_string(),
        source,
    })
}

/// Several matrices with the same input width and type, stacked along rows.
fn stacked(file: &GgufFile, names: &[String], rows: &[usize], cols: usize) -> Result<QMatrix> {
    let parts: Vec<QMatrix> = names
        .iter()
        .zip(rows)
        .map(|(n, &r)| matrix(file, n, r, cols))
        .collect::<Result<_>>()?;
    QMatrix::stack(&parts).ok_or_else(|| {
        Error::Model(format!(
            "tensors {names:?} have different widths and cannot be stacked"
        ))
    })
}

/// A `[len]` f32 vector (norm weights, biases) of any float type.
fn vector(file: &GgufFile, name: &str, len: usize) -> Result<Vec<f32>> {
    let info = file
        .tensor(name)
        .ok_or_else(|| Error::Model(format!("tensor {name} is missing")))?;
    if info.dims != [len as u64] {
        return Err(shape_error(name, format!("[{len}]"), &info.dims));
    }
    let mut out = vec![0f32; len];
    crate::quant::dequantize(info.ggml_type, file.tensor_data(name)?, &mut out).map_err(
        |source| Error::Tensor {
            tensor: name.to_string(),
            source,
        },
    )?;
    Ok(out)
}
