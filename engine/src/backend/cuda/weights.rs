//! Model weights on the device, in bf16: read from GGUF through the engine's own reader and
//! dequantisation (`gguf`, `quant`), fused where one GEMM can do the work of several
//! (q|k|v, gate|up), and uploaded tensor by tensor so the host never holds the whole model.

use cudarc::driver::CudaSlice;
use half::bf16;

use super::device::Gpu;
use super::{Error, Result};
use crate::gguf::GgufFile;
use crate::model::ModelConfig;

/// One transformer block's weights.
pub struct LayerWeights {
    pub attn_norm: CudaSlice<f32>, // [hidden]
    pub qkv: CudaSlice<bf16>,      // [(heads + 2 kv_heads) * head_dim, hidden]
    pub o: CudaSlice<bf16>,        // [hidden, heads * head_dim]
    pub ffn_norm: CudaSlice<f32>,  // [hidden]
    pub gate_up: CudaSlice<bf16>,  // [2 * ffn, hidden]
    pub down: CudaSlice<bf16>,     // [hidden, ffn]
}

/// All weights of a Llama-family model on the device.
pub struct DeviceWeights {
    pub embed: CudaSlice<bf16>, // [vocab, hidden]
    pub layers: Vec<LayerWeights>,
    pub final_norm: CudaSlice<f32>, // [hidden]
    /// `[vocab, hidden]`, or `None` when the head is tied to `embed`.
    pub head: Option<CudaSlice<bf16>>,
    /// Bytes of all matrices and vectors (what one decode step streams at least once).
    pub bytes: usize,
}

/// Rows-major f32 contents of GGUF tensor `name`, checked to be `[rows, cols]`.
pub fn tensor_f32(gguf: &GgufFile, name: &str, rows: usize, cols: usize) -> Result<Vec<f32>> {
    let info = gguf
        .tensor(name)
        .ok_or_else(|| Error::Model(format!("tensor {name} is missing")))?;
    if info.matrix_shape() != Some((rows, cols)) {
        return Err(Error::Model(format!(
            "tensor {name} has dims {:?}, expected [{rows}, {cols}]",
            info.dims
        )));
    }
    let bytes = gguf
        .tensor_data(name)
        .map_err(|e| Error::Model(e.to_string()))?;
    let mut out = vec![0.0f32; rows * cols];
    crate::quant::dequantize(info.ggml_type, bytes, &mut out)
        .map_err(|e| Error::Model(format!("tensor {name}: {e}")))?;
    Ok(out)
}

/// Tensor `name` as bf16 (round to nearest even).
pub fn tensor_bf16(gguf: &GgufFile, name: &str, rows: usize, cols: usize) -> Result<Vec<bf16>> {
    Ok(tensor_f32(gguf, name, rows, cols)?
        .into_iter()
        .map(bf16::from_f32)
        .collect())
}

/// Several tensors of equal width stacked row-wise into one bf16 matrix.
fn stacked_bf16(gguf: &GgufFile, parts: &[(String, usize)], cols: usize) -> Result<Vec<bf16>> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.1).sum::<usize>() * cols);
    for (name, rows) in parts {
        out.extend(tensor_bf16(gguf, name, *rows, cols)?);
    }
    Ok(out)
}

impl DeviceWeights {
    /// Loads every weight of `cfg`'s model from `gguf` onto `gpu`.
    pub fn load(gpu: &Gpu, gguf: &GgufFile, cfg: &ModelConfig) -> Result<Self> {
        let (h, hd, f) = (cfg.hidden_size, cfg.head_dim, cfg.ffn_size);
        let (q_rows, kv_rows) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
        if gguf.tensor("blk.0.attn_q.bias").is_some() {
            return Err(Error::Model(
                "attention biases are not supported by the CUDA backend".into(),
            ));
        }
        let mut w = Uploader { gpu, bytes: 0 };
        let embed = w.bf16(tensor_bf16(gguf, "token_embd.weight", cfg.vocab_size, h)?)?;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            let name = |t: &str| format!("blk.{l}.{t}.weight");
            let qkv = [
                (name("attn_q"), q_rows),
                (name("attn_k"), kv_rows),
                (name("attn_v"), kv_rows),
            ];
            let gate_up = [(name("ffn_gate"), f), (name("ffn_up"), f)];
            layers.push(LayerWeights {
                attn_norm: w.f32(tensor_f32(gguf, &name("attn_norm"), 1, h)?)?,
                qkv: w.bf16(stacked_bf16(gguf, &qkv, h)?)?,
                o: w.bf16(tensor_bf16(gguf, &name("attn_output"), h, q_rows)?)?,
                ffn_norm: w.f32(tensor_f32(gguf, &name("ffn_norm"), 1, h)?)?,
                gate_up: w.bf16(stacked_bf16(gguf, &gate_up, h)?)?,
                down: w.bf16(tensor_bf16(gguf, &name("ffn_down"), h, f)?)?,
            });
        }
        let final_norm = w.f32(tensor_f32(gguf, "output_norm.weight", 1, h)?)?;
        let head = if cfg.tied_embeddings {
            None
        } else {
            Some(w.bf16(tensor_bf16(gguf, "output.weight", cfg.vocab_size, h)?)?)
        };
        Ok(Self {
            embed,
            layers,
            final_norm,
            head,
            bytes: w.bytes,
        })
    }

    /// Random weights of `cfg`'s shape (for speed measurements of model shapes without a
    /// file): matrices uniform in ±1/√cols, norms 1. Same `seed`, same weights.
    pub fn random(gpu: &Gpu, cfg: &ModelConfig, seed: u64) -> Result<Self> {
        let (h, hd, f) = (cfg.hidden_size, cfg.head_dim, cfg.ffn_size);
        let qkv_rows = (cfg.num_heads + 2 * cfg.num_kv_heads) * hd;
        let mut rng = seed | 1;
        let mut w = Uploader { gpu, bytes: 0 };
        let mut matrix = |w: &mut Uploader<'_>, rows: usize, cols: usize| {
            let scale = 1.0 / (cols as f32).sqrt();
            let data: Vec<bf16> = (0..rows * cols)
                .map(|_| bf16::from_f32(scale * uniform(&mut rng)))
                .collect();
            w.bf16(data)
        };
        let embed = matrix(&mut w, cfg.vocab_size, h)?;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for _ in 0..cfg.num_layers {
            layers.push(LayerWeights {
                attn_norm: w.f32(vec![1.0; h])?,
                qkv: matrix(&mut w, qkv_rows, h)?,
                o: matrix(&mut w, h, cfg.num_heads * hd)?,
                ffn_norm: w.f32(vec![1.0; h])?,
                gate_up: matrix(&mut w, 2 * f, h)?,
                down: matrix(&mut w, h, f)?,
            });
        }
        let final_norm = w.f32(vec![1.0; h])?;
        let head = if cfg.tied_embeddings {
            None
        } else {
            Some(matrix(&mut w, cfg.vocab_size, h)?)
        };
        Ok(Self {
            embed,
            layers,
            final_norm,
            head,
            bytes: w.bytes,
        })
    }

    /// The output head: `head`, or the embedding table when tied.
    pub fn head(&self) -> &CudaSlice<bf16> {
        self.head.as_ref().unwrap_or(&self.embed)
    }
}

/// Copies host vectors to the device and counts the bytes.
struct Uploader<'a> {
    gpu: &'a Gpu,
    bytes: usize,
}

impl Uploader<'_> {
    fn bf16(&mut self, data: Vec<bf16>) -> Result<CudaSlice<bf16>> {
        self.bytes += data.len() * 2;
        Ok(self.gpu.stream.clone_htod(&data)?)
    }

    fn f32(&mut self, data: Vec<f32>) -> Result<CudaSlice<f32>> {
        self.bytes += data.len() * 4;
        Ok(self.gpu.stream.clone_htod(&data)?)
    }
}

/// xorshift64*: a uniform number in [−1, 1).
fn uniform(state: &mut u64) -> f32 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    let bits = state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40; // 24 random bits
    bits as f32 / (1u64 << 23) as f32 - 1.0
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::gguf::{GgmlType, GgufBuilder};

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn tensors_load_as_row_major_bf16_with_checked_shapes() {
        let data = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2 rows, 3 cols]
        let file = GgufBuilder::new()
            .tensor("w", &[3, 2], GgmlType::F32, f32_bytes(&data))
            .build();
        let gguf = GgufFile::from_vec(file).unwrap();
        let w = tensor_bf16(&gguf, "w", 2, 3).unwrap();
        assert_eq!(w.iter().map(|x| x.to_f32()).collect::<Vec<_>>(), data);
        let err = tensor_bf16(&gguf, "w", 3, 2).unwrap_err().to_string();
        assert!(err.contains("expected [3, 2]"), "{err}");
        let err = tensor_bf16(&gguf, "nope", 2, 3).unwrap_err().to_string();
        assert!(err.contains("nope is missing"), "{err}");
    }

    #[test]
    fn k_quant_tensors_load_as_the_bf16_of_their_exact_values() {
        // The device weights come from the same host dequantisation as the CPU backend's, so
        // every type the CPU reads loads on CUDA too (runs without a GPU: host side only).
        let mut s = 7;
        let x: Vec<f32> = (0..4 * 512).map(|_| uniform(&mut s) * 0.1).collect();
        for ty in [
            GgmlType::Q4K,
            GgmlType::Q5K,
            GgmlType::Q6K,
            GgmlType::Q3K,
            GgmlType::Q2K,
            GgmlType::Q5_0,
            GgmlType::Q5_1,
        ] {
            let bytes = crate::quant::quantize(ty, &x).unwrap();
            let mut exact = vec![0f32; x.len()];
            crate::quant::dequantize(ty, &bytes, &mut exact).unwrap();
            let file = GgufBuilder::new().tensor("w", &[512, 4], ty, bytes).build();
            let gguf = GgufFile::from_vec(file).unwrap();
            let w = tensor_bf16(&gguf, "w", 4, 512).unwrap();
            let want: Vec<bf16> = exact.iter().map(|&v| bf16::from_f32(v)).collect();
            assert_eq!(w, want, "{ty}");
        }
    }

    #[test]
    fn random_numbers_are_uniform_in_the_unit_interval() {
        let mut s = 42;
        let xs: Vec<f32> = (0..10_000).map(|_| uniform(&mut s)).collect();
        assert!(xs.iter().all(|x| (-1.0..1.0).contains(x)));
        let mean = xs.iter().sum::<f32>() / xs.len() as f32;
        assert!(mean.abs() < 0.05, "{mean}");
    }
}
