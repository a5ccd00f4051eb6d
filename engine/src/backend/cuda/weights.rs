//! Model weights on the device, in bf16: bf16 checkpoint tensors (safetensors) are uploaded as
//! they are stored, anything else (GGUF blocks, f16, f32) is widened through the engine's own
//! dequantisation and rounded to bf16, tensor by tensor, so the host never holds the whole
//! model. Matrices one GEMM can serve together are fused (q|k|v, gate|up) by uploading each
//! part into its rows of one device buffer.

use cudarc::driver::CudaSlice;
use half::bf16;

use super::device::Gpu;
use super::{Error, Result};
use crate::model::{DType, LayerWeight, ModelConfig, TensorSource, TensorView, Weight};

/// One transformer block's weights.
pub struct LayerWeights {
    pub attn_norm: CudaSlice<f32>,        // [hidden]
    pub qkv: CudaSlice<bf16>,             // [(heads + 2 kv_heads) * head_dim, hidden]
    pub qkv_bias: Option<CudaSlice<f32>>, // [(heads + 2 kv_heads) * head_dim] (Qwen2)
    pub q_norm: Option<CudaSlice<f32>>,   // [head_dim] (Qwen3)
    pub k_norm: Option<CudaSlice<f32>>,   // [head_dim] (Qwen3)
    pub o: CudaSlice<bf16>,               // [hidden, heads * head_dim]
    pub ffn_norm: CudaSlice<f32>,         // [hidden]
    pub gate_up: CudaSlice<bf16>,         // [2 * ffn, hidden]
    pub down: CudaSlice<bf16>,            // [hidden, ffn]
}

/// All weights of a Llama-family model on the device.
pub struct DeviceWeights {
    pub embed: CudaSlice<bf16>, // [vocab, hidden]
    pub layers: Vec<LayerWeights>,
    pub final_norm: CudaSlice<f32>, // [hidden]
    /// `[vocab, hidden]`, or `None` when the head is tied to `embed`.
    pub head: Option<CudaSlice<bf16>>,
    /// RoPE's inverse frequency per rotated pair, scaling applied: `[head_dim / 2]`.
    pub rope_inv_freqs: CudaSlice<f64>,
    /// Bytes of all matrices and vectors (what one decode step streams at least once).
    pub bytes: usize,
}

/// The elements of `t` as bf16: the stored bytes when they are bf16 (no conversion), else
/// widened to f32 and rounded to nearest even.
pub fn tensor_bf16(t: &TensorView<'_>) -> Result<Vec<bf16>> {
    if t.dtype == DType::BF16 {
        return Ok(t
            .bytes
            .chunks_exact(2)
            .map(|b| bf16::from_le_bytes([b[0], b[1]]))
            .collect());
    }
    Ok(tensor_f32(t)?.into_iter().map(bf16::from_f32).collect())
}

/// The elements of `t` as f32 (any float or block type).
pub fn tensor_f32(t: &TensorView<'_>) -> Result<Vec<f32>> {
    t.to_f32().map_err(|e| Error::Model(e.to_string()))
}

impl DeviceWeights {
    /// Loads every weight of `cfg`'s model from `source` onto `gpu`.
    pub fn load(gpu: &Gpu, source: &dyn TensorSource, cfg: &ModelConfig) -> Result<Self> {
        let (h, hd, f) = (cfg.hidden_size, cfg.head_dim, cfg.ffn_size);
        let (q_rows, kv_rows) = (cfg.q_dim(), cfg.kv_dim());
        let mut w = Uploader {
            gpu,
            source,
            bytes: 0,
        };
        let embed = w.matrix(&[(Weight::Embed, cfg.vocab_size)], h)?;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            use LayerWeight::*;
            let at = |lw| Weight::Layer(l, lw);
            let qkv = [(at(Q), q_rows), (at(K), kv_rows), (at(V), kv_rows)];
            let biases = [
                (at(QBias), q_rows),
                (at(KBias), kv_rows),
                (at(VBias), kv_rows),
            ];
            layers.push(LayerWeights {
                attn_norm: w.vector(&[(at(AttnNorm), h)])?,
                qkv: w.matrix(&qkv, h)?,
                qkv_bias: cfg.qkv_bias.then(|| w.vector(&biases)).transpose()?,
                q_norm: cfg
                    .qk_norm
                    .then(|| w.vector(&[(at(QNorm), hd)]))
                    .transpose()?,
                k_norm: cfg
                    .qk_norm
                    .then(|| w.vector(&[(at(KNorm), hd)]))
                    .transpose()?,
                o: w.matrix(&[(at(O), h)], q_rows)?,
                ffn_norm: w.vector(&[(at(FfnNorm), h)])?,
                gate_up: w.matrix(&[(at(Gate), f), (at(Up), f)], h)?,
                down: w.matrix(&[(at(Down), h)], f)?,
            });
        }
        let final_norm = w.vector(&[(Weight::FinalNorm, h)])?;
        let head = match cfg.tied_embeddings {
            true => None,
            false => Some(w.matrix(&[(Weight::Head, cfg.vocab_size)], h)?),
        };
        Ok(Self {
            embed,
            layers,
            final_norm,
            head,
            rope_inv_freqs: gpu.stream.clone_htod(&cfg.rope_inv_freqs())?,
            bytes: w.bytes,
        })
    }

    /// Random weights of `cfg`'s shape (for speed measurements of model shapes without a
    /// file): matrices uniform in ±1/√cols, norms 1. Same `seed`, same weights.
    pub fn random(gpu: &Gpu, cfg: &ModelConfig, seed: u64) -> Result<Self> {
        let (h, hd, f) = (cfg.hidden_size, cfg.head_dim, cfg.ffn_size);
        let qkv_rows = (cfg.num_heads + 2 * cfg.num_kv_heads) * hd;
        let mut rng = seed | 1;
        let mut bytes = 0;
        let mut matrix = |rows: usize, cols: usize| -> Result<CudaSlice<bf16>> {
            let scale = 1.0 / (cols as f32).sqrt();
            let data: Vec<bf16> = (0..rows * cols)
                .map(|_| bf16::from_f32(scale * uniform(&mut rng)))
                .collect();
            bytes += data.len() * 2;
            Ok(gpu.stream.clone_htod(&data)?)
        };
        let ones =
            |n: usize| -> Result<CudaSlice<f32>> { Ok(gpu.stream.clone_htod(&vec![1.0f32; n])?) };
        let embed = matrix(cfg.vocab_size, h)?;
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for _ in 0..cfg.num_layers {
            layers.push(LayerWeights {
                attn_norm: ones(h)?,
                qkv: matrix(qkv_rows, h)?,
                qkv_bias: None,
                q_norm: None,
                k_norm: None,
                o: matrix(h, cfg.q_dim())?,
                ffn_norm: ones(h)?,
                gate_up: matrix(2 * f, h)?,
                down: matrix(h, f)?,
            });
        }
        let head = match cfg.tied_embeddings {
            true => None,
            false => Some(matrix(cfg.vocab_size, h)?),
        };
        Ok(Self {
            embed,
            layers,
            final_norm: ones(h)?,
            head,
            rope_inv_freqs: gpu.stream.clone_htod(&cfg.rope_inv_freqs())?,
            bytes,
        })
    }

    /// The output head: `head`, or the embedding table when tied.
    pub fn head(&self) -> &CudaSlice<bf16> {
        self.head.as_ref().unwrap_or(&self.embed)
    }
}

/// Uploads weights from a checkpoint and counts the bytes.
struct Uploader<'a> {
    gpu: &'a Gpu,
    source: &'a dyn TensorSource,
    bytes: usize,
}

impl Uploader<'_> {
    /// The checkpoint tensor of `weight`, checked to be `dims`.
    fn view(&self, weight: Weight, dims: &[usize]) -> Result<TensorView<'_>> {
        let t = self
            .source
            .require(weight)
            .map_err(|e| Error::Model(e.to_string()))?;
        t.expect_dims(dims)
            .map_err(|e| Error::Model(e.to_string()))?;
        Ok(t)
    }

    /// `parts` (`[rows_i, cols]` each) stacked into one `[Σ rows_i, cols]` bf16 matrix: each
    /// part is converted and copied into its rows on its own.
    fn matrix(&mut self, parts: &[(Weight, usize)], cols: usize) -> Result<CudaSlice<bf16>> {
        let rows: usize = parts.iter().map(|p| p.1).sum();
        let mut out = self.gpu.stream.alloc_zeros::<bf16>(rows * cols)?;
        let mut at = 0;
        for &(weight, r) in parts {
            let data = tensor_bf16(&self.view(weight, &[r, cols])?)?;
            let mut dst = out.slice_mut(at..at + data.len());
            self.gpu.stream.memcpy_htod(&data, &mut dst)?;
            at += data.len();
        }
        self.bytes += rows * cols * 2;
        Ok(out)
    }

    /// `parts` (`[len_i]` each) concatenated, in f32.
    fn vector(&mut self, parts: &[(Weight, usize)]) -> Result<CudaSlice<f32>> {
        let mut data = Vec::new();
        for &(weight, len) in parts {
            data.extend(tensor_f32(&self.view(weight, &[len])?)?);
        }
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
    use crate::gguf::{GgmlType, GgufBuilder, GgufFile};
    use crate::model::GgufSource;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn tensors_convert_to_bf16_from_any_type_and_bf16_passes_through() {
        let data = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]; // [2 rows, 3 cols]
        let file = GgufBuilder::new()
            .tensor(
                "token_embd.weight",
                &[3, 2],
                GgmlType::F32,
                f32_bytes(&data),
            )
            .build();
        let gguf = GgufFile::from_vec(file).unwrap();
        let source = GgufSource(&gguf);
        let t = source.require(Weight::Embed).unwrap();
        assert_eq!(t.dims, [2, 3]);
        let w = tensor_bf16(&t).unwrap();
        assert_eq!(w.iter().map(|x| x.to_f32()).collect::<Vec<_>>(), data);
        let bits: Vec<u8> = data
            .iter()
            .flat_map(|&x| bf16::from_f32(x).to_le_bytes())
            .collect();
        let view = TensorView {
            name: "w".into(),
            dtype: DType::BF16,
            dims: vec![2, 3],
            bytes: &bits,
            shared: None,
        };
        assert_eq!(tensor_bf16(&view).unwrap(), w);
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
            let view = TensorView {
                name: "w".into(),
                dtype: DType::Ggml(ty),
                dims: vec![4, 512],
                bytes: &bytes,
                shared: None,
            };
            let w = tensor_bf16(&view).unwrap();
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
