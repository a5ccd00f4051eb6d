//! A GGUF file as a checkpoint: the model's shape from its metadata (`{arch}.*` keys, as
//! llama.cpp writes them) and its tensors by llama.cpp's names.

use super::config::{ModelConfig, RopeLayout};
use super::rope::RopeScaling;
use super::tensors::{DType, TensorSource, TensorView, Weight};
use crate::gguf::{GgmlType, GgufFile};
use crate::{Error, Result};

/// Architectures whose GGUF tensors this engine runs.
pub const GGUF_ARCHITECTURES: &[&str] = &["llama", "mistral", "qwen2", "qwen3"];

impl ModelConfig {
    /// Reads the shape of a Llama-family model (`llama`, `mistral`, `qwen2`, `qwen3`) from GGUF
    /// metadata; every missing or inconsistent key is an error naming it, and what this engine
    /// does not compute (experts, unknown RoPE scaling) is refused by name.
    pub fn from_gguf(file: &GgufFile) -> Result<Self> {
        let arch = file.get_str("general.architecture")?.to_string();
        let rope_layout = match arch.as_str() {
            "llama" | "mistral" => RopeLayout::Adjacent,
            "qwen2" | "qwen3" => RopeLayout::HalfSplit,
            other => {
                return Err(Error::Model(format!(
                    "architecture {other:?} is not supported (supported: {})",
                    GGUF_ARCHITECTURES.join(", ")
                )));
            }
        };
        let key = |k: &str| format!("{arch}.{k}");
        let usize_of = |k: &str| -> Result<usize> { Ok(file.get_u64(&key(k))? as usize) };
        let optional = |k: &str| -> Result<Option<usize>> {
            file.get(&key(k)).map(|_| usize_of(k)).transpose()
        };
        if optional("expert_count")?.unwrap_or(0) > 0 {
            return Err(Error::Model(format!(
                "{arch}.expert_count is set: mixture-of-experts models are not supported"
            )));
        }
        let num_heads = usize_of("attention.head_count")?;
        let hidden_size = usize_of("embedding_length")?;
        let num_kv_heads = optional("attention.head_count_kv")?.unwrap_or(num_heads);
        let head_dim = match optional("attention.key_length")? {
            Some(d) => d,
            None => hidden_size.checked_div(num_heads).unwrap_or(0),
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
        let mut context_length = usize_of("context_length")?;
        if let Some(window) = optional("attention.sliding_window")?.filter(|&w| w > 0) {
            context_length = cap_to_window(context_length, window);
        }
        let config = Self {
            num_layers: usize_of("block_count")?,
            hidden_size,
            ffn_size: usize_of("feed_forward_length")?,
            num_heads,
            num_kv_heads,
            head_dim,
            rope_base,
            rope_layout,
            rope_scaling: gguf_rope_scaling(file, &arch)?,
            rms_norm_eps: file.get_f32(&key("attention.layer_norm_rms_epsilon"))?,
            context_length,
            vocab_size,
            tied_embeddings: file.tensor("output.weight").is_none(),
            qkv_bias: file.tensor("blk.0.attn_q.bias").is_some(),
            qk_norm: file.tensor("blk.0.attn_q_norm.weight").is_some(),
            architecture: arch,
        };
        config.validate()?;
        Ok(config)
    }
}

/// Sliding-window attention is not implemented: within the window it equals full attention,
/// so the served context is capped there instead of computing something else past it.
pub(super) fn cap_to_window(context_length: usize, window: usize) -> usize {
    if window < context_length {
        tracing::warn!(
            window,
            context_length,
            "sliding-window attention is not implemented: serving {window} tokens of context \
             (full attention equals the sliding window up to there)"
        );
        window
    } else {
        context_length
    }
}

/// `{arch}.rope.scaling.*` and the `rope_freqs` tensor, as llama.cpp writes them.
fn gguf_rope_scaling(file: &GgufFile, arch: &str) -> Result<RopeScaling> {
    let key = |k: &str| format!("{arch}.rope.scaling.{k}");
    if file.tensor("rope_freqs.weight").is_some() {
        let source = GgufSource(file);
        let factors = source.require(Weight::RopeFreqs)?.to_f32()?;
        return Ok(RopeScaling::FreqFactors(factors));
    }
    let kind = match file.get(&key("type")) {
        Some(_) => file.get_str(&key("type"))?.to_string(),
        None => "none".to_string(),
    };
    let factor = match file.get(&key("factor")) {
        Some(_) => f64::from(file.get_f32(&key("factor"))?),
        None => 1.0,
    };
    let original =
        || -> Result<usize> { Ok(file.get_u64(&key("original_context_length"))? as usize) };
    Ok(match kind.as_str() {
        "none" => RopeScaling::None,
        _ if factor == 1.0 => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor },
        "yarn" => {
            let beta = |k: &str, default: f64| -> Result<f64> {
                match file.get(&key(k)) {
                    Some(_) => Ok(f64::from(file.get_f32(&key(k))?)),
                    None => Ok(default),
                }
            };
            RopeScaling::Yarn {
                factor,
                original_context: original()?,
                beta_fast: beta("yarn_beta_fast", 32.0)?,
                beta_slow: beta("yarn_beta_slow", 1.0)?,
                attention_factor: RopeScaling::yarn_attention_factor(factor),
            }
        }
        other => {
            return Err(Error::Model(format!(
                "{arch}.rope.scaling.type = {other:?} is not supported (supported: none, \
                 linear, yarn, and llama3 through the rope_freqs tensor)"
            )));
        }
    })
}

/// A GGUF file's tensors under llama.cpp's names.
pub struct GgufSource<'a>(pub &'a GgufFile);

impl TensorSource for GgufSource<'_> {
    fn tensor(&self, weight: Weight) -> Result<Option<TensorView<'_>>> {
        let name = weight.gguf_name();
        let Some(info) = self.0.tensor(&name) else {
            return Ok(None);
        };
        // GGUF lists the innermost dimension first; views are row-major.
        let dims = info.dims.iter().rev().map(|&d| d as usize).collect();
        let dtype = match info.ggml_type {
            GgmlType::F32 => DType::F32,
            GgmlType::F16 => DType::F16,
            GgmlType::BF16 => DType::BF16,
            other => DType::Ggml(other),
        };
        Ok(Some(TensorView {
            bytes: self.0.tensor_data(&name)?,
            name,
            dtype,
            dims,
            shared: None,
        }))
    }

    fn name_of(&self, weight: Weight) -> String {
        weight.gguf_name()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::gguf::{GgufBuilder, Value, ValueType};

    /// GGUF metadata of a small `arch` model, plus `extra` keys.
    fn gguf(arch: &str, extra: &[(&str, Value)], tensors: &[(&str, Vec<f32>)]) -> GgufFile {
        let key = |k: &str| format!("{arch}.{k}");
        let mut b = GgufBuilder::new()
            .kv("general.architecture", Value::String(arch.into()))
            .kv(&key("block_count"), Value::U32(2))
            .kv(&key("embedding_length"), Value::U32(64))
            .kv(&key("feed_forward_length"), Value::U32(128))
            .kv(&key("attention.head_count"), Value::U32(4))
            .kv(&key("attention.head_count_kv"), Value::U32(2))
            .kv(&key("attention.layer_norm_rms_epsilon"), Value::F32(1e-6))
            .kv(&key("context_length"), Value::U32(4096))
            .kv(&key("rope.freq_base"), Value::F32(500_000.0))
            .kv(
                "tokenizer.ggml.tokens",
                Value::Array(ValueType::String, vec![Value::String("t".into()); 10]),
            );
        for (k, v) in extra {
            b = b.kv(&key(k), v.clone());
        }
        for (name, data) in tensors {
            let bytes = data.iter().flat_map(|x| x.to_le_bytes()).collect();
            b = b.tensor(name, &[data.len() as u64], GgmlType::F32, bytes);
        }
        GgufFile::from_vec(b.build()).unwrap()
    }

    #[test]
    fn llama3_scaling_comes_from_the_rope_freqs_tensor() {
        let factors: Vec<f32> = (0..8).map(|i| 1.0 + i as f32).collect();
        let file = gguf("llama", &[], &[("rope_freqs.weight", factors.clone())]);
        let c = ModelConfig::from_gguf(&file).unwrap();
        assert_eq!(c.rope_scaling, RopeScaling::FreqFactors(factors));
        assert_eq!((c.head_dim, c.rope_layout), (16, RopeLayout::Adjacent));
        let freqs = c.rope_inv_freqs();
        assert!((freqs[7] - 500_000f64.powf(-14.0 / 16.0) / 8.0).abs() < 1e-15);
    }

    #[test]
    fn yarn_and_linear_scaling_and_qwen3_heads_come_from_metadata() {
        let yarn = [
            ("rope.scaling.type", Value::String("yarn".into())),
            ("rope.scaling.factor", Value::F32(4.0)),
            ("rope.scaling.original_context_length", Value::U32(1024)),
            ("attention.key_length", Value::U32(32)),
        ];
        let c = ModelConfig::from_gguf(&gguf("qwen3", &yarn, &[])).unwrap();
        assert!(matches!(
            c.rope_scaling,
            RopeScaling::Yarn {
                original_context: 1024,
                ..
            }
        ));
        assert_eq!(
            (c.head_dim, c.q_dim(), c.rope_layout),
            (32, 128, RopeLayout::HalfSplit)
        );
        let linear = [
            ("rope.scaling.type", Value::String("linear".into())),
            ("rope.scaling.factor", Value::F32(2.0)),
        ];
        let c = ModelConfig::from_gguf(&gguf("llama", &linear, &[])).unwrap();
        assert_eq!(c.rope_scaling, RopeScaling::Linear { factor: 2.0 });
    }

    #[test]
    fn experts_unknown_scalings_and_windows_are_handled_by_name() {
        let err = ModelConfig::from_gguf(&gguf("llama", &[("expert_count", Value::U32(8))], &[]));
        assert!(
            err.unwrap_err()
                .to_string()
                .contains("llama.expert_count is set: mixture-of-experts")
        );
        let longrope = [
            ("rope.scaling.type", Value::String("longrope".into())),
            ("rope.scaling.factor", Value::F32(2.0)),
        ];
        let err = ModelConfig::from_gguf(&gguf("llama", &longrope, &[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"longrope\" is not supported"), "{err}");
        let window = [("attention.sliding_window", Value::U32(1024))];
        let c = ModelConfig::from_gguf(&gguf("mistral", &window, &[])).unwrap();
        assert_eq!(c.context_length, 1024, "capped at the window");
        let err = ModelConfig::from_gguf(&gguf("gemma3", &[], &[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"gemma3\" is not supported (supported: llama, mistral, qwen2, qwen3)"),
            "{err}"
        );
    }
}
